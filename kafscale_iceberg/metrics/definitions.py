"""Every metric this product emits, defined once: name, kind, labels, help, CloudWatch unit; the
label values with a fixed set (`ErrorStage`, `RecordResult`, `RunOutcomeLabel`); and the one rule
mapping a failure to its `errors_total{stage}` (`error_stage`).

Names and labels are the KafScale Go processor's where they apply (`kafscale_processor_*` in
Prometheus, so its dashboards keep working), plus this product's own. See docs/architecture.md,
"Metrics", for what each one means and where it is emitted. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from kafscale_iceberg.domain.runs import LFS_DURATION_BUCKETS
from kafscale_iceberg.exceptions import CatalogError, CheckpointError, QueueUnavailableError

PROMETHEUS_NAMESPACE = "kafscale_processor"
"""The Go processor's namespace: its dashboards query `kafscale_processor_*`."""
EMF_NAMESPACE = "KafScaleIceberg"
"""The CloudWatch namespace of the Lambdas' EMF metrics."""

EMF_SERVICE = "kafscale-iceberg"
"""The `service` dimension every Lambda's Powertools `Metrics` object sets: one name for the whole stack,
so a metric two functions emit (the commit and abort steps' `consecutive_failures`) is one CloudWatch
metric, not one per function."""

EMF_PROPERTY_LABELS = frozenset({"partition"})
"""Labels that are always EMF properties (searchable in the log record), never CloudWatch dimensions:
every dimension value combination is a billed custom metric, and partitions multiply it."""

CLOUDWATCH_DIMENSION_VALUES: Mapping[str, int] = MappingProxyType(
    {"result": 6, "stage": 10, "outcome": 4, "cause": 2, "status": 5}
)
"""The labels kept as CloudWatch dimensions besides a per-topic metric's `topic`, with how many values
each takes (a fixed set: `RecordResult`, `ErrorStage`, `RunOutcomeLabel`, the Lambda runner's kill
causes, the launcher's statuses; tests/test_metrics_cost.py holds the counts to those sets). Every
other label (`topic` of an aggregated metric, `reason`, `column`, `table`, ...) is an EMF property:
in the log record, queryable with Logs Insights, not a billed metric."""


