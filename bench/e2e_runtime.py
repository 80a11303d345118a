"""The workload and the embedded runtime `bench/e2e.py` measures on: the segments it uploads (as a KafScale
broker does), the observer that records every run, and the embedded services with the config over them."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3

from bench.s3_proxy import LatencyProxy
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.domain.events import WorkItem
from kafscale_iceberg.domain.runs import RunPlan, RunResult
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.exceptions import EmbeddedServiceError
from kafscale_iceberg.local.config_document import one_machine_document
from kafscale_iceberg.local.embedded import EmbeddedEtcd, notified_bucket, start_etcd, start_moto
from kafscale_iceberg.local.pipeline import Pipeline, RunEnd, RunReport
from kafscale_iceberg.local.wiring import ProgressPrinter
from kafscale_iceberg.segments.generate import CodecChoice, generate_segments
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key

if TYPE_CHECKING:
    pass

NAMESPACE = "prod"
BUCKET = "kafscale-bench"
BACKLOG_TOPIC = "orders"
WARM_TOPIC = "warmup"
PER_SEGMENT_TABLE = "bench.orders_per_segment"
COLUMNS = (
    {"name": "order_id", "type": "long", "required": True},
    {"name": "store_id", "type": "int"},
    {"name": "customer", "type": "string"},
    {"name": "total", "type": "double"},
    {"name": "status", "type": "string"},
    {"name": "event_time", "type": "timestamp"},
    {"name": "ordered_on", "type": "date"},
)
# The warm-up topic's size: enough for a run of several Spark tasks (at least 8 MiB each), so that a
# Python worker per core is up before the measured backlog runs; the latency runs (one segment, one
# task) may keep only one busy, and a cold worker costs seconds (imports, numba cache).
WARM_BACKLOG_MB = 17.5
BYTES_PER_RECORD = 250  # of a pizza order in an uncompressed batch, to size segments


@dataclass(frozen=True)
class Segment:
    """One generated segment and where it goes."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    key: str
    index_key: str
    kfs: bytes
    index: bytes


@dataclass(frozen=True)
class Commit:
    """One committed run, as the observer saw it (wall-clock seconds)."""

    topic: str
    offsets: dict[int, int]
    run_started_at: float
    commit_started_at: float
    commit_ended_at: float
    segments: int
    spark_s: float
    """The job's own `process_s` (plan read to result written), inside the watched job time."""


class Recorder:
    """The pipeline observer: every commit, abort and error; and when each segment was routed."""

    def __init__(self, printer: ProgressPrinter | None = None) -> None:
        self.commits: list[Commit] = []
        self.aborted: list[RunReport] = []
        self.errors: Counter[str] = Counter()
        self.first_error: dict[str, str] = {}
        self.plans: dict[str, RunPlan] = {}
        self.results: dict[str, RunResult] = {}
        self.routed: dict[str, float] = {}
        self._printer = printer
        self._lock = threading.Lock()

    def run_started(self, ticket: RunTicket, plan: RunPlan) -> None:
        if self._printer:
            self._printer.run_started(ticket, plan)

    def run_ended(self, report: RunReport, plan: RunPlan) -> None:
        result = report.commit.result if report.commit is not None else None
        with self._lock:
            self.plans[report.topic] = plan
            if result is not None:
                self.results[report.topic] = result
            if report.end is RunEnd.COMMITTED:
                self.commits.append(
                    Commit(
                        topic=report.topic,
                        offsets=dict(report.offsets),
                        run_started_at=report.started_at,
                        commit_started_at=report.commit_started_at,
                        commit_ended_at=report.commit_ended_at,
                        segments=report.segments,
                        spark_s=result.timings.process_s if result is not None else math.nan,
                    )
                )
            else:
                self.aborted.append(report)
        if self._printer:
            self._printer.run_ended(report, plan)

    def error(self, stage: str, topic: str | None, error: Exception) -> None:
        with self._lock:
            name = f"{stage}: {type(error).__name__}"
            self.errors[name] += 1
            text = str(error)
            self.first_error.setdefault(name, text if len(text) <= 200 else text[:197] + "...")

    def watch_routing(self, pipeline: Pipeline) -> None:
        """Time-stamp every work item the router sends to the loop's inbox (first time per key)."""
        inbox = pipeline.work_queue
        send = inbox.send_work_items

        def send_and_stamp(items: Sequence[WorkItem]) -> None:
            now = time.time()
            for item in items:
                self.routed.setdefault(item.key, now)
            send(items)

        setattr(inbox, "send_work_items", send_and_stamp)  # noqa: B010 - an instance override

    def first_commit(self, segment: Segment) -> Commit | None:
        """The first commit (in commit order) whose offsets cover the segment's last offset."""
        with self._lock:
            for commit in self.commits:
                if commit.topic == segment.topic and commit.offsets.get(segment.partition, -1) >= (
                    segment.last_offset
                ):
                    return commit
        return None


# -- workload ------------------------------------------------------------------------------------------


def records_for(segment_kb: float) -> int:
    """Records of one uncompressed batch of about `segment_kb` KB."""
    return max(1, round(segment_kb * 1024 / BYTES_PER_RECORD))


