"""The run result: what the job writes beside the plan (`result.json`) and the commit step reads.

Versioned like the plan. A failed result lists no files, so nothing of a failed run can be committed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from kafscale_iceberg.domain.runs.columns import ColumnSpec, ColumnType
from kafscale_iceberg.domain.runs.documents import DocumentModel, Offset, PartitionNumber, PartitionValue
from kafscale_iceberg.domain.runs.plan import TableRole
from kafscale_iceberg.domain.runs.upsert import UpsertOutcome

RESULT_VERSION: Literal[1] = 1


class RunStatus(StrEnum):
    """How a Spark run ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


class FailureKind(StrEnum):
    """Why a run failed; decides whether retrying the same plan can help."""

    CORRUPT_SEGMENT = "corrupt_segment"
    STRICT_VALIDATION = "strict_validation"
    SEGMENT_UNAVAILABLE = "segment_unavailable"
    INVALID_PLAN = "invalid_plan"
    INTERNAL = "internal"
    BLOB_UNAVAILABLE = "blob_unavailable"
    """An LFS blob could not be read for a reason a retry or a fix may cure (throttling, 5xx, timeout,
    access denied): the run fails and is retried; the record is never dead-lettered for it."""
    REGISTRY_UNAVAILABLE = "registry_unavailable"
    """The schema registry was unreachable, timed out or answered 5xx: an outage, retried with
    backoff; the records are never dead-lettered for it."""


class RunFailure(DocumentModel):
    """What stopped a run, with the identifiers a person needs to act."""

    kind: FailureKind
    message: str
    segment_key: str | None = None
    position: int | None = None
    record_id: str | None = None
    column: str | None = None
    """The mapping column at fault, when one is (a strict-mode conversion failure, a required column)."""


class ColumnStats(DocumentModel):
    """One column's Iceberg metrics in a data file, taken from the footer the task had just written.

    Bounds are base64 of Iceberg's single-value serialization of the *written* type (`type`), over
    every row group; strings and binaries longer than `dataplane.file_stats.CARRIED_PREFIX` are
    carried as that prefix (`lower_cut`/`upper_cut`), enough for Iceberg's `truncate(16)` default.
    The commit step turns them into the table's metrics (field ids, metrics mode, truncation).
    """

    name: str
    type: ColumnType
    required: bool
    physical_type: str
    size_bytes: int = Field(ge=0)
    value_count: int = Field(ge=0)
    null_count: int | None = None
    has_stats: bool = True
    """Every row group had statistics (Iceberg keeps no null count or bounds otherwise)."""
    lower: str | None = None
    upper: str | None = None
    lower_cut: bool = False
    upper_cut: bool = False


class FileStats(DocumentModel):
    """A data file's Iceberg metrics, computed while it was written (no footer read at commit)."""

    split_offsets: tuple[int, ...] = ()
    columns: tuple[ColumnStats, ...] = ()


class DataFile(DocumentModel):
    """A Parquet file the run wrote, ready to be added to a table as it is.

    `stats` is None in results written before statistics were carried: the commit step then reads
    the file's footer.
    """

    uri: str
    record_count: int = Field(ge=0)
    size_bytes: int = Field(ge=0)
    partition_values: dict[str, PartitionValue] = Field(default_factory=dict)
    stats: FileStats | None = None


class OffsetGap(DocumentModel):
    """Offsets inside a partition's planned range that no segment contained (reported, not invented)."""

    first: Offset
    last: Offset


class QuarantinedSegment(DocumentModel):
    """A segment skipped under the `quarantine` policy; its identity went to the dead-letter table."""

    key: str
    base_offset: Offset
    last_offset: Offset
    error: str


class PartitionOutcome(DocumentModel):
    """What one partition's range produced."""

    partition: PartitionNumber
    first_offset: Offset | None = None
    last_offset: Offset | None = None
    max_timestamp_ms: int | None = None
    records_written: int = 0
    records_dead_lettered: int = 0
    records_overlapped: int = 0
    """Records repeated by an overlapping segment (offsets another segment of the run held: written once)."""
    gaps: tuple[OffsetGap, ...] = ()
    quarantined: tuple[QuarantinedSegment, ...] = ()


LFS_DURATION_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Bucket bounds of LFS resolution times, in seconds: `LfsCounts.duration_counts`'s layout and the
metric `lfs_resolution_duration_seconds`'s buckets (Prometheus' defaults, as the Go processor's)."""


class LfsCounts(DocumentModel):
    """What LFS resolution did in a run (or a segment): blobs resolved, errors by reason, durations.

    `errors` is keyed by reason (`decode`, `missing_blob`, `checksum`, `too_large`); each such record
    is a dead-letter row. `duration_counts[i]` / `duration_sums[i]` are the blobs whose resolution
    took at most the i-th bound of `LFS_DURATION_BUCKETS` (the last: more), and their seconds.
    """

    resolved: int = 0
    resolved_bytes: int = 0
    errors: dict[str, int] = Field(default_factory=dict)
    duration_counts: tuple[int, ...] = ()
    duration_sums: tuple[float, ...] = ()

    def plus(self, other: LfsCounts) -> LfsCounts:
        """The sum of two counts."""
        errors = dict(self.errors)
        for reason, count in other.errors.items():
            errors[reason] = errors.get(reason, 0) + count
        return LfsCounts(
            resolved=self.resolved + other.resolved,
            resolved_bytes=self.resolved_bytes + other.resolved_bytes,
            errors=errors,
            duration_counts=tuple(
                int(x + y) for x, y in _pad_zip(self.duration_counts, other.duration_counts)
            ),
            duration_sums=tuple(x + y for x, y in _pad_zip(self.duration_sums, other.duration_sums)),
        )


