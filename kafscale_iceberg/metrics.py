"""Metrics: every metric this product emits, defined once; two sinks; the helpers that compute emissions.

The Lambda handlers (EMF through Powertools) and the one-machine `run` (Prometheus `/metrics`) call the
same `record_*` helpers with the same domain objects, so both report the same numbers the same way.

Names and labels are the KafScale Go processor's where they apply (`kafscale_processor_*` in
Prometheus, so its dashboards keep working), plus this product's own. See docs/architecture.md,
"Metrics", for what each one means and where it is emitted.

This module imports only the standard library at import time: the router and launcher Lambdas load
it and must not load pyarrow, pyspark or pyiceberg. `prometheus_client` is imported by
`PrometheusMetricsSink` when one is built (the `local` extra installs it).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from kafscale_iceberg.exceptions import CheckpointError, ConfigError, KafscaleIcebergError, MetricsServerError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from kafscale_iceberg.domain.runs import RunPlan, RunResult
    from kafscale_iceberg.services.commit import CommitOutcome
    from kafscale_iceberg.services.launch import LaunchOutcome
    from kafscale_iceberg.services.route import RouteOutcome
    from kafscale_iceberg.services.status import StatusReport

PROMETHEUS_NAMESPACE = "kafscale_processor"
"""The Go processor's namespace: its dashboards query `kafscale_processor_*`."""
EMF_NAMESPACE = "KafScaleIceberg"
"""The CloudWatch namespace of the Lambdas' EMF metrics."""
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""What Go's client (the Go processor) serves; every Prometheus version reads it. Our names and labels
are plain ASCII, so prometheus_client's text output is this format whatever version it announces."""
METRICS_ADDR_ENV = "KAFSCALE_METRICS_ADDR"
DEFAULT_METRICS_ADDR = ":9093"

