"""Choosing what a run reads: a topic's pending segments after its committed offsets, within limits.

Listing is per partition and starts *after* the committed offset (S3 `StartAfter` on the zero-padded
key), so planning costs O(new segments) requests, not O(all segments) like the Go processor's
every-poll full listing. Segment boundaries give every interior segment's last offset (the next base
minus one); only the last chosen segment of each partition needs its 16-byte footer read.

Rules:
- a segment is eligible only with both its `.kfs` and `.index` listed; the first segment of a
  partition that lacks its `.index` stops that partition (records are never skipped over);
- a segment whose base is at or below the committed offset is included only when it may still hold
  `committed + 1` (a committed offset in the middle of a segment: after moving from the Go processor
  or a deliberate offset reset);
- limits (bytes, segments) are shared across partitions round-robin in offset order, so one busy
  partition cannot starve the others; a run always takes at least one segment;
- with a minimum batch size, a topic whose pending bytes are below it waits until its oldest pending
  segment is `max_wait_seconds` old, so KafScale's one-segment-per-produce-request flushes batch up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kafscale_iceberg.domain.runs import NO_OFFSET


@dataclass(frozen=True)
class ListedSegment:
    """A segment as the listing shows it: its `.kfs` object and whether its `.index` is there."""

    partition: int
    base_offset: int
    key: str
    size_bytes: int
    has_index: bool
    last_modified_ms: int


@dataclass(frozen=True)
class RunLimits:
    """Bounds on one run (from the `runs` config section)."""

    max_bytes: int
    max_segments: int
    min_bytes: int = 0
    max_wait_seconds: float = 0.0


@dataclass(frozen=True)
class PartitionSelection:
    """The segments chosen for one partition, in base-offset order, and the committed offset."""

    partition: int
    committed: int
    segments: tuple[ListedSegment, ...]

    @property
    def last(self) -> ListedSegment:
        """The last chosen segment: the one whose footer gives the partition's end offset."""
        return self.segments[-1]

    def last_offsets(self, end_inclusive: int) -> list[int]:
        """Each chosen segment's last offset: the next base minus one, and `end_inclusive` for the last."""
        nexts = [s.base_offset - 1 for s in self.segments[1:]]
        return [*nexts, end_inclusive]


@dataclass(frozen=True)
class Selection:
    """What a run should read, or why it should wait."""

    partitions: tuple[PartitionSelection, ...] = ()
    pending_bytes: int = 0
    wait_seconds: float = 0.0
    blocked: tuple[ListedSegment, ...] = field(default=())
    """First segments of partitions that lack their `.index`: nothing after them is read yet."""
    held: Mapping[int, str] = field(default_factory=dict)
    """Partitions left out of this run, each with why (a malformed key or a corrupt segment in
    its way): they wait; the other partitions run."""

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to run now (nothing pending, or waiting for a minimum batch)."""
        return not self.partitions


def eligible_segments(
    committed: int, listed: Sequence[ListedSegment]
) -> tuple[list[ListedSegment], ListedSegment | None]:
    """The complete segments of one partition that may hold offsets after `committed`, in order.

    Returns them and the first segment that stopped the walk for lacking its `.index` (or None).
    `listed` may start before `committed` (a fallback listing); the caller's footer read of the last
    chosen segment decides whether a segment at or below `committed` really holds newer records.
    """
    ordered = sorted(listed, key=lambda s: s.base_offset)
    chosen: list[ListedSegment] = []
    for position, segment in enumerate(ordered):
        if segment.base_offset <= committed:
            following = ordered[position + 1] if position + 1 < len(ordered) else None
            if following is not None and following.base_offset <= committed + 1:
                continue  # a later segment starts at or before committed + 1: this one is done
        if not segment.has_index:
            return chosen, segment
        chosen.append(segment)
    return chosen, None


def needs_fallback_listing(committed: int, listed_after: Sequence[ListedSegment]) -> bool:
    """True when a listing that started after `committed` cannot show the segment holding `committed+1`.

    That happens when the committed offset sits in the middle of a segment (after a migration from
    the Go processor or an offset reset) or before a gap; only then is the partition listed from its
    start. Never for a partition with nothing committed, or whose next segment starts at `committed+1`.
    """
    if committed == NO_OFFSET:
        return False
    first = min((s.base_offset for s in listed_after), default=None)
    return first is None or first > committed + 1


def select_segments(
    committed: Mapping[int, int],
    eligible: Mapping[int, Sequence[ListedSegment]],
    limits: RunLimits,
    *,
    now_ms: int,
    blocked: Sequence[ListedSegment] = (),
) -> Selection:
    """Choose segments across partitions within `limits` (see the module docstring for the rules)."""
    queues = {p: list(segs) for p, segs in sorted(eligible.items()) if segs}
    pending_bytes = sum(s.size_bytes for segs in queues.values() for s in segs)
    if not queues:
        return Selection(blocked=tuple(blocked))
    if pending_bytes < limits.min_bytes:
        oldest_ms = min(s.last_modified_ms for segs in queues.values() for s in segs)
        waited_s = (now_ms - oldest_ms) / 1000
        if waited_s < limits.max_wait_seconds:
            return Selection(
                pending_bytes=pending_bytes,
                wait_seconds=limits.max_wait_seconds - waited_s,
                blocked=tuple(blocked),
            )
    chosen: dict[int, list[ListedSegment]] = {p: [] for p in queues}
    total_bytes = 0
    total_segments = 0
    while any(queues.values()):
        progressed = False
        for partition, queue in queues.items():
            if not queue:
                continue
            segment = queue[0]
            over = (
                total_segments >= limits.max_segments or total_bytes + segment.size_bytes > limits.max_bytes
            )
            if over and total_segments > 0:
                queue.clear()  # this partition stops here; keep its order, never skip a segment
                continue
            chosen[partition].append(queue.pop(0))
            total_bytes += segment.size_bytes
            total_segments += 1
            progressed = True
        if not progressed:
            break
    partitions = tuple(
        PartitionSelection(partition=p, committed=committed.get(p, NO_OFFSET), segments=tuple(segs))
        for p, segs in chosen.items()
        if segs
    )
    return Selection(partitions=partitions, pending_bytes=pending_bytes, blocked=tuple(blocked))
