"""The router: S3 notifications in, work items out: one per topic per batch of notifications.

Rules (AWS delivers S3 notifications at least once, unordered, and the two objects of a segment in
either order; the stack subscribes to `.index` objects only, so each segment costs one notification
and one ranged GET; the broker PUTs a segment's `.kfs` and `.index` concurrently, so an `.index` may
land first and is then redelivered until its `.kfs` is there):
- `s3:TestEvent`, other buckets, objects that are not segments and unmapped topics are counted
  and logged, never errors;
- a work item is emitted for a `.kfs` only when its `.index` exists and the `.kfs` ends in `END!`
  (one 16-byte ranged GET, which also yields the last offset);
- a `.kfs` whose `.index` is not there yet is *retried later* (transient: the message is returned
  to the queue); a `.kfs` that does not end in `END!` can never become complete and is *rejected*
  with the reason (the broker writes each object once);
- an `.index` notification emits the work item of its `.kfs` when that has landed and ends in
  `END!` (one ranged GET, which also yields the `.kfs`'s size and last offset); a `.kfs` not there
  yet is retried later, one that does not end in `END!` is rejected with the reason, as above. A
  bucket notifying both objects (a setup of the one-machine `run`) may so route a segment twice
  (the same key, deduplicated as below) and reject an incomplete one twice;
- duplicates are harmless: the FIFO queue deduplicates by segment key and the launcher plans from
  committed offsets, never from the item itself.

Per batch (`route_batch`, the router Lambda): the launcher plans a topic from its S3 listing, so one
item per topic says as much as one per segment. Each message is routed on its own (a failure is that
message's), then each topic with routed segments gets one item: its newest segment's, deduplicated
by the keys of every segment the batch routed for the topic (a redelivered batch is deduplicated
away; a batch with one more segment is not). Every segment of the batch is in S3 before its item is
sent, so the launch it causes lists them all; a topic whose item cannot be sent fails every message
that routed a segment of it, for SQS to redeliver.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kafscale_iceberg.domain.events import ObjectCreated, WorkItem, parse_notification
from kafscale_iceberg.exceptions import (
    KafscaleIcebergError,
    SegmentIncompleteError,
    SegmentKeyError,
    SegmentObjectMissingError,
)
from kafscale_iceberg.ports import SegmentReader, WorkQueue
from kafscale_iceberg.segments.keys import SegmentId, SegmentObjectKind, match_segment_key

logger = logging.getLogger(__name__)


@dataclass
class RouteOutcome:
    """What one routing call did."""

    items: list[WorkItem] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class RouterSettings:
    """What the router filters on."""

    bucket: str
    namespace: str
    is_mapped: Callable[[str], bool]


class Router:
    """Turns S3 notifications into work items (see the module docstring for the rules)."""

    def __init__(self, settings: RouterSettings, segments: SegmentReader, work_queue: WorkQueue) -> None:
        self._settings = settings
        self._segments = segments
        self._work_queue = work_queue

    def route_message(self, body: str, message_id: str) -> RouteOutcome:
        """Route one queue message; enqueue its work items.

        Raises `MalformedEventError` / `SegmentFormatError` (terminal: reject the message with the
        reason) or `SegmentIncompleteError` / `TransientError` (retry the message later).
        """
        outcome = self.items_for(body, message_id)
        if outcome.items:
            self._work_queue.send_work_items(outcome.items)
        for item in outcome.items:
            logger.info(
                "work item enqueued",
                extra={"topic": item.topic, "partition": item.partition, "segment_key": item.key},
            )
        return outcome

    def items_for(self, body: str, message_id: str) -> RouteOutcome:
        """The work items of one queue message, not enqueued; raises as `route_message`."""
        outcome = RouteOutcome()
        for event in parse_notification(body, message_id):
            item = self._work_item_for(event, outcome.ignored)
            if item is not None:
                outcome.items.append(item)
        if outcome.ignored:
            logger.info("objects ignored", extra={"message_id": message_id, "ignored": dict(outcome.ignored)})
        return outcome

    def batch(self) -> RouteBatch:
        """A batch of messages routed together: one work item per topic (the module docstring)."""
        return RouteBatch(self, self._work_queue)

    def _work_item_for(self, event: ObjectCreated, ignored: Counter[str]) -> WorkItem | None:
        if event.bucket != self._settings.bucket:
            ignored["other_bucket"] += 1
            return None
        try:
            parsed = match_segment_key(event.key, self._settings.namespace)
        except SegmentKeyError as exc:
            logger.warning("malformed segment key ignored", extra={"key": event.key, "problem": exc.problem})
            ignored["malformed_key"] += 1
            return None
        if parsed is None:
            ignored["not_a_segment"] += 1
            return None
        segment = parsed.segment
        if not self._settings.is_mapped(segment.topic):
            ignored["unmapped_topic"] += 1
            return None
        if parsed.kind is SegmentObjectKind.INDEX:
            return self._item_from_index(segment)
        if not self._segments.exists(segment.index_key):
            raise SegmentIncompleteError(
                f"{event.key}: its index {segment.index_key} has not landed yet; retrying later "
                "(if it never lands, the broker failed mid-flush and the reconciler reports it)"
            )
        footer = self._segments.read_footer(event.key)  # SegmentFormatError: never completes
        return _work_item(segment, footer.last_offset, size=event.size or 0, etag=event.etag)

    def _item_from_index(self, segment: SegmentId) -> WorkItem:
        """The work item of the `.kfs` whose `.index` just landed (one ranged GET).

        Raises `SegmentIncompleteError` when the `.kfs` is not there yet (retry later) and
        `SegmentFormatError` when it does not end in `END!` (it never will: reject).
        """
        try:
            footer, size = self._segments.read_footer_and_size(segment.segment_key)
        except SegmentObjectMissingError as exc:
            raise SegmentIncompleteError(
                f"{segment.index_key} landed before its segment {segment.segment_key}; retrying later "
                "(the broker uploads both objects at once: if the .kfs never lands, the reconciler reports "
                "the gap)"
            ) from exc
        return _work_item(segment, footer.last_offset, size=size)  # the size from the footer's GET


class RouteBatch:
    """Routes the messages of one batch, then enqueues one work item per topic (`send`)."""

    def __init__(self, router: Router, work_queue: WorkQueue) -> None:
        self._router = router
        self._work_queue = work_queue
        self._routed: dict[str, list[tuple[str, WorkItem]]] = {}

    def route(self, body: str, message_id: str) -> RouteOutcome:
        """Route one message of the batch; its items wait for `send`. Raises as `Router.route_message`."""
        outcome = self._router.items_for(body, message_id)
        for item in outcome.items:
            self._routed.setdefault(item.topic, []).append((message_id, item))
        return outcome

    def send(self) -> list[str]:
        """Enqueue one item per topic routed so far; the ids of the messages whose items could not be
        enqueued (every message that routed a segment, as one request sends every topic's item)."""
        if not self._routed:
            return []
        items = [batch_item([item for _, item in routed]) for routed in self._routed.values()]
        try:
            self._work_queue.send_work_items(items)
        except KafscaleIcebergError as exc:
            failed = sorted({message_id for routed in self._routed.values() for message_id, _ in routed})
            logger.warning("work items not enqueued", extra={"messages": len(failed), "error": str(exc)})
            return failed
        for item, routed in zip(items, self._routed.values(), strict=True):
            logger.info(
                "work item enqueued",
                extra={"topic": item.topic, "segments": len(routed), "segment_key": item.key},
            )
        self._routed.clear()
        return []


def batch_item(items: list[WorkItem]) -> WorkItem:
    """One topic's item for a batch of its segments: the last segment's, deduplicated by every
    segment key of the batch (`nonce`), so a redelivered batch is deduplicated and a larger one is not."""
    keys = sorted({item.key for item in items})
    if len(keys) == 1:
        return items[-1]
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:24]
    return items[-1].model_copy(update={"nonce": f"batch-{len(keys)}-{digest}"})


def _work_item(segment: SegmentId, last_offset: int, *, size: int = 0, etag: str | None = None) -> WorkItem:
    return WorkItem(
        topic=segment.topic,
        partition=segment.partition,
        base_offset=segment.base_offset,
        last_offset=last_offset,
        key=segment.segment_key,
        size=size,
        etag=etag,
    )
