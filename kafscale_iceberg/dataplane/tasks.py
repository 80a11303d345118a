"""A run split into tasks, and one task executed: fetch, decode, keep the range, convert, write.

`plan_tasks` bin-packs the plan's segments into tasks of roughly equal bytes (largest first onto the
lightest task), so Spark can spread them over every core; `run_task` does one task's whole work in
one process with pyarrow and returns a `TaskReport`. Spark only distributes `run_task`; the
pyarrow-only benchmark pipeline calls it directly.

Offset ownership: segment *i* of a partition owns the offsets from `max(start_exclusive + 1, base_i)`
to `min(end_inclusive, base_{i+1} - 1)` (its window). A record outside its segment's window is not
written, so overlapping segments can never write an offset twice; one inside the run's range (owned
by the next segment: an overlap) is counted `out_of_range` (`records_total{result="overlapped"}`),
while one at or before the committed offset (a segment read again from its start) or after the run's
end is not counted - it is neither repeated nor lost.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane.conversion import corrupt_segment_row
from kafscale_iceberg.dataplane.inference import ValueObserver
from kafscale_iceberg.dataplane.lfs import LfsStage
from kafscale_iceberg.dataplane.mapping_stage import MappingStage, TableFiles
from kafscale_iceberg.dataplane.parquet_files import RollingParquetWriter
from kafscale_iceberg.dataplane.prefetch import ObjectRequest, PrefetchLimits, prefetch_objects
from kafscale_iceberg.dataplane.publishing import ConcurrentPublisher
from kafscale_iceberg.dataplane.reports import (
    SegmentOutcome,
    SegmentWindow,
    TaskAssignment,
    TaskObservation,
    TaskReport,
    TaskTimings,
)
from kafscale_iceberg.dataplane.routing import RecordRouter
from kafscale_iceberg.dataplane.schemas import DEAD_LETTER_SCHEMA
from kafscale_iceberg.dataplane.storage import segment_uri
from kafscale_iceberg.domain.runs import (
    CorruptSegmentPolicy,
    FailureKind,
    QuarantinedSegment,
    RunFailure,
    RunPlan,
    TableRole,
    TableTarget,
)
from kafscale_iceberg.exceptions import LfsBlobUnavailableError, SegmentFormatError
from kafscale_iceberg.ports import BlobReader, FileSink, ObjectReader
from kafscale_iceberg.segments.decode import FramedBatch, decode_segment

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


@dataclass
class _Clock:
    timings: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("read", "decode", "lfs", "convert", "write"), 0.0)
    )
    _last: float = field(default_factory=time.perf_counter)

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.timings[stage] += now - self._last
        self._last = now


def run_task(
    plan: RunPlan,
    task: TaskAssignment,
    *,
    reader: ObjectReader,
    sink: FileSink,
    blobs: BlobReader | None = None,
    prefetch: PrefetchLimits | None = None,
) -> TaskReport:
    """Fetch, decode, filter, resolve LFS envelopes, convert and write one task's segments; never
    raises for bad data.

    Segments are fetched ahead of the work (`prefetch`: GETs and bytes in flight, ranged parts) and
    handled in (partition, base offset) order; finished files are published concurrently while the
    task goes on. A corrupt segment (policy `fail`), a segment or LFS blob that cannot be read, or
    (strict mode) an invalid record stops the task with a failure in the report, exactly where a
    sequential read would have stopped; files it already published stay under the run's prefix and
    are not listed. Unexpected errors (bugs, a full disk, a failed upload) propagate.
    `blobs` reads LFS blobs (needed when the plan's `lfs.mode` is resolve or hybrid).
    """
    conversion = plan.conversion
    lfs = LfsStage(conversion.lfs, reader=blobs)
    publisher = ConcurrentPublisher(sink)
    files = TableFiles(publisher, task.index)
    stages = [MappingStage(plan, index, mapping, files) for index, mapping in enumerate(plan.mappings)]
    dead_writer = files.writer(
        plan.dead_letter_table, DEAD_LETTER_SCHEMA, TableRole.DEAD_LETTER, 0, conversion
    )
    clock = _Clock()
    outcomes: list[SegmentOutcome] = []
    failure: RunFailure | None = None
    failure_at: tuple[int, int] | None = None
    requests = [ObjectRequest(segment_uri(plan.source, w.key), w.size_bytes) for w in task.segments]
    fetched = prefetch_objects(reader, requests, prefetch)
    try:
        for window, item in zip(task.segments, fetched, strict=True):
            if item.data is None:
                failure = RunFailure(
                    kind=FailureKind.SEGMENT_UNAVAILABLE,
                    message=f"segment {window.key} could not be read: {item.error}",
                    segment_key=window.key,
                )
                failure_at = (window.partition, window.base_offset)
                break
            data = item.data
            clock.lap("read")
            try:
                decoded = decode_segment(
                    data, source=window.key, partition=window.partition, verify_crc=conversion.verify_crc
                )
            except SegmentFormatError as exc:
                clock.lap("decode")
                if conversion.corrupt_segment_policy is CorruptSegmentPolicy.FAIL:
                    failure = RunFailure(
                        kind=FailureKind.CORRUPT_SEGMENT,
                        message=str(exc),
                        segment_key=window.key,
                        position=exc.position,
                    )
                    failure_at = (window.partition, window.base_offset)
                    break
                outcomes.append(_quarantine(plan, window, exc, len(data), dead_writer))
                files.count(plan.dead_letter_table.identifier, 1)
                clock.lap("write")
                continue
            clock.lap("decode")
            records = decoded.records
            kept = _in_window(records, window)
            written = dead_lettered = 0
            conversion_failures: dict[str, int] = {}
            invalid = None
            try:
                for part in lfs.parts(kept):
                    clock.lap("lfs")
                    for stage in stages:
                        converted, routed = stage.convert(
                            part.records,
                            partition=window.partition,
                            segment_key=window.key,
                            rejected=part.rejected,
                            lfs_metadata=part.metadata,
                        )
                        clock.lap("convert")
                        if converted.first_invalid is not None and stage.strict:
                            invalid = converted.first_invalid
                            break
                        rows, dead, failed = stage.write(
                            converted, partition=window.partition, segment_key=window.key, routed=routed
                        )
                        written += rows
                        dead_lettered += dead
                        for column, count in failed.items():
                            conversion_failures[column] = conversion_failures.get(column, 0) + count
                        clock.lap("write")
                    if invalid is not None:
                        break
            except LfsBlobUnavailableError as exc:
                clock.lap("lfs")
                failure = RunFailure(
                    kind=FailureKind.BLOB_UNAVAILABLE, message=str(exc), segment_key=window.key
                )
                failure_at = (window.partition, window.base_offset)
                break
            if invalid is not None:
                failure = RunFailure(
                    kind=FailureKind.STRICT_VALIDATION,
                    message=(
                        f"record {invalid.record_id} is invalid ({invalid.kind.value}): {invalid.error}; "
                        "schema mode is strict, so nothing of this run is committed"
                    ),
                    segment_key=window.key,
                    record_id=invalid.record_id,
                    column=invalid.column,
                )
                failure_at = (window.partition, invalid.offset)
                break
            skipped, lfs_counts = lfs.take_counts()
            outcome = _outcome(
                window,
                batches=decoded.batches,
                kept=kept,
                written=written,
                dead_lettered=dead_lettered,
                out_of_range=_overlapped(records, window),
                size=len(data),
                header_keys_replaced=decoded.header_keys_replaced,
            )
            outcomes.append(
                outcome.model_copy(
                    update={
                        "skipped_lfs": skipped,
                        "lfs": lfs_counts,
                        "conversion_failures": conversion_failures,
                    }
                )
            )
        fetched.close()
        if failure is not None:
            files.abort()
            publisher.wait()
            return TaskReport(
                task_index=task.index,
                segments=tuple(outcomes),
                failure=failure,
                failure_at=failure_at,
                timings=TaskTimings(**clock.timings),
            )
        outputs = files.close()
        publisher.wait()
        clock.lap("write")
    except BaseException:
        fetched.close()
        files.abort()
        publisher.wait(raise_errors=False)
        raise
    finally:
        lfs.close()
    if plan.multi_table:
        return TaskReport(
            task_index=task.index,
            segments=tuple(outcomes),
            tables=outputs,
            timings=TaskTimings(**clock.timings),
        )
    by_table = {o.identifier: o.files for o in outputs}
    assert plan.table is not None
    return TaskReport(
        task_index=task.index,
        segments=tuple(outcomes),
        data_files=by_table.get(plan.table.identifier, ()),
        dead_letter_files=by_table.get(plan.dead_letter_table.identifier, ()),
        timings=TaskTimings(**clock.timings),
    )


def observe_task(
    plan: RunPlan, task: TaskAssignment, *, reader: ObjectReader, prefetch: PrefetchLimits | None = None
) -> TaskObservation:
    """The observation stage of an inferred table: fetch and decode one task's segments and note what
    the fields of the records it owns hold (`dataplane/inference.py`); nothing is written.

    A segment that cannot be read or decoded is passed over here: the conversion stage that follows
    meets it again and applies the run's rules (fail, quarantine) with the error named.
    """
    started = time.perf_counter()
    observers: dict[str, ValueObserver] = {}
    inferred = [m for m in plan.mappings if m.conversion.infer_columns]
    routers = [RecordRouter(m.route, run_id=plan.run_id) if m.route is not None else None for m in inferred]
    requests = [ObjectRequest(segment_uri(plan.source, w.key), w.size_bytes) for w in task.segments]
    fetched = prefetch_objects(reader, requests, prefetch)
    try:
        for window, item in zip(task.segments, fetched, strict=True):
            if item.data is None:
                continue
            try:
                decoded = decode_segment(
                    item.data,
                    source=window.key,
                    partition=window.partition,
                    verify_crc=plan.conversion.verify_crc,
                )
            except SegmentFormatError:
                continue
            kept = _in_window(decoded.records, window)
            if not kept.num_rows:
                continue
            values = kept.column("value").combine_chunks()
            offsets = kept.column("offset").combine_chunks()
            for mapping, router in zip(inferred, routers, strict=True):
                if router is None:
                    assert mapping.table is not None
                    parts: tuple[tuple[TableTarget, np.ndarray | None], ...] = ((mapping.table, None),)
                else:  # each record observed for the table it is routed to (`split`'s rules)
                    parts = router.assign(values)
                for target, positions in parts:
                    observer = observers.get(target.identifier)
                    if observer is None:
                        observer = observers[target.identifier] = ValueObserver()
                    if positions is None:
                        observer.observe(values, offsets, partition=window.partition)
                    else:
                        at = pa.array(positions)
                        observer.observe(values.take(at), offsets.take(at), partition=window.partition)
    finally:
        fetched.close()
    return TaskObservation(
        task_index=task.index,
        tables={identifier: observer.observation() for identifier, observer in observers.items()},
        seconds=time.perf_counter() - started,
    )


def _in_window(records: pa.Table, window: SegmentWindow) -> pa.Table:
    """The records whose offset the segment owns (offsets increase, so usually all or a slice)."""
    if records.num_rows == 0:
        return records
    offsets = records.column("offset")
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if first >= window.first_owned and last <= window.last_owned:
        return records
    inside = pc.and_(pc.greater_equal(offsets, window.first_owned), pc.less_equal(offsets, window.last_owned))
    return records.filter(inside)


def _overlapped(records: pa.Table, window: SegmentWindow) -> int:
    """Records of the run's range that another segment owns (an overlap): not written here, counted.

    Records at or before the committed offset (a segment read again from its start) and after the
    run's end are not counted: they are neither repeated nor lost."""
    if records.num_rows == 0:
        return 0
    offsets = records.column("offset")
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if first >= window.first_owned and last <= window.last_owned:
        return 0
    in_range = pc.and_(
        pc.greater_equal(offsets, window.range_first), pc.less_equal(offsets, window.range_last)
    )
    owned = pc.and_(pc.greater_equal(offsets, window.first_owned), pc.less_equal(offsets, window.last_owned))
    return int(pc.sum(pc.and_(in_range, pc.invert(owned)).cast(pa.int64())).as_py() or 0)


def _outcome(
    window: SegmentWindow,
    *,
    batches: Sequence[FramedBatch],
    kept: pa.Table,
    written: int,
    dead_lettered: int,
    out_of_range: int,
    size: int,
    header_keys_replaced: int = 0,
) -> SegmentOutcome:
    covered: list[tuple[int, int]] = []
    control = 0
    for batch in batches:
        header = batch.header
        control += int(header.is_control)
        first = max(header.base_offset, window.first_owned)
        last = min(header.base_offset + header.last_offset_delta, window.last_owned)
        if first > last:
            continue
        if covered and first <= covered[-1][1] + 1:
            covered[-1] = (covered[-1][0], max(covered[-1][1], last))
        else:
            covered.append((first, last))
    first_offset = last_offset = max_timestamp = None
    if kept.num_rows:
        offsets = kept.column("offset").to_numpy()
        first_offset, last_offset = int(offsets[0]), int(offsets[-1])
        max_timestamp = int(np.max(kept.column("timestamp_ms").to_numpy()))
    return SegmentOutcome(
        partition=window.partition,
        key=window.key,
        size_bytes=size,
        covered=tuple(covered),
        records_written=written,
        records_dead_lettered=dead_lettered,
        out_of_range=out_of_range,
        control_batches=control,
        header_keys_replaced=header_keys_replaced,
        first_offset=first_offset,
        last_offset=last_offset,
        max_timestamp_ms=max_timestamp,
    )


def _quarantine(
    plan: RunPlan,
    window: SegmentWindow,
    error: SegmentFormatError,
    size: int,
    dead_writer: RollingParquetWriter,
) -> SegmentOutcome:
    # The offsets this run was to take from the segment: its window, cut at the planned last offset.
    first = window.first_owned
    last = min(window.last_owned, max(window.last_offset, first))
    message = f"byte {error.position}: {error.problem}"
    dead_writer.write(
        {},
        corrupt_segment_row(
            topic=plan.topic,
            partition=window.partition,
            segment_key=window.key,
            base_offset=first,
            last_offset=last,
            error=message,
            run_id=plan.run_id,
        ),
    )
    return SegmentOutcome(
        partition=window.partition,
        key=window.key,
        size_bytes=size,
        records_dead_lettered=1,
        quarantined=QuarantinedSegment(key=window.key, base_offset=first, last_offset=last, error=message),
    )
