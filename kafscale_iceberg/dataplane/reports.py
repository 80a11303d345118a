"""Task assignments and task reports (driver <-> executors), and the run result built from reports.

Assignments travel to executors and reports come back as JSON, so both are pydantic models. The
driver folds the reports into one `RunResult`: any failure makes the whole run failed with no files
(the failure with the lowest partition and offset is the one named, so the result does not depend
on task timing); otherwise every file, per-partition offsets, gaps and quarantined segments.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from kafscale_iceberg.domain.inference import TableObservation
from kafscale_iceberg.domain.runs import (
    DataFile,
    LfsCounts,
    OffsetGap,
    PartitionOutcome,
    PartitionPlan,
    QuarantinedSegment,
    RunCounts,
    RunFailure,
    RunPlan,
    RunResult,
    RunStatus,
    RunTimings,
    TableOutput,
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SegmentWindow(_Model):
    """A planned segment and the offsets it owns in this run, `[first_owned, last_owned]`."""

    partition: int
    key: str
    base_offset: int
    last_offset: int
    size_bytes: int
    first_owned: int
    last_owned: int
    range_first: int
    range_last: int
    """The run's range of the partition, `[range_first, range_last]`: a record inside it but outside
    the window is another segment's (an overlap, counted); one outside it was committed before or is
    beyond the run (read again by the next run), not counted."""


class TaskAssignment(_Model):
    """The segments one task reads, in (partition, base offset) order."""

    index: int = Field(ge=0)
    segments: tuple[SegmentWindow, ...]

    @property
    def size_bytes(self) -> int:
        """Planned bytes of the task's segments."""
        return sum(s.size_bytes for s in self.segments)


class TaskObservation(_Model):
    """What one task's records held, per destination table (the observation stage of an inferred
    table, `domain/inference.py`); nothing was written."""

    task_index: int = Field(ge=0)
    tables: dict[str, TableObservation] = Field(default_factory=dict)
    seconds: float = 0.0


class SegmentOutcome(_Model):
    """What one segment contributed: offsets it contained (its batches, clipped to its window) and rows."""

    partition: int
    key: str
    size_bytes: int = 0
    covered: tuple[tuple[int, int], ...] = ()
    records_written: int = 0
    records_dead_lettered: int = 0
    out_of_range: int = 0
    control_batches: int = 0
    header_keys_replaced: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    max_timestamp_ms: int | None = None
    quarantined: QuarantinedSegment | None = None
    skipped_lfs: int = 0
    lfs: LfsCounts = LfsCounts()
    conversion_failures: dict[str, int] = Field(default_factory=dict)
    dead_letter_reasons: dict[str, int] = Field(default_factory=dict)
    """Dead-letter rows written per `error_kind` (a quarantined segment: `corrupt_segment`)."""


class TaskTimings(_Model):
    """Seconds a task spent per stage."""

    read: float = 0.0
    decode: float = 0.0
    lfs: float = 0.0
    convert: float = 0.0
    write: float = 0.0


class TaskReport(_Model):
    """What one task did: files published, per-segment outcomes, or the failure that stopped it."""

    task_index: int
    segments: tuple[SegmentOutcome, ...] = ()
    data_files: tuple[DataFile, ...] = ()
    dead_letter_files: tuple[DataFile, ...] = ()
    deleted_key_files: tuple[DataFile, ...] = ()
    """An upsert table: files of the records deleting their key (base fields and key columns)."""
    tables: tuple[TableOutput, ...] = ()
    """A plan of several tables (`RunPlan.multi_table`): every table's files, in place of the two above."""
    failure: RunFailure | None = None
    failure_at: tuple[int, int] | None = Field(
        default=None, description="(partition, offset) of the failure, to pick the first one"
    )
    timings: TaskTimings = TaskTimings()


def failed_result(plan_run_id: str, topic: str, failure: RunFailure, timings: RunTimings) -> RunResult:
    """A failed result: the failure and no files (nothing of it may be committed)."""
    return RunResult(
        run_id=plan_run_id, topic=topic, status=RunStatus.FAILED, failure=failure, timings=timings
    )


def build_run_result(plan: RunPlan, reports: Sequence[TaskReport], timings: RunTimings) -> RunResult:
    """Fold task reports into the run's result (failed if any task failed)."""
    timings = _with_task_timings(timings, reports)
    failure = _first_failure(reports)
    if failure is not None:
        return failed_result(plan.run_id, plan.topic, failure, timings)
    outcomes = [o for r in reports for o in r.segments]
    partitions = tuple(
        _partition_outcome(p, [o for o in outcomes if o.partition == p.partition]) for p in plan.partitions
    )
    return RunResult(
        run_id=plan.run_id,
        topic=plan.topic,
        status=RunStatus.SUCCEEDED,
        data_files=_files_by_uri(f for r in reports for f in r.data_files),
        dead_letter_files=_files_by_uri(f for r in reports for f in r.dead_letter_files),
        deleted_key_files=_files_by_uri(f for r in reports for f in r.deleted_key_files),
        partitions=partitions,
        counts=_run_counts(outcomes),
        timings=timings,
        tables=merge_table_outputs(t for r in reports for t in r.tables),
    )