def _pad_zip(a: tuple[float, ...], b: tuple[float, ...]) -> list[tuple[float, float]]:
    width = max(len(a), len(b))
    return list(zip((*a, *(0,) * (width - len(a))), (*b, *(0,) * (width - len(b))), strict=True))


class RunCounts(DocumentModel):
    """Records by outcome across the run."""

    written: int = 0
    dead_lettered: int = 0
    out_of_range: int = 0
    control_batches: int = 0
    header_keys_replaced: int = 0
    """Header keys that were not UTF-8, kept with each invalid byte as U+FFFD (as Go stores them)."""
    segments_read: int = 0
    segment_bytes: int = 0
    skipped_lfs: int = 0
    """LFS envelopes left out by `lfs.mode: skip` (their offsets are committed)."""
    lfs: LfsCounts = LfsCounts()
    conversion_failures: dict[str, int] = Field(default_factory=dict)
    """Per mapping column: written records whose present value did not convert to the column's type
    (stored null; the `value` column keeps the bytes). Never silently null: counted here."""
    dead_letter_reasons: dict[str, int] = Field(default_factory=dict)
    """Dead-letter rows per `error_kind` (`invalid_json`, `undecodable`, `unknown_schema`, ...)."""


class RunTimings(DocumentModel):
    """Wall-clock timings of the Spark run, in seconds unless named otherwise.

    `session_start_s` is the Spark session start (0 when the session already existed), `process_s`
    the job from reading the plan to writing the result; the `task_*_s` are summed over the tasks
    (so they exceed `process_s` when tasks run in parallel).
    """

    started_at_ms: int
    ended_at_ms: int
    session_start_s: float = 0.0
    process_s: float = 0.0
    tasks: int = 0
    task_read_s: float = 0.0
    task_decode_s: float = 0.0
    task_convert_s: float = 0.0
    task_write_s: float = 0.0
    task_lfs_s: float = 0.0
    task_observe_s: float = 0.0
    """An inferred table's observation stage, summed over its tasks (0 for mapped columns)."""


class TableOutput(DocumentModel):
    """What a run wrote to one table besides the first mapping's `table` and `dead_letter_table` (see
    `RunResult.tables`): its files, rows, per column the values that did not convert, and for an
    inferred table the columns and field ids its files were written with."""

    identifier: str
    role: TableRole
    mapping: int = Field(default=0, ge=0)
    """The index of the topic's mapping that wrote it (in config order)."""
    files: tuple[DataFile, ...] = ()
    records: int = Field(default=0, ge=0)
    conversion_failures: dict[str, int] = Field(default_factory=dict)
    columns: tuple[ColumnSpec, ...] | None = None
    """An inferred mapping's table (in a run of several tables): the columns after the base fields its
    files were written with (the commit adds those the table lacks, in the same Iceberg commit as the
    files). None for every other table."""
    field_ids: dict[str, int] | None = None
    """With `columns`: the field ids its files carry (checked against the table by the commit step)."""


class RunResult(DocumentModel):
    """What the Spark job produced for a plan: files, per-partition outcomes, counts, or a failure.

    `data_files` / `dead_letter_files` are the files of the plan's `table` / `dead_letter_table` (the
    first mapping's); `tables` lists every other table the run wrote rows to (routed tables, other
    mappings' tables and dead letters), each once. `table_outputs(plan, result)` gives them all.
    """

    version: Literal[1] = RESULT_VERSION
    run_id: str
    topic: str
    status: RunStatus
    failure: RunFailure | None = None
    data_files: tuple[DataFile, ...] = ()
    dead_letter_files: tuple[DataFile, ...] = ()
    deleted_key_files: tuple[DataFile, ...] = ()
    """An upsert table (`conversion.upsert`): the records deleting their key, as files of base fields
    and key columns under the table's run prefix (`deleted_keys_target`); never added to a table."""
    upsert: UpsertOutcome | None = None
    """An upsert table: what the run's rewrite stage located and replaced (`execution/upsert_stage.py`);
    `data_files` are then the files to add (the run's rows, the table's files rewritten)."""
    partitions: tuple[PartitionOutcome, ...] = ()
    counts: RunCounts = RunCounts()
    timings: RunTimings
    tables: tuple[TableOutput, ...] = ()
    columns: tuple[ColumnSpec, ...] | None = None
    """An inferred table's columns (after the base fields) the data files were written with: the
    table's, then the new ones the commit step adds in the same Iceberg commit as the files. None
    for a mapping whose columns are not inferred."""
    field_ids: dict[str, int] | None = None
    """With `columns`: the field ids the data files carry (the plan's, and those the job gave the
    new columns); the commit step checks these against the table."""

    @model_validator(mode="after")
    def _failure_matches_status(self) -> RunResult:
        if (self.status is RunStatus.FAILED) != (self.failure is not None):
            raise ValueError("a failed result carries a failure, and only a failed one")
        if self.status is RunStatus.FAILED and (
            self.data_files
            or self.dead_letter_files
            or self.deleted_key_files
            or self.upsert is not None
            or any(t.files for t in self.tables)
        ):
            raise ValueError("a failed result lists no files: nothing of a failed run may be committed")
        names = [t.identifier for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError("a result lists each table once")
        return self