EMF_PROPERTY_LABELS = frozenset({"partition"})
"""Labels that are EMF properties (searchable in the log record), never CloudWatch dimensions: every
dimension value combination is a billed custom metric, and partitions multiply it."""


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

    @property
    def emf_dimensions(self) -> tuple[str, ...]:
        """The labels that are EMF dimensions (all but `EMF_PROPERTY_LABELS`)."""
        return tuple(label for label in self.labels if label not in EMF_PROPERTY_LABELS)


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
    "launch, job.",
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
LFS_DURATION_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Bucket bounds of `lfs_resolution_duration_seconds` (Prometheus' defaults, as the Go processor's)."""
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
    "Work items the router enqueued (one per complete segment notification).",
    "Count",
)
NOTIFICATIONS_IGNORED = MetricDef(
    "notifications_ignored_total",
    MetricKind.COUNTER,
    ("reason",),
    "S3 objects the router ignored by reason (other_bucket, malformed_key, not_a_segment, "
    "unmapped_topic, index_object).",
    "Count",
)
NOTIFICATIONS_DEFERRED = MetricDef(
    "notifications_deferred_total",
    MetricKind.COUNTER,
    (),
    "Segment notifications returned for redelivery because the .index had not landed yet.",
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
    LAUNCHES,
    WORK_ITEMS,
    NOTIFICATIONS_IGNORED,
    NOTIFICATIONS_DEFERRED,
    OFFSET_GAPS,
    CONVERSION_FAILURES,
)


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


class MetricsSink(Protocol):
    """Where samples go: Prometheus (one-machine `run`) or CloudWatch EMF (the Lambdas)."""

    def emit(self, samples: Sequence[Sample]) -> None:
        """Record the samples (counters added, gauges set, histograms observed)."""
        ...


# -- Prometheus ------------------------------------------------------------------------------------


class PrometheusMetricsSink:
    """Every metric of `ALL_METRICS` in its own `CollectorRegistry` (never the process-global one).

    Thread-safe (prometheus_client's metrics are). Needs `prometheus-client` (the `local` extra).
    """

    def __init__(self, namespace: str = PROMETHEUS_NAMESPACE) -> None:
        from prometheus_client import (  # noqa: PLC0415
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
        )

        self.registry: CollectorRegistry = CollectorRegistry()
        self._collectors: dict[str, Any] = {}
        for metric in ALL_METRICS:
            common: dict[str, Any] = {
                "name": metric.name,
                "documentation": metric.help,
                "labelnames": metric.labels,
                "namespace": namespace,
                "registry": self.registry,
            }
            if metric.kind is MetricKind.COUNTER:
                self._collectors[metric.name] = Counter(**common)
            elif metric.kind is MetricKind.GAUGE:
                self._collectors[metric.name] = Gauge(**common)
            else:
                self._collectors[metric.name] = Histogram(**common, buckets=metric.buckets)

    def emit(self, samples: Sequence[Sample]) -> None:
        """Apply each sample to its collector."""
        for item in samples:
            collector = self._collectors[item.metric.name]
            child = collector.labels(**item.labels) if item.metric.labels else collector
            if item.metric.kind is MetricKind.COUNTER:
                child.inc(item.value)
            elif item.metric.kind is MetricKind.GAUGE:
                child.set(item.value)
            else:
                for _ in range(item.count):
                    child.observe(item.value)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format (what `GET /metrics` returns)."""
        from prometheus_client import generate_latest  # noqa: PLC0415

        return generate_latest(self.registry)


def parse_metrics_address(text: str) -> tuple[str, int]:
    """`host:port` as Go's `net.Listen` takes it: `:9093` (every interface), `0.0.0.0:9093`,
    `127.0.0.1:0` (any free port), `[::1]:9093`.

    Raises `ConfigError` naming `KAFSCALE_METRICS_ADDR` when the text is not such an address.
    """
    value = text.strip()
    host, separator, port_text = value.rpartition(":")
    problem = ""
    if not separator:
        problem = "has no ':port'"
    elif not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        problem = f"port {port_text!r} is not a number from 0 to 65535"
    elif host.startswith("[") != host.endswith("]"):
        problem = "has an unbalanced '[' ']' around the host"
    elif ":" in host.strip("[]") and not host.startswith("["):
        problem = "an IPv6 host must be in brackets, e.g. '[::1]:9093'"
    elif any(c.isspace() for c in host):
        problem = "the host contains whitespace"
    if problem:
        raise ConfigError(
            METRICS_ADDR_ENV,
            f"{text!r} {problem}; expected host:port such as ':9093' (all interfaces), '0.0.0.0:9093' "
            "or '127.0.0.1:0' (any free port)",
        )
    return host.strip("[]"), int(port_text)


class _Handler(BaseHTTPRequestHandler):
    server: _MetricsHTTPServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, self.server.sink.exposition(), PROMETHEUS_CONTENT_TYPE)
        elif path == "/healthz":
            ready, reason = self.server.readiness.state()
            if ready:
                self._reply(200, b"ok", "text/plain; charset=utf-8")
            else:
                self._reply(503, f"not ready: {reason}\n".encode(), "text/plain; charset=utf-8")
        else:
            self._reply(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood stderr: not logged."""


class Readiness:
    """Ready, or not ready with a reason: what `/healthz` answers (200 `ok`, or 503 `not ready: …`).

    Thread-safe: the loop sets it, the HTTP server's threads read it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None

    def ready(self) -> None:
        """Working again."""
        with self._lock:
            self._reason = None

    def not_ready(self, reason: str) -> None:
        """Cannot work now, because of `reason` (e.g. a dependency's outage)."""
        with self._lock:
            self._reason = reason

    def state(self) -> tuple[bool, str]:
        """(ready, reason); the reason is empty when ready."""
        with self._lock:
            return self._reason is None, self._reason or ""


class _MetricsHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], sink: PrometheusMetricsSink, *, ipv6: bool, readiness: Readiness
    ) -> None:
        self.address_family = socket.AF_INET6 if ipv6 else socket.AF_INET
        self.sink = sink
        self.readiness = readiness
        super().__init__(address, _Handler)


class MetricsServer:
    """`GET /metrics` (Prometheus text) and `GET /healthz` (200 `ok`) on one address, in daemon threads.

    Started and stopped by the caller; also a context manager. The address is parsed when the server
    is built (`ConfigError` naming `KAFSCALE_METRICS_ADDR`), bound by `start()`.
    """

    def __init__(self, sink: PrometheusMetricsSink, address: str = DEFAULT_METRICS_ADDR) -> None:
        self._sink = sink
        self.address = address
        self._host, self._port = parse_metrics_address(address)
        self._server: _MetricsHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.readiness = Readiness()
        """What `/healthz` reports; `run` hands it to its pipeline."""

    @classmethod
    def from_environment(
        cls, sink: PrometheusMetricsSink, environ: Mapping[str, str] | None = None
    ) -> MetricsServer:
        """A server on `KAFSCALE_METRICS_ADDR`, `:9093` when unset or empty."""
        env = os.environ if environ is None else environ
        return cls(sink, env.get(METRICS_ADDR_ENV) or DEFAULT_METRICS_ADDR)

    @property
    def port(self) -> int:
        """The bound port (the requested one until `start()`; useful with port 0)."""
        return self._server.server_address[1] if self._server is not None else self._port

    def start(self) -> int:
        """Bind and serve in a daemon thread; returns the bound port. Raises `MetricsServerError`."""
        if self._server is not None:
            return self.port
        try:
            server = _MetricsHTTPServer(
                (self._host or "0.0.0.0", self._port),
                self._sink,
                ipv6=":" in self._host,
                readiness=self.readiness,
            )
        except OSError as exc:
            raise MetricsServerError(
                f"cannot serve metrics on {self.address!r} ({METRICS_ADDR_ENV}): {exc}; set "
                f"{METRICS_ADDR_ENV} to a free local host:port, e.g. ':9094' or '127.0.0.1:0'"
            ) from exc
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="metrics-http", daemon=True
        )
        self._thread.start()
        return self.port

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# -- CloudWatch EMF --------------------------------------------------------------------------------