def _with_task_timings(timings: RunTimings, reports: Sequence[TaskReport]) -> RunTimings:
    """The run's timings with the tasks' stage times summed over its tasks."""
    return timings.model_copy(
        update={
            "tasks": len(reports),
            "task_read_s": sum(r.timings.read for r in reports),
            "task_decode_s": sum(r.timings.decode for r in reports),
            "task_convert_s": sum(r.timings.convert for r in reports),
            "task_write_s": sum(r.timings.write for r in reports),
            "task_lfs_s": sum(r.timings.lfs for r in reports),
        }
    )


def _first_failure(reports: Sequence[TaskReport]) -> RunFailure | None:
    """The failure at the lowest (partition, offset) of the failed tasks, saying how many others failed."""
    failures = [r for r in reports if r.failure is not None]
    if not failures:
        return None
    first = min(failures, key=lambda r: (r.failure_at or (2**31, 2**63), r.task_index))
    assert first.failure is not None
    if len(failures) == 1:
        return first.failure
    more = f" (and {len(failures) - 1} more failed task(s))"
    return first.failure.model_copy(update={"message": first.failure.message + more})


def _run_counts(outcomes: Sequence[SegmentOutcome]) -> RunCounts:
    """The run's records by outcome: its segments' counts summed."""
    return RunCounts(
        written=sum(o.records_written for o in outcomes),
        dead_lettered=sum(o.records_dead_lettered for o in outcomes),
        out_of_range=sum(o.out_of_range for o in outcomes),
        control_batches=sum(o.control_batches for o in outcomes),
        header_keys_replaced=sum(o.header_keys_replaced for o in outcomes),
        segments_read=len(outcomes),
        segment_bytes=sum(o.size_bytes for o in outcomes),
        skipped_lfs=sum(o.skipped_lfs for o in outcomes),
        lfs=functools.reduce(LfsCounts.plus, (o.lfs for o in outcomes), LfsCounts()),
        conversion_failures=sum_counts(o.conversion_failures for o in outcomes),
        dead_letter_reasons=sum_counts(o.dead_letter_reasons for o in outcomes),
    )


def _files_by_uri(files: Iterable[DataFile]) -> tuple[DataFile, ...]:
    return tuple(sorted(files, key=lambda f: f.uri))


def merge_table_outputs(outputs: Iterable[TableOutput]) -> tuple[TableOutput, ...]:
    """The tasks' outputs per table summed into one per table (files sorted by URI), by identifier."""
    merged: dict[str, TableOutput] = {}
    for output in outputs:
        known = merged.get(output.identifier)
        if known is None:
            merged[output.identifier] = output
            continue
        merged[output.identifier] = known.model_copy(
            update={
                "files": (*known.files, *output.files),
                "records": known.records + output.records,
                "conversion_failures": sum_counts((known.conversion_failures, output.conversion_failures)),
            }
        )
    return tuple(
        t.model_copy(update={"files": tuple(sorted(t.files, key=lambda f: f.uri))})
        for _, t in sorted(merged.items())
    )


def _partition_outcome(plan_partition: PartitionPlan, outcomes: Sequence[SegmentOutcome]) -> PartitionOutcome:
    firsts = [o.first_offset for o in outcomes if o.first_offset is not None]
    lasts = [o.last_offset for o in outcomes if o.last_offset is not None]
    stamps = [o.max_timestamp_ms for o in outcomes if o.max_timestamp_ms is not None]
    quarantined = sorted((o.quarantined for o in outcomes if o.quarantined), key=lambda q: q.base_offset)
    accounted = [span for o in outcomes for span in o.covered]
    accounted += [(q.base_offset, q.last_offset) for q in quarantined]
    return PartitionOutcome(
        partition=plan_partition.partition,
        first_offset=min(firsts) if firsts else None,
        last_offset=max(lasts) if lasts else None,
        max_timestamp_ms=max(stamps) if stamps else None,
        records_written=sum(o.records_written for o in outcomes),
        records_dead_lettered=sum(o.records_dead_lettered for o in outcomes),
        records_overlapped=sum(o.out_of_range for o in outcomes),
        gaps=tuple(
            OffsetGap(first=a, last=b)
            for a, b in missing_spans(
                plan_partition.start_exclusive + 1, plan_partition.end_inclusive, accounted
            )
        ),
        quarantined=tuple(quarantined),
    )


def sum_counts(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Counts by name added up, names in sorted order (a deterministic result)."""
    total: dict[str, int] = {}
    for each in counts:
        for name, count in each.items():
            total[name] = total.get(name, 0) + count
    return dict(sorted(total.items()))


def missing_spans(first: int, last: int, spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The inclusive spans of `[first, last]` that no span in `spans` covers, in order."""
    missing: list[tuple[int, int]] = []
    cursor = first
    for a, b in sorted(spans):
        if b < cursor:
            continue
        if a > cursor:
            missing.append((cursor, min(a - 1, last)))
        cursor = max(cursor, b + 1)
        if cursor > last:
            break
    if cursor <= last:
        missing.append((cursor, last))
    return [(a, b) for a, b in missing if a <= b]
