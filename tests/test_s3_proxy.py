"""The benchmarks' S3 latency proxy in front of a real moto server: bytes intact, delays added."""

from __future__ import annotations

import time

import boto3
import pytest

from bench.s3_proxy import LatencyProxy
from tests.support.moto import MotoEndpoint


def test_requests_pass_through_with_first_byte_latency_and_a_bandwidth_cap(moto_server: MotoEndpoint) -> None:
    bucket = moto_server.new_bucket()
    payload = bytes(range(256)) * 4096  # 1 MiB
    direct = boto3.client("s3", endpoint_url=moto_server.url, region_name=moto_server.region)
    direct.put_object(Bucket=bucket, Key="big", Body=payload)
    direct.put_object(Bucket=bucket, Key="small", Body=b"tiny")

    with LatencyProxy.for_url(moto_server.url, latency_s=0.05, bandwidth_bytes_per_s=5e6) as proxy:
        client = boto3.client("s3", endpoint_url=proxy.url, region_name=moto_server.region)
        started = time.perf_counter()
        small = [client.get_object(Bucket=bucket, Key="small")["Body"].read() for _ in range(4)]
        small_s = time.perf_counter() - started
        started = time.perf_counter()
        big = client.get_object(Bucket=bucket, Key="big", Range="bytes=0-")["Body"].read()
        big_s = time.perf_counter() - started
        client.put_object(Bucket=bucket, Key="copy", Body=big)

    assert small == [b"tiny"] * 4
    assert big == payload
    assert direct.get_object(Bucket=bucket, Key="copy")["Body"].read() == payload
    assert small_s >= 4 * 0.05  # each request waited for its first byte
    assert big_s >= len(payload) / 5e6  # and a connection moves at most 5 MB/s
    assert proxy.requests >= 6


def test_injected_faults_answer_matching_requests_with_an_error_or_a_hang_until_cleared(
    moto_server: MotoEndpoint,
) -> None:
    """The outage tests' fault injection: S3 answering 503 SlowDown, SQS (JSON protocol) a 503, a hang
    ending in a closed connection; other requests pass meanwhile, and `clear()` ends it."""
    from botocore.config import Config
    from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

    from bench.s3_proxy import Fault

    bucket = moto_server.new_bucket()
    once = Config(retries={"max_attempts": 1}, read_timeout=5)
    with LatencyProxy.for_url(moto_server.url, latency_s=0.0) as proxy:
        s3 = boto3.client("s3", endpoint_url=proxy.url, region_name=moto_server.region, config=once)
        sqs = boto3.client("sqs", endpoint_url=proxy.url, region_name=moto_server.region, config=once)
        queue = sqs.create_queue(QueueName=f"{bucket}-q")["QueueUrl"]

        proxy.inject(Fault.answer(503, "SlowDown"), matching=lambda head: b"amazonsqs" not in head.lower())
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket=bucket, Key="k", Body=b"v")
        assert refused.value.response["Error"]["Code"] == "SlowDown"
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0).get("Messages") is None

        proxy.inject(
            Fault.answer(503, "ServiceUnavailable"), matching=lambda head: b"amazonsqs" in head.lower()
        )
        with pytest.raises(ClientError) as refused:
            sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0)
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503

        proxy.inject(Fault.hang(0.5))
        started = time.perf_counter()
        with pytest.raises((ConnectionClosedError, ReadTimeoutError)):
            s3.head_bucket(Bucket=bucket)
        assert time.perf_counter() - started >= 0.5

        proxy.clear()
        s3.put_object(Bucket=bucket, Key="k", Body=b"v")
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