class PowertoolsMetrics(Protocol):
    """What `EmfMetricsSink` uses of an `aws_lambda_powertools.Metrics` object."""

    metric_set: dict[str, Any]

    def add_metric(self, name: str, unit: str, value: float) -> None: ...

    def add_dimension(self, name: str, value: str) -> None: ...

    def add_metadata(self, key: str, value: Any) -> None: ...

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None: ...


class EmfMetricsSink:
    """Samples as CloudWatch EMF through a handler's Powertools `Metrics` object (namespace, `service`
    dimension, `POWERTOOLS_METRICS_DISABLED` and stdout printing are Powertools').

    EMF puts one dimension set on every metric of a log record, so samples are grouped by their
    dimension values (and EMF properties): one record per group. Labels in `EMF_PROPERTY_LABELS`
    (`partition`) are properties of the record, not dimensions - each partition would otherwise be a
    billed custom metric; per-partition values stay queryable with Logs Insights.

    Each `emit` prints its groups at once except the last, which stays in the `Metrics` object for
    `@metrics.log_metrics` to print at the end of the invocation (or the next `emit`, or `flush()`).
    Don't add metrics to the `Metrics` object directly after an `emit`: they would share that
    group's dimensions.
    """

    def __init__(self, metrics: PowertoolsMetrics) -> None:
        self._metrics = metrics

    def emit(self, samples: Sequence[Sample]) -> None:
        """Group the samples by dimensions and properties; one EMF record per group."""
        groups = _emf_groups(samples)
        if not groups:
            return
        self.flush()  # whatever is pending keeps its own dimensions
        for index, ((dimensions, properties), items) in enumerate(groups.items()):
            if index:
                self._metrics.flush_metrics()
            for name, value in dimensions:
                self._metrics.add_dimension(name=name, value=value)
            for name, value in properties:
                self._metrics.add_metadata(key=name, value=int(value) if value.isdigit() else value)
            for item in items:
                self._metrics.add_metric(name=item.metric.name, unit=item.metric.unit, value=item.value)

    def flush(self) -> None:
        """Print what is pending (for callers outside a `@metrics.log_metrics` handler)."""
        if self._metrics.metric_set:
            self._metrics.flush_metrics()


_GroupKey = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]


def _emf_groups(samples: Sequence[Sample]) -> dict[_GroupKey, list[Sample]]:
    groups: dict[_GroupKey, list[Sample]] = {}
    for item in samples:
        dimensions = tuple((name, item.labels[name]) for name in item.metric.emf_dimensions)
        properties = tuple(
            (name, item.labels[name]) for name in item.metric.labels if name in EMF_PROPERTY_LABELS
        )
        groups.setdefault((dimensions, properties), []).append(item)
    return groups


# -- what to emit, computed from the domain objects ----------------------------------------------------


