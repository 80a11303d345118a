"""One task executed: fetch, decode, keep each segment's window, resolve LFS, convert, write.

`run_task` does one task's whole work in one process with pyarrow and returns a `TaskReport`. Spark
only distributes `run_task`; the pyarrow-only benchmark pipeline calls it directly. The parts:
the run cut into tasks (`assignments.py`: `plan_tasks`, `segment_windows`), one segment's records
against its window and its outcome (`segment_windows.py`), one mapping's conversion and routing
(`mapping_stage.py`), the task's writers per table (`table_files.py`), and the observation stage of
an inferred table (`observation.py`: `observe_task`). Those names are importable from here too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kafscale_iceberg.dataplane.assignments import (
    DEFAULT_MAX_TASK_BYTES,
    DEFAULT_MIN_TASK_BYTES,
    plan_tasks,
    segment_windows,
)
from kafscale_iceberg.dataplane.formats.schema_cache import task_schemas
from kafscale_iceberg.dataplane.lfs import LfsStage
from kafscale_iceberg.dataplane.mapping_stage import MappingStage
from kafscale_iceberg.dataplane.observation import observe_task
from kafscale_iceberg.dataplane.prefetch import ObjectRequest, PrefetchLimits, prefetch_objects
from kafscale_iceberg.dataplane.publishing import ConcurrentPublisher
from kafscale_iceberg.dataplane.reports import SegmentOutcome, TaskAssignment, TaskReport, TaskTimings
from kafscale_iceberg.dataplane.schemas import DEAD_LETTER_SCHEMA
from kafscale_iceberg.dataplane.segment_windows import in_window, overlapped, quarantine, segment_outcome
from kafscale_iceberg.dataplane.storage import segment_uri
from kafscale_iceberg.dataplane.table_files import TableFiles
from kafscale_iceberg.domain.runs import (
    CorruptSegmentPolicy,
    FailureKind,
    RunFailure,
    RunPlan,
    TableRole,
    deleted_keys_target,
)
from kafscale_iceberg.exceptions import LfsBlobUnavailableError, RegistryUnavailableError, SegmentFormatError
from kafscale_iceberg.ports import BlobReader, FileSink, ObjectReader, RecordSchemaRegistry
from kafscale_iceberg.segments.decode import decode_segment

__all__ = [
    "DEFAULT_MAX_TASK_BYTES",
    "DEFAULT_MIN_TASK_BYTES",
    "observe_task",
    "plan_tasks",
    "run_task",
    "segment_windows",
]


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
    registry: RecordSchemaRegistry | None = None,
) -> TaskReport:
    """Fetch, decode, filter, resolve LFS envelopes, convert and write one task's segments; never
    raises for bad data.

    Segments are fetched ahead of the work (`prefetch`: GETs and bytes in flight, ranged parts) and
    handled in (partition, base offset) order; finished files are published concurrently while the
    task goes on. A corrupt segment (policy `fail`), a segment or LFS blob that cannot be read, or
    (strict mode) an invalid record stops the task with a failure in the report, exactly where a
    sequential read would have stopped; files it already published stay under the run's prefix and
    are not listed. Unexpected errors (bugs, a full disk, a failed upload) propagate.
    `blobs` reads LFS blobs (needed when the plan's `lfs.mode` is resolve or hybrid); `registry`
    record schemas (a registered `value_format`), through one `SchemaCache` per task. A registry
    outage stops the task with a `registry_unavailable` failure (retried; nothing dead-lettered).
    """
    conversion = plan.conversion
    lfs = LfsStage(conversion.lfs, reader=blobs)
    publisher = ConcurrentPublisher(sink)
    files = TableFiles(publisher, task.index)
    schemas = task_schemas(registry, plan.schema_registry)
    stages = [
        MappingStage(plan, index, mapping, files, schemas) for index, mapping in enumerate(plan.mappings)
    ]
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
                outcomes.append(quarantine(plan, window, exc, len(data), dead_writer))
                files.count(plan.dead_letter_table.identifier, 1)
                clock.lap("write")
                continue
            clock.lap("decode")
            records = decoded.records
            kept = in_window(records, window)
            written = dead_lettered = 0
            conversion_failures: dict[str, int] = {}
            reasons: dict[str, int] = {}
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
                        rows, dead, failed, dead_kinds = stage.write(
                            converted, partition=window.partition, segment_key=window.key, routed=routed
                        )
                        written += rows
                        dead_lettered += dead
                        for column, count in failed.items():
                            conversion_failures[column] = conversion_failures.get(column, 0) + count
                        for kind, count in dead_kinds.items():
                            reasons[kind] = reasons.get(kind, 0) + count
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
            except RegistryUnavailableError as exc:
                clock.lap("convert")
                failure = RunFailure(
                    kind=FailureKind.REGISTRY_UNAVAILABLE, message=str(exc), segment_key=window.key
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
            outcome = segment_outcome(
                window,
                batches=decoded.batches,
                kept=kept,
                written=written,
                dead_lettered=dead_lettered,
                out_of_range=overlapped(records, window),
                size=len(data),
                header_keys_replaced=decoded.header_keys_replaced,
            )
            outcomes.append(
                outcome.model_copy(
                    update={
                        "skipped_lfs": skipped,
                        "lfs": lfs_counts,
                        "conversion_failures": conversion_failures,
                        "dead_letter_reasons": reasons,
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
        deleted_key_files=by_table.get(deleted_keys_target(plan.table).identifier, ()),
        timings=TaskTimings(**clock.timings),
    )
