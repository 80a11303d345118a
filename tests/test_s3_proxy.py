"""The benchmarks' S3 latency proxy in front of a real moto server: bytes intact, delays added."""

from __future__ import annotations

import time

import boto3

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