def record_commit(
    sink: MetricsSink,
    plan: RunPlan,
    result: RunResult,
    outcome: CommitOutcome,
    *,
    started_at: float,
    ended_at: float,
) -> None:
    """Emit a finished commit step. `started_at`/`ended_at`: the commit step's wall clock (Unix s).

    The run counts as `committed` - records, segments, latencies - when this call moved something:
    the Iceberg commit, or the checkpoint write a crashed earlier attempt left undone. A commit step
    that found everything done already is `already_committed` and adds no records (a retried step
    after a success must not count them twice; one that crashed after writing both counts none).
    The offset gauges and `consecutive_failures` (0) are set either way.
    """
    topic = plan.topic
    newly = outcome.table_committed or bool(outcome.offsets_written)
    label = RunOutcomeLabel.COMMITTED if newly else RunOutcomeLabel.ALREADY_COMMITTED
    samples = [sample(RUNS, 1, topic=topic, outcome=label), sample(CONSECUTIVE_FAILURES, 0, topic=topic)]
    if newly:
        quarantined = [q for p in result.partitions for q in p.quarantined]
        by_result = {
            RecordResult.WRITTEN: result.counts.written,
            RecordResult.DROPPED: 0,
            RecordResult.OVERLAPPED: result.counts.out_of_range,
            # A quarantined segment is one dead-letter row; every other dead-letter row is an invalid record.
            RecordResult.INVALID: max(0, result.counts.dead_lettered - len(quarantined)),
            RecordResult.QUARANTINED: sum(q.last_offset - q.base_offset + 1 for q in quarantined),
        }
        samples += [sample(RECORDS, count, topic=topic, result=r) for r, count in by_result.items()]
        samples += _lfs_samples(topic, result)
        samples.append(sample(BATCHES, plan.segment_count, topic=topic))
        for outcome_of in result.partitions:
            missing = sum(g.last - g.first + 1 for g in outcome_of.gaps)
            if missing:
                samples.append(sample(OFFSET_GAPS, missing, topic=topic, partition=outcome_of.partition))
        samples += [
            sample(CONVERSION_FAILURES, count, topic=topic, column=column)
            for column, count in result.counts.conversion_failures.items()
        ]
        job_ms = max(0, result.timings.ended_at_ms - result.timings.started_at_ms)
        samples.append(sample(WRITE_LATENCY, job_ms + max(0.0, ended_at - started_at) * 1000, topic=topic))
        run_s = max(0.0, ended_at - plan.created_at_ms / 1000)
        samples.append(sample(RUN_DURATION, run_s, topic=topic, outcome=RunOutcomeLabel.COMMITTED))
        queued = queue_to_start_seconds(plan, result)
        if queued is not None:
            samples.append(sample(QUEUE_TO_START, queued, topic=topic))
        newest = {o.partition: o.max_timestamp_ms for o in result.partitions}
        for partition, stamp in sorted(newest.items()):
            if stamp is not None and partition in outcome.offsets:
                samples.append(sample(WATERMARK_TIMESTAMP, stamp, topic=topic, partition=partition))
    for partition, offset in sorted(outcome.offsets.items()):
        samples.append(sample(LAST_OFFSET, offset, topic=topic, partition=partition))
        samples.append(sample(WATERMARK_OFFSET, offset, topic=topic, partition=partition))
    sink.emit(samples)


def _lfs_samples(topic: str, result: RunResult) -> list[Sample]:
    """`records_total{skipped_lfs}` and the LFS metrics, only for runs that met LFS envelopes.

    The duration histogram travels in the result as counts and sums per bucket: Prometheus observes
    each blob once at its bucket's mean (exact bucket counts and sum, without one number per blob in
    the result); EMF gets one value per bucket (a Lambda's log must not carry a line per blob).
    """
    counts, lfs = result.counts, result.counts.lfs
    if not (counts.skipped_lfs or lfs.resolved or lfs.errors):
        return []
    samples = [
        sample(RECORDS, counts.skipped_lfs, topic=topic, result=RecordResult.SKIPPED_LFS),
        sample(LFS_RESOLVED, lfs.resolved, topic=topic),
        sample(LFS_RESOLVED_BYTES, lfs.resolved_bytes, topic=topic),
    ]
    samples += [
        sample(LFS_RESOLUTION_ERRORS, count, topic=topic, reason=reason)
        for reason, count in sorted(lfs.errors.items())
    ]
    for count, total in zip(lfs.duration_counts, lfs.duration_sums, strict=False):
        if count:
            samples.append(Sample(LFS_RESOLUTION_DURATION, total / count, {"topic": topic}, count=int(count)))
    return samples


def queue_to_start_seconds(plan: RunPlan, result: RunResult) -> float | None:
    """Seconds from the oldest planned segment's S3 LastModified to the job's start (never below 0:
    S3's and the job's clocks may disagree by a little); None for a plan without LastModified."""
    landed = [
        s.last_modified_ms for p in plan.partitions for s in p.segments if s.last_modified_ms is not None
    ]
    if not landed:
        return None
    return max(0.0, (result.timings.started_at_ms - min(landed)) / 1000)


