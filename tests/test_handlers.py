"""The Lambda handlers with the event shapes AWS sends (samples in events/), on moto server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from functions import runtime
from kafscale_iceberg.domain.events import parse_work_item
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

EVENTS = Path(__file__).resolve().parent.parent / "events"


@dataclass
class LambdaContext:
    """The attributes Powertools reads from the Lambda context object."""

    function_name: str = "router"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:router"
    aws_request_id: str = "req-1"


@dataclass
class Stack:
    s3: Any
    sqs: Any
    bucket: str
    work_url: str
    rejected_url: str


@pytest.fixture
def stack(moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    s3: Any = moto_server.client("s3")
    sqs: Any = moto_server.client("sqs")
    bucket = moto_server.new_bucket()
    work_url = sqs.create_queue(QueueName=f"{bucket}-work.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    rejected_url = sqs.create_queue(QueueName=f"{bucket}-rejected")["QueueUrl"]
    config = {
        "s3": {"bucket": bucket, "namespace": "production", "endpoint": moto_server.url, "path_style": True},
        "iceberg": {"catalog": {"type": "glue"}, "warehouse": "s3://warehouse/w"},
        "offsets": {"backend": "sqlite", "sqlite_path": str(tmp_path / "o.sqlite")},
        "mappings": [{"topic": "orders", "table": "prod.orders"}],
        "notifications": {"work_queue_url": work_url, "rejected_queue_url": rejected_url},
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("KAFSCALE_ICEBERG_CONFIG", str(path))
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "KafScaleIceberg")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto_server.url)
    runtime.assembly.cache_clear()
    yield Stack(s3, sqs, bucket, work_url, rejected_url)
    runtime.assembly.cache_clear()


def _router_event(bucket: str) -> dict[str, Any]:
    event = json.loads((EVENTS / "router_sqs_s3_notifications.json").read_text())
    for record in event["Records"]:
        body = json.loads(record["body"])
        for notification in body.get("Records", []):
            notification["s3"]["bucket"]["name"] = bucket
        record["body"] = json.dumps(body)
    return event


def _drain(stack: Stack, url: str) -> list[dict[str, Any]]:
    messages = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    return list(messages.get("Messages", []))


def test_router_handler_turns_the_sample_notification_into_one_work_item(stack: Stack) -> None:
    from functions.router import handler

    put_segment(stack.s3, stack.bucket, "production", "orders", 0, 0, 5)
    response = handler(_router_event(stack.bucket), LambdaContext())
    assert response == {"batchItemFailures": []}
    (message,) = _drain(stack, stack.work_url)
    item = parse_work_item(message["Body"])
    assert (item.topic, item.partition, item.last_offset) == ("orders", 0, 4)


def test_router_handler_returns_an_incomplete_segment_for_redelivery(stack: Stack) -> None:
    from functions.router import handler

    stack.s3.put_object(
        Bucket=stack.bucket, Key="production/orders/0/segment-00000000000000000000.kfs", Body=b"x" * 64
    )
    event = _router_event(stack.bucket)
    response = handler(event, LambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][1]["messageId"]}]}
    assert _drain(stack, stack.work_url) == []


def test_router_handler_parks_a_hopeless_message_with_its_reason(stack: Stack) -> None:
    from functions.router import handler

    stack.s3.put_object(
        Bucket=stack.bucket, Key="production/orders/0/segment-00000000000000000000.kfs", Body=b"x" * 64
    )
    stack.s3.put_object(
        Bucket=stack.bucket, Key="production/orders/0/segment-00000000000000000000.index", Body=b"IDX"
    )
    response = handler(_router_event(stack.bucket), LambdaContext())
    assert response == {"batchItemFailures": []}
    (rejected,) = _drain(stack, stack.rejected_url)
    assert "END!" in rejected["MessageAttributes"]["reason"]["StringValue"]


def test_control_plane_functions_import_no_data_plane_libraries() -> None:
    import subprocess
    import sys

    code = (
        "import sys, functions.router, functions.launcher, functions.steps; "
        "print(sorted(m for m in ('pyarrow', 'pyiceberg', 'pyspark', 'numpy', 'numba') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
