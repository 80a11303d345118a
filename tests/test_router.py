"""The router on moto server: real S3 notifications into SQS, one work item per complete segment."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, make_s3_client
from kafscale_iceberg.adapters.sqs_queues import SqsReceiver, SqsWorkQueue
from kafscale_iceberg.domain.events import WorkItem
from kafscale_iceberg.exceptions import MalformedEventError, SegmentFormatError, SegmentIncompleteError
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key
from kafscale_iceberg.segments.layout import SegmentFooter, build_footer
from kafscale_iceberg.services.route import Router, RouterSettings
from tests.support.moto import MotoEndpoint


class Pipeline:
    """A bucket notifying a standard queue, a FIFO work queue, and a router between them."""

    def __init__(self, moto: MotoEndpoint) -> None:
        self.s3: Any = moto.client("s3")
        self.sqs: Any = moto.client("sqs")
        self.bucket = moto.new_bucket()
        # Visibility 0: a message the router leaves undeleted is redelivered at the next receive.
        events_url = self.sqs.create_queue(
            QueueName=f"{self.bucket}-events", Attributes={"VisibilityTimeout": "0"}
        )["QueueUrl"]
        events_arn = self.sqs.get_queue_attributes(QueueUrl=events_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.s3.put_bucket_notification_configuration(
            Bucket=self.bucket,
            NotificationConfiguration={
                "QueueConfigurations": [{"QueueArn": events_arn, "Events": ["s3:ObjectCreated:*"]}]
            },
        )
        work_url = self.sqs.create_queue(
            QueueName=f"{self.bucket}-work.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"]
        self.events = SqsReceiver(self.sqs, events_url)
        self.work = SqsReceiver(self.sqs, work_url)
        client = make_s3_client(moto.s3_settings())
        self.router = Router(
            RouterSettings(bucket=self.bucket, namespace="prod", is_mapped=lambda topic: topic != "unmapped"),
            S3SegmentStore(client, self.bucket, "prod"),
            SqsWorkQueue(self.sqs, work_url),
        )

    def put_segment(
        self, topic: str, partition: int, base: int, *, index: bool = True, complete: bool = True
    ):
        body = b"x" * 32 + (build_footer(SegmentFooter(0, base + 4)) if complete else b"y" * 16)
        self.s3.put_object(
            Bucket=self.bucket, Key=format_segment_key("prod", topic, partition, base), Body=body
        )
        if index:
            self.put_index(topic, partition, base)

    def put_index(self, topic: str, partition: int, base: int) -> None:
        key = format_segment_key("prod", topic, partition, base, SegmentObjectKind.INDEX)
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=b"IDX\x00")

    def route_all(self) -> list[Exception]:
        """Route every pending notification once; a transiently failed one goes back to the queue."""
        errors: list[Exception] = []
        seen: set[str] = set()
        while messages := [m for m in self.events.receive(wait_seconds=0) if m.message_id not in seen]:
            for message in messages:
                seen.add(message.message_id)
                try:
                    self.router.route_message(message.body, message.message_id)
                except SegmentIncompleteError as exc:
                    errors.append(exc)
                    self.sqs.change_message_visibility(
                        QueueUrl=self.events.queue_url,
                        ReceiptHandle=message.receipt_handle,
                        VisibilityTimeout=0,
                    )
                    continue
                except (SegmentFormatError, MalformedEventError) as exc:
                    errors.append(exc)
                self.events.delete(message)
        return errors

    def work_items(self) -> list[Any]:
        items = []
        while messages := self.work.receive(wait_seconds=0):
            for message in messages:
                items.append(WorkItem.model_validate_json(message.body))
                self.work.delete(message)
        return items


@pytest.fixture
def pipeline(moto_server: MotoEndpoint) -> Pipeline:
    return Pipeline(moto_server)


def test_a_segment_put_produces_exactly_one_work_item(pipeline: Pipeline) -> None:
    pipeline.put_segment("orders", 0, 100)
    assert pipeline.route_all() == []
    (item,) = pipeline.work_items()
    assert (item.topic, item.partition, item.base_offset, item.last_offset) == ("orders", 0, 100, 104)
    assert item.key == "prod/orders/0/segment-00000000000000000100.kfs"
    assert item.size == 48


def test_duplicate_notifications_are_deduplicated_by_the_fifo_queue(pipeline: Pipeline) -> None:
    pipeline.put_segment("orders", 0, 0)
    (message,) = [
        m for m in pipeline.events.receive(wait_seconds=0) if "segment-" in m.body and ".kfs" in m.body
    ]
    for _ in range(3):
        pipeline.router.route_message(message.body, message.message_id)
    assert len(pipeline.work_items()) == 1


def test_segment_before_its_index_is_retried_then_routed(pipeline: Pipeline) -> None:
    pipeline.put_segment("orders", 1, 0, index=False)
    (error,) = pipeline.route_all()
    assert isinstance(error, SegmentIncompleteError)
    assert error.transient
    assert "segment-00000000000000000000.index" in str(error)
    assert pipeline.work_items() == []
    pipeline.put_index("orders", 1, 0)
    assert pipeline.route_all() == []  # the .kfs notification came back and now routes
    assert len(pipeline.work_items()) == 1


def test_the_index_landing_after_its_segment_routes_the_segment_at_once(pipeline: Pipeline) -> None:
    """The broker's order: `.kfs`, then `.index`. The `.kfs` notification routed in between is
    deferred (its message waits out the queue's visibility timeout, 10 s+ on AWS); the `.index`
    notification then gives the segment's item, without waiting for that retry."""
    pipeline.put_segment("orders", 2, 40, index=False)
    (kfs_message,) = [m for m in pipeline.events.receive(wait_seconds=0) if ".kfs" in m.body]
    with pytest.raises(SegmentIncompleteError):
        pipeline.router.route_message(kfs_message.body, kfs_message.message_id)
    # Not retried in this test: as if its visibility timeout had not run out yet.
    pipeline.put_index("orders", 2, 40)
    (index_message,) = [m for m in pipeline.events.receive(wait_seconds=0) if ".index" in m.body]
    outcome = pipeline.router.route_message(index_message.body, index_message.message_id)
    (item,) = outcome.items
    assert (item.topic, item.partition, item.base_offset, item.last_offset) == ("orders", 2, 40, 44)
    assert item.key == "prod/orders/2/segment-00000000000000000040.kfs"
    assert item.size == 48  # the .kfs's, from the footer's ranged GET (it used to be 0)
    assert [(i.key, i.last_offset) for i in pipeline.work_items()] == [(item.key, 44)]


def _index_messages(pipeline: Pipeline) -> list[Any]:
    return [m for m in pipeline.events.receive(wait_seconds=0) if ".index" in m.body]


def test_an_index_before_its_segment_is_retried_until_the_segment_lands(pipeline: Pipeline) -> None:
    """The stack notifies `.index` objects only: an index whose `.kfs` is not there is retried, never
    dropped (no `.kfs` notification will come to route the segment)."""
    pipeline.put_index("orders", 3, 0)
    (message,) = _index_messages(pipeline)
    with pytest.raises(SegmentIncompleteError, match=r"segment-00000000000000000000\.kfs") as raised:
        pipeline.router.route_message(message.body, message.message_id)
    assert raised.value.transient
    pipeline.put_segment("orders", 3, 0, index=False)
    outcome = pipeline.router.route_message(message.body, message.message_id)  # redelivered
    assert [(i.partition, i.base_offset, i.last_offset) for i in outcome.items] == [(3, 0, 4)]


def test_an_index_beside_an_incomplete_segment_is_rejected_with_the_key(pipeline: Pipeline) -> None:
    pipeline.put_segment("orders", 3, 9, complete=False)  # .kfs without END!, then its .index
    (message,) = _index_messages(pipeline)
    with pytest.raises(SegmentFormatError, match=r"segment-00000000000000000009\.kfs") as raised:
        pipeline.router.route_message(message.body, message.message_id)
    assert not raised.value.transient
    assert pipeline.work_items() == []


def _routed_batch(pipeline: Pipeline) -> tuple[Any, list[Any]]:
    """Every pending notification routed as one batch (the router Lambda's way)."""
    batch = pipeline.router.batch()
    messages = pipeline.events.receive(wait_seconds=0)
    for message in messages:
        batch.route(message.body, message.message_id)
    return batch, messages


def test_a_batch_enqueues_one_work_item_per_topic(pipeline: Pipeline) -> None:
    for base in (0, 10, 20):
        pipeline.put_segment("orders", 0, base)
    pipeline.put_segment("orders", 1, 0)
    pipeline.put_segment("payments", 0, 0)
    batch, _ = _routed_batch(pipeline)
    assert batch.send() == []
    items = pipeline.work_items()
    assert sorted(i.topic for i in items) == ["orders", "payments"]


def test_a_redelivered_batch_is_deduplicated_and_a_larger_one_is_not(pipeline: Pipeline) -> None:
    """A topic's item is deduplicated by every segment key of its batch: a batch routed again (a
    redelivery) adds nothing; one segment more is a new item, so that segment is not left unsignalled
    behind a deduplicated item."""
    pipeline.put_segment("orders", 0, 0)
    pipeline.put_segment("orders", 0, 10)
    messages = [m for m in pipeline.events.receive(wait_seconds=0) if ".kfs" in m.body]
    for _ in range(2):
        batch = pipeline.router.batch()
        for message in messages:
            batch.route(message.body, message.message_id)
        assert batch.send() == []
    assert len(pipeline.work_items()) == 1
    pipeline.put_segment("orders", 0, 20)
    more = [m for m in pipeline.events.receive(wait_seconds=0) if ".kfs" in m.body]
    batch = pipeline.router.batch()
    for message in messages + more:
        batch.route(message.body, message.message_id)
    assert batch.send() == []
    (item,) = pipeline.work_items()
    assert item.topic == "orders"


def test_a_batch_whose_items_cannot_be_sent_fails_the_messages_that_routed_segments(
    moto_server: MotoEndpoint,
) -> None:
    pipeline = Pipeline(moto_server)
    pipeline.put_segment("orders", 0, 0)
    pipeline.s3.put_object(Bucket=pipeline.bucket, Key="prod/orders/0/notes.txt", Body=b"x")
    # The work queue is gone (deleted): the send fails, as an SQS outage would.
    pipeline.sqs.delete_queue(QueueUrl=pipeline.work.queue_url)
    batch, messages = _routed_batch(pipeline)
    routed = {m.message_id for m in messages if "segment-" in m.body}
    assert len(routed) == 2  # the .kfs and the .index notification both routed the segment
    assert set(batch.send()) == routed


def test_both_notifications_of_a_segment_give_one_work_item(pipeline: Pipeline) -> None:
    """Routed after both objects landed, the `.kfs` and the `.index` notification each give the item:
    the FIFO queue keeps one (deduplicated by the segment key)."""
    pipeline.put_segment("orders", 0, 500)
    assert pipeline.route_all() == []
    assert [i.key for i in pipeline.work_items()] == ["prod/orders/0/segment-00000000000000000500.kfs"]


def test_a_segment_without_footer_magic_is_rejected_with_the_key(pipeline: Pipeline) -> None:
    pipeline.put_segment("orders", 0, 7, complete=False)
    errors = pipeline.route_all()
    assert len(errors) == 2  # this bucket notifies both objects: each notification rejects the segment
    for error in errors:
        assert isinstance(error, SegmentFormatError)
        assert not error.transient
        assert re.search(r"segment-00000000000000000007\.kfs", str(error))


def test_other_objects_and_unmapped_topics_are_counted_not_errors(pipeline: Pipeline) -> None:
    pipeline.s3.put_object(Bucket=pipeline.bucket, Key="prod/orders/lfs/2026/01/01/obj-1", Body=b"blob")
    pipeline.s3.put_object(Bucket=pipeline.bucket, Key="prod/orders/0/segment-1.kfs", Body=b"bad key")
    pipeline.put_segment("unmapped", 0, 0)
    outcomes = []
    while messages := pipeline.events.receive(wait_seconds=0):
        for message in messages:
            outcomes.append(pipeline.router.route_message(message.body, message.message_id))
            pipeline.events.delete(message)
    ignored = sum((o.ignored for o in outcomes), start=outcomes[0].ignored.__class__())
    assert ignored == {"not_a_segment": 1, "malformed_key": 1, "unmapped_topic": 2}
    assert pipeline.work_items() == []


def test_malformed_message_is_terminal(pipeline: Pipeline) -> None:
    with pytest.raises(MalformedEventError, match="m-9"):
        pipeline.router.route_message(json.dumps({"what": 1}), "m-9")