class MetricKind(StrEnum):
    """How a sample's value is applied: added (counter), set (gauge) or observed (histogram)."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricDef:
    """One metric: its name without namespace, kind, label names, help text and EMF unit."""

    name: str
    kind: MetricKind
    labels: tuple[str, ...]
    help: str
    unit: str
    """CloudWatch unit of the EMF metric (`Count`, `Seconds`, `Milliseconds`, `None`)."""
    buckets: tuple[float, ...] = ()
    """Histogram bucket upper bounds (Prometheus)."""
    per_topic: bool = False
    """CloudWatch keeps `topic` as a dimension (a billed metric per topic): only where an operator acts
    per topic. Prometheus keeps every label of every metric either way (a series costs nothing there)."""

    @property
    def emf_dimensions(self) -> tuple[str, ...]:
        """The labels that are CloudWatch dimensions: `topic` of a per-topic metric, and the labels
        with a fixed set of values (`CLOUDWATCH_DIMENSION_VALUES`); the others are EMF properties."""
        return tuple(
            label
            for label in self.labels
            if (label == "topic" and self.per_topic) or label in CLOUDWATCH_DIMENSION_VALUES
        )

    @property
    def emf_properties(self) -> tuple[str, ...]:
        """The labels written as EMF properties of the log record (not billed as metrics)."""
        return tuple(label for label in self.labels if label not in self.emf_dimensions)

    @property
    def cloudwatch_metrics_per_topic(self) -> int:
        """Billed CloudWatch metrics this definition adds per topic (0 unless `per_topic`)."""
        return self._combinations() if self.per_topic else 0

    @property
    def cloudwatch_metrics_aggregated(self) -> int:
        """Billed CloudWatch metrics this definition makes whatever the number of topics."""
        return 0 if self.per_topic else self._combinations()

    def _combinations(self) -> int:
        count = 1
        for label in self.emf_dimensions:
            count *= CLOUDWATCH_DIMENSION_VALUES.get(label, 1)
        return count


# -- the Go processor's metrics (IP/internal/metrics/metrics.go) -------------------------------------

RECORDS = MetricDef(
    "records_total",
    MetricKind.COUNTER,
    ("topic", "result"),
    "Records committed by result: written, dropped (already committed), invalid (dead-lettered), "
    "quarantined (in a quarantined segment), overlapped (repeated by an overlapping segment: "
    "written once, from the segment owning the offset).",
    "Count",
)
BATCHES = MetricDef(
    "batches_total",
    MetricKind.COUNTER,
    ("topic",),
    "Segments committed (the Go processor commits one per segment).",
    "Count",
)
WRITE_LATENCY = MetricDef(
    "write_latency_ms",
    MetricKind.HISTOGRAM,
    ("topic",),
    "Time to write a run into Iceberg: the Spark job's run time plus the commit step's, milliseconds.",
    "Milliseconds",
    buckets=(100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000),
)
ERRORS = MetricDef(
    "errors_total",
    MetricKind.COUNTER,
    ("stage",),
    "Errors by stage: discover, checkpoint, decode, lfs, schema, sink (the Go processor's), route, "
    "launch, job, replay.",
    "Count",
)
LAST_OFFSET = MetricDef(
    "last_offset",
    MetricKind.GAUGE,
    ("topic", "partition"),
    "Last committed offset (inclusive).",
    "None",
)
WATERMARK_OFFSET = MetricDef(
    "watermark_offset",
    MetricKind.GAUGE,
    ("topic", "partition"),
    "Watermark offset: the committed offset, as the watermark keys record it.",
    "None",
)
WATERMARK_TIMESTAMP = MetricDef(
    "watermark_timestamp_ms",
    MetricKind.GAUGE,
    ("topic", "partition"),
    "Timestamp of the newest committed record, Unix milliseconds.",
    "None",
)
LFS_RESOLVED = MetricDef(
    "lfs_resolved_total",
    MetricKind.COUNTER,
    ("topic",),
    "LFS blobs fetched, verified and written in place of their envelopes.",
    "Count",
)
LFS_RESOLVED_BYTES = MetricDef(
    "lfs_resolved_bytes_total",
    MetricKind.COUNTER,
    ("topic",),
    "Bytes of the LFS blobs resolved.",
    "Bytes",
)
LFS_RESOLUTION_ERRORS = MetricDef(
    "lfs_resolution_errors_total",
    MetricKind.COUNTER,
    ("topic", "reason"),
    "LFS envelopes that could not be used, by reason: decode, missing_blob, checksum, too_large "
    "(each is a dead-letter row; the Go processor drops them and counts decode or resolve).",
    "Count",
)
LFS_RESOLUTION_DURATION = MetricDef(
    "lfs_resolution_duration_seconds",
    MetricKind.HISTOGRAM,
    ("topic",),
    "Time to fetch and verify one LFS blob, seconds.",
    "Seconds",
    buckets=LFS_DURATION_BUCKETS,
)

# -- this product's ------------------------------------------------------------------------------------

RUNS = MetricDef(
    "runs_total",
    MetricKind.COUNTER,
    ("topic", "outcome"),
    "Runs by outcome: started, committed, already_committed (a replayed commit step), aborted.",
    "Count",
)
RUN_DURATION = MetricDef(
    "run_duration_seconds",
    MetricKind.HISTOGRAM,
    ("topic", "outcome"),
    "From the run's launch (plan written, lease claimed) to its commit or abort, seconds.",
    "Seconds",
    buckets=(5, 10, 30, 60, 120, 300, 600, 1_200, 1_800, 3_600, 7_200),
)
QUEUE_TO_START = MetricDef(
    "queue_to_start_latency_seconds",
    MetricKind.HISTOGRAM,
    ("topic",),
    "From the oldest planned segment's S3 LastModified to the Spark job's start, seconds.",
    "Seconds",
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1_800, 3_600),
)
LAG_RECORDS = MetricDef(
    "lag_records",
    MetricKind.GAUGE,
    ("topic", "partition"),
    "Offsets in complete segments after the committed offset.",
    "Count",
)
LAG_SECONDS = MetricDef(
    "lag_seconds",
    MetricKind.GAUGE,
    ("topic", "partition"),
    "Now minus the last committed record's timestamp while lag_records > 0, else 0.",
    "Seconds",
)
CONSECUTIVE_FAILURES = MetricDef(
    "consecutive_failures",
    MetricKind.GAUGE,
    ("topic",),
    "Runs of the topic's pending range aborted in a row (0 after a commit); alarm on it.",
    "Count",
    per_topic=True,
)
LAMBDA_RUNNER_KILLS = MetricDef(
    "lambda_runner_kills_total",
    MetricKind.COUNTER,
    ("topic", "cause"),
    "Runs Lambda killed in the Lambda runner (cause: timeout, out_of_memory); the topic's next runs go "
    "to EMR Serverless until one commits. Alarm on it: the topic's runs outgrow the Lambda runner.",
    "Count",
)
LAUNCHES = MetricDef(
    "launches_total",
    MetricKind.COUNTER,
    ("topic", "status"),
    "Launcher decisions by status: started, busy, idle, waiting, blocked.",
    "Count",
)
WORK_ITEMS = MetricDef(
    "work_items_total",
    MetricKind.COUNTER,
    ("topic",),
    "Complete segments the router routed (one per segment notification; the router Lambda enqueues "
    "one work item per topic per batch of them).",
    "Count",
)
NOTIFICATIONS_IGNORED = MetricDef(
    "notifications_ignored_total",
    MetricKind.COUNTER,
    ("reason",),
    "S3 objects the router ignored by reason (other_bucket, malformed_key, not_a_segment, unmapped_topic).",
    "Count",
)
NOTIFICATIONS_DEFERRED = MetricDef(
    "notifications_deferred_total",
    MetricKind.COUNTER,
    (),
    "Segment notifications returned for redelivery because the .kfs or its .index had not landed yet.",
    "Count",
)
CONVERSION_FAILURES = MetricDef(
    "conversion_failures_total",
    MetricKind.COUNTER,
    ("topic", "column"),
    "Committed records whose present value of a mapping column did not convert to its type "
    "(stored null; the value column keeps the bytes).",
    "Count",
)
COLUMN_RECORDS = MetricDef(
    "column_records_total",
    MetricKind.COUNTER,
    ("topic", "table", "column"),
    "Committed records that carried a mapping column (non-null, or present and not converted); a "
    "column whose count stays while records_total grows is one no record fills (a misnamed field). "
    "On CloudWatch every label is an EMF property (one aggregated metric, no per-column cost).",
    "Count",
)
DEAD_LETTERS = MetricDef(
    "dead_letters_total",
    MetricKind.COUNTER,
    ("topic", "reason"),
    "Dead-letter rows of committed runs per reason (the row's error_kind: invalid_json, undecodable, "
    "unknown_schema, wire_format, corrupt_segment, ...).",
    "Count",
    per_topic=True,
)
WATERMARK_AGE = MetricDef(
    "watermark_age_seconds",
    MetricKind.GAUGE,
    ("topic",),
    "Age of what a commit made visible: the commit's time minus the oldest of the newest record "
    "timestamps it committed per partition (freshness; lag, as it grows while runs fall behind). "
    "Alarm on it per topic.",
    "Seconds",
    per_topic=True,
)
TABLE_RECORDS = MetricDef(
    "table_records_total",
    MetricKind.COUNTER,
    ("topic", "table", "role"),
    "Rows of committed runs per table (`role` data or dead_letter), for a topic routed to several "
    "tables or feeding several mappings: where each record went.",
    "Count",
)
UPSERT_ROWS = MetricDef(
    "upsert_rows_total",
    MetricKind.COUNTER,
    ("topic", "table", "change"),
    "Keys an upsert table's committed runs changed: `inserted` (new), `updated` (a row replaced), "
    "`deleted` (a row removed).",
    "Count",
)
UPSERT_FILES_REWRITTEN = MetricDef(
    "upsert_files_rewritten_total",
    MetricKind.COUNTER,
    ("topic", "table"),
    "Data files an upsert table's committed runs rewrote without the rows of changed keys.",
    "Count",
)
UPSERT_BYTES_REWRITTEN = MetricDef(
    "upsert_bytes_rewritten_total",
    MetricKind.COUNTER,
    ("topic", "table"),
    "Bytes of the data files an upsert table's committed runs rewrote (as the table knew them).",
    "Bytes",
)
UPSERT_DELETE_FILES = MetricDef(
    "upsert_delete_files_total",
    MetricKind.COUNTER,
    ("topic", "table"),
    "Position delete files an upsert table's committed merge-on-read runs wrote.",
    "Count",
)
UPSERT_BYTES_LOCATED = MetricDef(
    "upsert_bytes_located_total",
    MetricKind.COUNTER,
    ("topic", "table"),
    "Bytes an upsert table's committed runs read from its data files to locate their changed keys.",
    "Bytes",
)


RECONCILER_SIGNALS = MetricDef(
    "reconciler_signals_total",
    MetricKind.COUNTER,
    (),
    "Topic signals a reconciler pass put on the work queue (topics the event path left behind).",
    "Count",
)
RECONCILER_RELEASED_LEASES = MetricDef(
    "reconciler_released_leases_total",
    MetricKind.COUNTER,
    (),
    "Leases a reconciler pass released because the run holding them had ended.",
    "Count",
)
REPLAY_SEGMENTS_ENQUEUED = MetricDef(
    "replay_segments_enqueued_total",
    MetricKind.COUNTER,
    ("topic",),
    "Segments a replay put back on the work queue.",
    "Count",
)
OFFSET_RESETS = MetricDef(
    "offset_resets_total",
    MetricKind.COUNTER,
    ("topic",),
    "Offset resets done by `replay --reset-offsets` (rows deleted and offsets rewound in one commit).",
    "Count",
)

MAINTENANCE_FILES_COMPACTED = MetricDef(
    "maintenance_files_compacted_total",
    MetricKind.COUNTER,
    (),
    "Small data files a maintenance pass replaced by compacted ones (committed compactions only).",
    "Count",
)
MAINTENANCE_SNAPSHOTS_EXPIRED = MetricDef(
    "maintenance_snapshots_expired_total",
    MetricKind.COUNTER,
    (),
    "Snapshots a maintenance pass expired.",
    "Count",
)
MAINTENANCE_ORPHANS_DELETED = MetricDef(
    "maintenance_orphans_deleted_total",
    MetricKind.COUNTER,
    (),
    "Orphan files (referenced by no snapshot) a maintenance pass deleted.",
    "Count",
)
OFFSET_GAPS = MetricDef(
    "offset_gaps_total",
    MetricKind.COUNTER,
    ("topic", "partition"),
    "Offsets inside committed ranges that no segment contained (reported, never invented).",
    "Count",
)

ALL_METRICS: tuple[MetricDef, ...] = (
    RECORDS,
    BATCHES,
    WRITE_LATENCY,
    ERRORS,
    LAST_OFFSET,
    WATERMARK_OFFSET,
    WATERMARK_TIMESTAMP,
    LFS_RESOLVED,
    LFS_RESOLVED_BYTES,
    LFS_RESOLUTION_ERRORS,
    LFS_RESOLUTION_DURATION,
    RUNS,
    RUN_DURATION,
    QUEUE_TO_START,
    LAG_RECORDS,
    LAG_SECONDS,
    CONSECUTIVE_FAILURES,
    WATERMARK_AGE,
    LAMBDA_RUNNER_KILLS,
    LAUNCHES,
    WORK_ITEMS,
    NOTIFICATIONS_IGNORED,
    NOTIFICATIONS_DEFERRED,
    OFFSET_GAPS,
    CONVERSION_FAILURES,
    COLUMN_RECORDS,
    DEAD_LETTERS,
    TABLE_RECORDS,
    UPSERT_ROWS,
    UPSERT_FILES_REWRITTEN,
    UPSERT_BYTES_REWRITTEN,
    UPSERT_DELETE_FILES,
    UPSERT_BYTES_LOCATED,
    RECONCILER_SIGNALS,
    RECONCILER_RELEASED_LEASES,
    REPLAY_SEGMENTS_ENQUEUED,
    OFFSET_RESETS,
    MAINTENANCE_FILES_COMPACTED,
    MAINTENANCE_SNAPSHOTS_EXPIRED,
    MAINTENANCE_ORPHANS_DELETED,
)


def custom_metrics_per_topic(metrics: tuple[MetricDef, ...] = ALL_METRICS) -> int:
    """CloudWatch custom metrics each topic adds (the `topic` dimension's metrics), from the definitions."""
    return sum(m.cloudwatch_metrics_per_topic for m in metrics)


def custom_metrics_aggregated(metrics: Iterable[MetricDef] = ALL_METRICS, *, idle: bool = False) -> int:
    """CloudWatch custom metrics of the stack whatever its topics (each dimension combination once);
    with `idle`, only those a stack with no traffic emits (the label-less ones of the scheduled
    reconciler and maintenance passes): CloudWatch bills a metric for the hours it receives data."""
    return sum(m.cloudwatch_metrics_aggregated for m in metrics if not (idle and m.labels))


class ErrorStage(StrEnum):
    """`errors_total{stage}`: the Go processor's stages, then this product's."""

    DISCOVER = "discover"
    CHECKPOINT = "checkpoint"
    DECODE = "decode"
    LFS = "lfs"
    SCHEMA = "schema"
    SINK = "sink"
    ROUTE = "route"
    LAUNCH = "launch"
    JOB = "job"
    REPLAY = "replay"


class RecordResult(StrEnum):
    """`records_total{result}`."""

    WRITTEN = "written"
    DROPPED = "dropped"
    INVALID = "invalid"
    QUARANTINED = "quarantined"
    OVERLAPPED = "overlapped"
    SKIPPED_LFS = "skipped_lfs"


class RunOutcomeLabel(StrEnum):
    """`runs_total{outcome}` and `run_duration_seconds{outcome}`."""

    STARTED = "started"
    COMMITTED = "committed"
    ALREADY_COMMITTED = "already_committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class Sample:
    """One value for one metric and label set: added to a counter, set on a gauge, observed by a histogram."""

    metric: MetricDef
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)
    count: int = 1
    """Histograms: how many observations of `value` (Prometheus observes it `count` times; EMF, which
    keeps a list of values per record, gets it once)."""

    def __post_init__(self) -> None:
        if set(self.labels) != set(self.metric.labels):
            raise ValueError(
                f"metric {self.metric.name} takes labels {list(self.metric.labels)}, "
                f"got {sorted(self.labels)}"
            )
        empty = [name for name, value in self.labels.items() if not value]
        if empty:
            raise ValueError(f"metric {self.metric.name}: empty value for label(s) {empty}")
        if self.metric.kind is MetricKind.COUNTER and self.value < 0:
            raise ValueError(f"counter {self.metric.name} cannot go down (value {self.value})")
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))


def sample(metric: MetricDef, value: float, **labels: object) -> Sample:
    """A `Sample` with label values turned into strings (`partition=3` -> `"3"`)."""
    return Sample(metric, float(value), {name: str(v) for name, v in labels.items()})


def error_stage(error: BaseException, *, default: ErrorStage) -> ErrorStage:
    """The `errors_total{stage}` a failure counts under: the dependency that failed when the error
    names one - `checkpoint` (the checkpoint store, a lease lost included), `sink` (the Iceberg
    catalog), `route` (a queue) - else `default`, the stage the caller was in.

    The one rule every emitter uses (the Lambdas and the one-machine loop), so the same failure
    counts under the same stage wherever it happens.
    """
    if isinstance(error, CheckpointError):
        return ErrorStage.CHECKPOINT
    if isinstance(error, CatalogError):
        return ErrorStage.SINK
    if isinstance(error, QueueUnavailableError):
        return ErrorStage.ROUTE
    return default
