"""S3 notifications (direct and through EventBridge) and work items, in the shapes AWS sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafscale_iceberg.domain.events import (
    ObjectCreated,
    TopicSignal,
    WorkItem,
    parse_notification,
    parse_topic_message,
)
from kafscale_iceberg.exceptions import MalformedEventError

EVENTS = Path(__file__).resolve().parent.parent / "events"


def _bodies(name: str) -> list[str]:
    return [record["body"] for record in json.loads((EVENTS / name).read_text())["Records"]]


def test_s3_test_event_is_skipped_and_put_is_parsed() -> None:
    test_event, put = _bodies("router_sqs_s3_notifications.json")
    assert parse_notification(test_event) == []
    assert parse_notification(put) == [
        ObjectCreated(
            bucket="kafscale-data",
            key="production/orders/0/segment-00000000000000000000.kfs",
            size=4194352,
            etag="d41d8cd98f00b204e9800998ecf8427e",
            sequencer="0055AED6DCD90281E5",
        )
    ]


def test_eventbridge_object_created_is_parsed_without_url_decoding() -> None:
    (body,) = _bodies("router_sqs_eventbridge.json")
    (event,) = parse_notification(body)
    assert event.key == "production/orders/0/segment-00000000000000000000.index"
    literal_plus = json.loads(body)
    literal_plus["detail"]["object"]["key"] = "ns/a+b/0/x"
    assert parse_notification(json.dumps(literal_plus))[0].key == "ns/a+b/0/x"


def test_notification_keys_are_url_decoded_as_moto_and_s3_encode_them() -> None:
    body = {
        "Records": [
            {
                "eventName": "ObjectCreated:Put",
                "s3": {
                    "bucket": {"name": "b"},
                    "object": {"key": "ns%2Forders%2F0%2Fsegment-00000000000000000000.kfs", "size": 1},
                },
            }
        ]
    }
    assert parse_notification(json.dumps(body))[0].key == "ns/orders/0/segment-00000000000000000000.kfs"


def test_non_creation_records_are_ignored() -> None:
    body = {"Records": [{"eventName": "ObjectRemoved:Delete", "s3": {}}]}
    assert parse_notification(json.dumps(body)) == []


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("not json", "not JSON"),
        ("[1]", "not an object"),
        ('{"hello": 1}', "neither"),
        ('{"Records": {}}', "not a list"),
        ('{"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {}}}]}', "Records[0]"),
    ],
)
def test_malformed_messages_name_the_message_and_the_problem(body: str, problem: str) -> None:
    with pytest.raises(MalformedEventError) as info:
        parse_notification(body, message_id="m-1")
    assert "m-1" in str(info.value)
    assert problem in str(info.value)
    assert not info.value.transient


def test_work_item_round_trip_and_deduplication_id() -> None:
    (record,) = json.loads((EVENTS / "launcher_sqs_fifo_work_items.json").read_text())["Records"]
    item = WorkItem.model_validate_json(record["body"])
    assert item.deduplication_id == record["attributes"]["MessageDeduplicationId"]
    assert WorkItem.model_validate_json(item.model_dump_json()) == item
    replayed = item.model_copy(update={"nonce": "replay-1"})
    assert replayed.deduplication_id != item.deduplication_id


def test_long_keys_get_a_bounded_deduplication_id() -> None:
    item = WorkItem(topic="t" * 249, partition=0, base_offset=0, last_offset=0, key="k" * 300, size=1)
    assert len(item.deduplication_id) <= 128


def test_invalid_work_item_is_malformed() -> None:
    with pytest.raises(MalformedEventError, match="m-2"):
        parse_topic_message('{"topic": "t"}', message_id="m-2")


def test_work_queue_messages_are_work_items_or_topic_signals() -> None:
    (record,) = json.loads((EVENTS / "launcher_sqs_fifo_work_items.json").read_text())["Records"]
    assert isinstance(parse_topic_message(record["body"]), WorkItem)
    signal = parse_topic_message('{"topic": "orders", "reason": "segments waiting", "nonce": "r1"}')
    assert isinstance(signal, TopicSignal)
    assert signal.deduplication_id == "signal#orders#r1"
    with pytest.raises(MalformedEventError, match="neither a work item nor a topic signal"):
        parse_topic_message('{"topic": "orders"}', message_id="m-3")