def make_segments(
    topics: Sequence[str], partitions: int, per_partition: int, records: int, codec: CodecChoice, seed: int
) -> dict[tuple[str, int], list[Segment]]:
    """Segments by (topic, partition), each list in offset order."""
    out: dict[tuple[str, int], list[Segment]] = {}
    for generated in generate_segments(
        topics=topics,
        partitions=partitions,
        segments=per_partition,
        batches_per_segment=1,
        records_per_batch=records,
        codec=codec,
        seed=seed,
        namespace=NAMESPACE,
    ):
        sid = generated.segment
        out.setdefault((sid.topic, sid.partition), []).append(
            Segment(
                topic=sid.topic,
                partition=sid.partition,
                base_offset=generated.files.base_offset,
                last_offset=generated.files.last_offset,
                key=sid.segment_key,
                index_key=sid.index_key,
                kfs=generated.files.kfs,
                index=generated.files.index,
            )
        )
    return out


def table_of(topic: str) -> str:
    return f"bench.{topic}"


def rekeyed(segment: Segment, topic: str) -> Segment:
    """The same segment bytes under another topic (a segment does not name its topic)."""
    return replace(
        segment,
        topic=topic,
        key=format_segment_key(NAMESPACE, topic, segment.partition, segment.base_offset),
        index_key=format_segment_key(
            NAMESPACE, topic, segment.partition, segment.base_offset, SegmentObjectKind.INDEX
        ),
    )


def round_robin(lists: Sequence[Sequence[Segment]]) -> list[Segment]:
    """Interleave the lists: one from each in turn."""
    out: list[Segment] = []
    for i in range(max(len(s) for s in lists)):
        out.extend(s[i] for s in lists if i < len(s))
    return out


def put_segment(s3: Any, segment: Segment, *, index_first: bool = False) -> float:
    """Upload as a KafScale broker does (`.kfs`, then `.index`; or the other way round with
    `index_first`); the wall clock when the first PUT began."""
    began = time.time()
    first, second = (segment.index_key, segment.key) if index_first else (segment.key, segment.index_key)
    s3.put_object(Bucket=BUCKET, Key=first, Body=segment.index if index_first else segment.kfs)
    s3.put_object(Bucket=BUCKET, Key=second, Body=segment.kfs if index_first else segment.index)
    return began


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between the closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# -- the runtime ---------------------------------------------------------------------------------------


@dataclass
class Runtime:
    """The embedded services and the config over them."""

    workdir: Path
    config: KafscaleConfig
    s3: Any
    sqs: Any
    offsets_backend: str

    def queue_empty(self) -> bool:
        """No notification waiting or in flight."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.config.notifications.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return all(int(v) == 0 for v in attributes.values())


@contextmanager
def embedded_runtime(
    workdir: Path, topics: Sequence[str], poll_interval_s: int, *, s3_latency_ms: float = 0
) -> Iterator[Runtime]:
    """moto (S3 + SQS notifications), etcd or the SQLite store, a SQLite catalog; the config over them.

    With `s3_latency_ms`, the product reaches moto through `bench.s3_proxy.LatencyProxy` (that
    first-byte latency per request, 80 MB/s per connection); the benchmark's own uploads (the
    broker's PUTs) and queue reads go to moto directly.
    """
    moto = start_moto()
    proxy = LatencyProxy.for_url(moto.url, latency_s=s3_latency_ms / 1000) if s3_latency_ms > 0 else None
    etcd: EmbeddedEtcd | None = None
    try:
        endpoint = proxy.start() if proxy is not None else moto.url
        try:
            etcd = start_etcd(workdir)
        except EmbeddedServiceError as exc:
            print(f"no etcd ({exc}); using the embedded SQLite store", flush=True)
        queue_url = notified_bucket(
            moto.url, moto.region, BUCKET, "kafscale-segment-events", prefix=f"{NAMESPACE}/"
        )
        s3 = boto3.client("s3", endpoint_url=moto.url, region_name=moto.region)
        sqs = boto3.client("sqs", endpoint_url=moto.url, region_name=moto.region)
        document = one_machine_document(
            workdir,
            bucket=BUCKET,
            namespace=NAMESPACE,
            endpoint=endpoint,
            region=moto.region,
            etcd_endpoints=[etcd.url] if etcd is not None else [],
            notifications={"queue_url": queue_url},
            processor={"poll_interval_seconds": poll_interval_s},
            runs={"min_bytes_per_run": 0},  # latency as before the batching defaults: run at once
            runner={"local": {"master": "local[2]", "spark_conf": {"spark.ui.enabled": "false"}}},
            mappings=[
                {
                    "topic": topic,
                    "table": table_of(topic),
                    "create_table_if_missing": True,
                    "schema": {"columns": list(COLUMNS)},
                }
                for topic in topics
            ],
        )
        config = config_from_mapping(document, source=str(workdir / "config.yaml"))
        yield Runtime(workdir, config, s3, sqs, "etcd" if etcd is not None else "sqlite")
    finally:
        if etcd is not None:
            etcd.stop()
        if proxy is not None:
            proxy.stop()
        moto.stop()


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, *, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout_s:.0f} s")
        time.sleep(poll_s)


# -- measurements --------------------------------------------------------------------------------------
