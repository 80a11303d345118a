"""A run cut into tasks: every planned segment with the offsets it owns, bin-packed by bytes.

`plan_tasks` bin-packs the plan's segments into tasks of roughly equal bytes (largest first onto the
lightest task), so Spark can spread them over every core.

Offset ownership: segment *i* of a partition owns the offsets from `max(start_exclusive + 1, base_i)`
to `min(end_inclusive, base_{i+1} - 1)` (its window). A record outside its segment's window is not
written, so overlapping segments can never write an offset twice (`dataplane/segment_windows.py`).
"""

from __future__ import annotations

import heapq
import math

from kafscale_iceberg.dataplane.reports import SegmentWindow, TaskAssignment
from kafscale_iceberg.domain.runs import RunPlan

# A task smaller than this costs more in scheduling than it saves in parallelism.
DEFAULT_MIN_TASK_BYTES = 8 * 1024 * 1024
# A task larger than this holds too much in one executor's memory at once.
DEFAULT_MAX_TASK_BYTES = 512 * 1024 * 1024


def segment_windows(plan: RunPlan) -> list[SegmentWindow]:
    """Every planned segment with the offsets it owns, in (partition, base offset) order."""
    windows: list[SegmentWindow] = []
    for partition in sorted(plan.partitions, key=lambda p: p.partition):
        segments = partition.segments
        for i, segment in enumerate(segments):
            upper = partition.end_inclusive
            if i + 1 < len(segments):
                upper = min(upper, segments[i + 1].base_offset - 1)
            windows.append(
                SegmentWindow(
                    partition=partition.partition,
                    key=segment.key,
                    base_offset=segment.base_offset,
                    last_offset=segment.last_offset,
                    size_bytes=segment.size_bytes,
                    first_owned=max(partition.start_exclusive + 1, segment.base_offset),
                    last_owned=upper,
                    range_first=partition.start_exclusive + 1,
                    range_last=partition.end_inclusive,
                )
            )
    return windows


def plan_tasks(
    plan: RunPlan,
    *,
    max_tasks: int,
    min_task_bytes: int = DEFAULT_MIN_TASK_BYTES,
    max_task_bytes: int = DEFAULT_MAX_TASK_BYTES,
    multiple_of: int = 1,
) -> tuple[TaskAssignment, ...]:
    """Bin-pack the plan's segments into tasks of roughly equal bytes.

    The task count is at most `max_tasks` (e.g. 2 x the cores) and the number of segments, at most
    one per `min_task_bytes`, and at least one per `max_task_bytes`; above `multiple_of` (the
    cores) it is rounded down to a multiple of it, so no last round of tasks runs on a few cores.
    Segments owning no offsets are left out. Deterministic: the same plan and limits give the same
    tasks, largest task first.
    """
    windows = [w for w in segment_windows(plan) if w.first_owned <= w.last_owned]
    if not windows:
        return ()
    total = sum(max(w.size_bytes, 1) for w in windows)
    count = min(max_tasks, len(windows), max(1, math.ceil(total / min_task_bytes)))
    at_least = math.ceil(total / max_task_bytes)
    count = max(1, min(len(windows), max(count, at_least)))
    if multiple_of > 1 and count > multiple_of and count - count % multiple_of >= at_least:
        count -= count % multiple_of
    bins: list[tuple[int, int]] = [(0, i) for i in range(count)]
    members: list[list[SegmentWindow]] = [[] for _ in range(count)]
    for window in sorted(windows, key=lambda w: (-w.size_bytes, w.partition, w.base_offset)):
        size, index = heapq.heappop(bins)
        members[index].append(window)
        heapq.heappush(bins, (size + max(window.size_bytes, 1), index))
    ordered = sorted(
        members,
        key=lambda ws: (-sum(w.size_bytes for w in ws), min((w.partition, w.base_offset) for w in ws)),
    )
    return tuple(
        TaskAssignment(index=i, segments=tuple(sorted(ws, key=lambda w: (w.partition, w.base_offset))))
        for i, ws in enumerate(ordered)
    )
