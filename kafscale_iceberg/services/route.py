"""The router: S3 notifications in, one work item per complete segment out.

Rules (AWS delivers S3 notifications at least once, unordered, and the two objects of a segment in
either order):
- `s3:TestEvent`, other buckets, objects that are not segments and unmapped topics are counted
  and logged, never errors;
- a work item is emitted for a `.kfs` only when its `.index` exists and the `.kfs` ends in `END!`
  (one 16-byte ranged GET, which also yields the last offset);
- a `.kfs` whose `.index` is not there yet is *retried later* (transient: the message is returned
  to the queue); a `.kfs` that does not end in `END!` can never become complete and is *rejected*
  with the reason (the broker writes each object once);
- an `.index` notification emits the work item of its `.kfs` when that has landed and ends in
  `END!` (the same ranged GET; no such `.kfs` yet, or not complete: counted as `index_object`, its
  own notification decides). The broker writes the `.kfs` first, so its notification often
  arrives before the `.index` exists; without this the segment waited for the retried message
  (the queue's visibility timeout) or the next launch of its topic. Both notifications of a
  segment may so give an item: the same key, deduplicated as below;
- duplicates are harmless: the FIFO queue deduplicates by segment key and the launcher plans from
  committed offsets, never from the item itself.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kafscale_iceberg.domain.events import ObjectCreated, WorkItem, parse_notification
from kafscale_iceberg.exceptions import (
    SegmentFormatError,
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
        outcome = RouteOutcome()
        for event in parse_notification(body, message_id):
            item = self._work_item_for(event, outcome.ignored)
            if item is not None:
                outcome.items.append(item)
        if outcome.items:
            self._work_queue.send_work_items(outcome.items)
        for item in outcome.items:
            logger.info(
                "work item enqueued",
                extra={"topic": item.topic, "partition": item.partition, "segment_key": item.key},
            )
        if outcome.ignored:
            logger.info("objects ignored", extra={"message_id": message_id, "ignored": dict(outcome.ignored)})
        return outcome

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
            return self._item_from_index(segment, ignored)
        if not self._segments.exists(segment.index_key):
            raise SegmentIncompleteError(
                f"{event.key}: its index {segment.index_key} has not landed yet; retrying later "
                "(if it never lands, the broker failed mid-flush and the reconciler reports it)"
            )
        footer = self._segments.read_footer(event.key)  # SegmentFormatError: never completes
        return _work_item(segment, footer.last_offset, size=event.size or 0, etag=event.etag)

    def _item_from_index(self, segment: SegmentId, ignored: Counter[str]) -> WorkItem | None:
        """The work item of the `.kfs` whose `.index` just landed, when the `.kfs` is there and
        complete; None (counted as `index_object`) when its own notification must decide."""
        try:
            footer, size = self._segments.read_footer_and_size(segment.segment_key)
        except (SegmentObjectMissingError, SegmentFormatError):
            # Not landed yet (its notification will find this index), or never complete (its
            # notification rejects it with the reason): nothing to add from here.
            ignored["index_object"] += 1
            return None
        return _work_item(segment, footer.last_offset, size=size)  # the size from the footer's GET


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