def record_abort(
    sink: MetricsSink,
    topic: str,
    consecutive_failures: int,
    *,
    run_started_at: float | None = None,
    ended_at: float | None = None,
) -> None:
    """Emit an aborted run: `runs_total{aborted}`, `errors_total{job}`, the consecutive-failure gauge,
    and the run's duration when `run_started_at` (Unix s; the lease claim, `grant.claimed_at_ms / 1000`)
    is given (`ended_at` defaults to now)."""
    samples = [
        sample(RUNS, 1, topic=topic, outcome=RunOutcomeLabel.ABORTED),
        sample(ERRORS, 1, stage=ErrorStage.JOB),
        sample(CONSECUTIVE_FAILURES, consecutive_failures, topic=topic),
    ]
    if run_started_at is not None:
        end = time.time() if ended_at is None else ended_at
        samples.append(
            sample(RUN_DURATION, max(0.0, end - run_started_at), topic=topic, outcome=RunOutcomeLabel.ABORTED)
        )
    sink.emit(samples)


def record_launch(sink: MetricsSink, outcome: LaunchOutcome) -> None:
    """Emit a launcher decision: `launches_total{status}`, and `runs_total{started}` for a started run."""
    samples = [sample(LAUNCHES, 1, topic=outcome.topic, status=outcome.status.value)]
    if outcome.status.value == RunOutcomeLabel.STARTED.value:
        samples.append(sample(RUNS, 1, topic=outcome.topic, outcome=RunOutcomeLabel.STARTED))
    sink.emit(samples)


def record_route(sink: MetricsSink, outcome: RouteOutcome) -> None:
    """Emit what one routed message gave: work items by topic, ignored objects by reason."""
    items = Counter(item.topic for item in outcome.items)
    samples = [sample(WORK_ITEMS, count, topic=topic) for topic, count in sorted(items.items())]
    samples += [
        sample(NOTIFICATIONS_IGNORED, count, reason=reason)
        for reason, count in sorted(outcome.ignored.items())
    ]
    sink.emit(samples)


def record_route_failure(sink: MetricsSink, error: KafscaleIcebergError) -> None:
    """Emit a message the router could not route: `errors_total{route}`, except a `.kfs` whose `.index`
    has not landed yet - the normal race of a segment upload, retried - which is
    `notifications_deferred_total`, so an alarm on route errors does not fire on it."""
    from kafscale_iceberg.exceptions import SegmentIncompleteError  # noqa: PLC0415

    if isinstance(error, SegmentIncompleteError):
        sink.emit([sample(NOTIFICATIONS_DEFERRED, 1)])
    else:
        record_error(sink, ErrorStage.ROUTE)


def record_commit_failure(sink: MetricsSink, error: KafscaleIcebergError) -> None:
    """Emit a failed commit step: `errors_total{checkpoint}` for a checkpoint-store error (lease lost,
    store down), else `errors_total{sink}` (Iceberg, as the Go processor names its write stage)."""
    record_error(sink, ErrorStage.CHECKPOINT if isinstance(error, CheckpointError) else ErrorStage.SINK)


def record_error(sink: MetricsSink, stage: ErrorStage | str) -> None:
    """Emit one `errors_total{stage}`; `stage` must be an `ErrorStage` value."""
    sink.emit([sample(ERRORS, 1, stage=ErrorStage(stage))])


def record_lag(sink: MetricsSink, topic: str, partition: int, lag_records: int, lag_seconds: float) -> None:
    """Set a partition's lag gauges."""
    sink.emit(
        [
            sample(LAG_RECORDS, lag_records, topic=topic, partition=partition),
            sample(LAG_SECONDS, lag_seconds, topic=topic, partition=partition),
        ]
    )


def record_status(sink: MetricsSink, report: StatusReport) -> None:
    """Set the gauges a status report knows: lag, committed offsets, newest committed record
    timestamp, consecutive failures (what `run` emits on each poll, and after a restart)."""
    sink.emit(list(_status_samples(report)))


def _status_samples(report: StatusReport) -> Iterator[Sample]:
    for topic in report.topics:
        yield sample(CONSECUTIVE_FAILURES, topic.consecutive_failures, topic=topic.topic)
        for p in topic.partitions:
            yield sample(LAG_RECORDS, p.lag_records, topic=topic.topic, partition=p.partition)
            yield sample(LAG_SECONDS, p.lag_seconds, topic=topic.topic, partition=p.partition)
            if p.committed_offset >= 0:
                yield sample(LAST_OFFSET, p.committed_offset, topic=topic.topic, partition=p.partition)
                yield sample(WATERMARK_OFFSET, p.committed_offset, topic=topic.topic, partition=p.partition)
            if p.last_record_timestamp_ms:
                yield sample(
                    WATERMARK_TIMESTAMP, p.last_record_timestamp_ms, topic=topic.topic, partition=p.partition
                )
