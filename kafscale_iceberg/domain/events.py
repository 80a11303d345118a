"""S3 object-created notifications and per-topic work items.

S3 reaches the router two ways: an S3 event notification delivered to SQS (the stack-created bucket),
or an EventBridge "Object Created" event routed to the same queue (an existing KafScale bucket, which
a stack cannot add notifications to). Both become `ObjectCreated`. Keys are URL-decoded here, once.

A `WorkItem` tells the launcher a complete segment exists; the FIFO work queue groups items by topic
and deduplicates them by segment key (plus a nonce for deliberate replays).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kafscale_iceberg.exceptions import MalformedEventError
from kafscale_iceberg.segments.keys import decode_event_key


@dataclass(frozen=True)
class ObjectCreated:
    """One object written to the segments bucket."""

    bucket: str
    key: str
    size: int | None
    etag: str | None
    sequencer: str | None


def parse_notification(body: str, message_id: str = "?") -> list[ObjectCreated]:
    """Parse an SQS message body holding an S3 notification or an EventBridge S3 event.

    Returns [] for `s3:TestEvent` (sent by S3 when notifications are configured) and for events other
    than object creation. Raises `MalformedEventError` naming the message for anything unparsable.
    """
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedEventError(message_id, f"body is not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(payload, dict):
        raise MalformedEventError(message_id, "body is JSON but not an object")
    if payload.get("Event") == "s3:TestEvent":
        return []
    if "Records" in payload:
        return _from_s3_records(payload["Records"], message_id)
    if payload.get("source") == "aws.s3" and "detail" in payload:
        return _from_eventbridge(payload, message_id)
    raise MalformedEventError(
        message_id, "neither an S3 notification ('Records') nor an EventBridge S3 event"
    )


def _from_s3_records(records: Any, message_id: str) -> list[ObjectCreated]:
    if not isinstance(records, list):
        raise MalformedEventError(message_id, "'Records' is not a list")
    created = []
    for index, record in enumerate(records):
        try:
            if not str(record["eventName"]).startswith("ObjectCreated:"):
                continue
            s3 = record["s3"]
            obj = s3["object"]
            created.append(
                ObjectCreated(
                    bucket=str(s3["bucket"]["name"]),
                    key=decode_event_key(str(obj["key"])),
                    size=_optional_int(obj.get("size")),
                    etag=_optional_str(obj.get("eTag")),
                    sequencer=_optional_str(obj.get("sequencer")),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedEventError(message_id, f"Records[{index}] lacks {exc}") from None
    return created


def _from_eventbridge(payload: Mapping[str, Any], message_id: str) -> list[ObjectCreated]:
    if payload.get("detail-type") != "Object Created":
        return []
    try:
        detail = payload["detail"]
        obj = detail["object"]
        # EventBridge keys are not URL-encoded, unlike S3 notifications: decoding them would turn a
        # literal '+' into a space.
        return [
            ObjectCreated(
                bucket=str(detail["bucket"]["name"]),
                key=str(obj["key"]),
                size=_optional_int(obj.get("size")),
                etag=_optional_str(obj.get("etag")),
                sequencer=_optional_str(obj.get("sequencer")),
            )
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedEventError(message_id, f"EventBridge detail lacks {exc}") from None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


FIFO_ID_MAX = 128
"""SQS's limit on a FIFO message group id and a deduplication id (Kafka topics may have 249 characters)."""


def fifo_id(raw: str) -> str:
    """`raw` as a FIFO group or deduplication id: itself when it fits SQS's 128 characters, else
    `sha256-` and its SHA-256 in hex (71 characters, the same for the same `raw`)."""
    return raw if len(raw) <= FIFO_ID_MAX else "sha256-" + hashlib.sha256(raw.encode()).hexdigest()


def message_group_id(topic: str) -> str:
    """The FIFO message group of a topic's work items and signals (one group per topic)."""
    return fifo_id(topic)


class WorkItem(BaseModel):
    """A complete segment of a topic is ready: the launcher should plan a run for the topic."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int = Field(ge=0)
    base_offset: int = Field(ge=0)
    last_offset: int = Field(ge=0)
    key: str
    size: int = Field(ge=0)
    etag: str | None = None
    nonce: str | None = Field(
        default=None,
        description="set by replay, and by the router for a batch of a topic's segments, so the FIFO queue "
        "does not dedupe it",
    )

    @property
    def deduplication_id(self) -> str:
        """FIFO deduplication id: the segment key (<= 128 chars), plus the nonce (replay, router batch)."""
        raw = self.key if self.nonce is None else f"{self.key}#{self.nonce}"
        # SQS allows 128 characters; a long namespace plus a 249-character topic can exceed that.
        return fifo_id(raw)


class TopicSignal(BaseModel):
    """ "Look at this topic again": sent after a commit with segments waiting, after an abort's backoff,
    and by the reconciler. The launcher plans from committed offsets, so a signal needs no segment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    reason: str
    nonce: str = Field(description="unique per signal, so the FIFO queue does not dedupe it away")
    segment_ends: dict[int, int] = Field(
        default_factory=dict,
        description="by partition, an offset known to be a segment's last (a committed run's ends): "
        "the launcher lists after it without probing back for the segment holding it",
    )

    @property
    def deduplication_id(self) -> str:
        """FIFO deduplication id (<= 128 characters, unique per nonce whatever the topic's length)."""
        return fifo_id(f"signal#{self.topic}#{self.nonce}")

    def sqs_message(self) -> dict[str, str]:
        """The signal as SQS `SendMessage` fields; the state machine sends the abort's re-signal as the
        step gives it, so no FIFO id is built in ASL (the commit step's signal goes through the work
        queue adapter, which takes the same `message_group_id` and `deduplication_id`)."""
        return {
            "MessageBody": self.model_dump_json(),
            "MessageGroupId": message_group_id(self.topic),
            "MessageDeduplicationId": self.deduplication_id,
        }


def parse_topic_message(body: str, message_id: str = "?") -> WorkItem | TopicSignal:
    """Parse a work-queue message (a work item or a topic signal), or raise `MalformedEventError`."""
    try:
        return WorkItem.model_validate_json(body)
    except ValidationError:
        pass
    try:
        return TopicSignal.model_validate_json(body)
    except ValidationError as exc:
        raise MalformedEventError(
            message_id, f"neither a work item nor a topic signal: {exc.errors()[0]['msg']}"
        ) from None
