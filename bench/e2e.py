"""End to end on the one-machine loop: PUT-to-commit latency, and a backlog beside per-segment commits.

Run with `python -m bench.e2e` (or `make bench-e2e`). Everything runs in this process on the embedded
services, as `kafscale-iceberg demo` does: moto server (S3 + SQS, with a real bucket notification),
etcd (the embedded SQLite store when there is no etcd binary), a SQLite catalog with a file
warehouse, and the pipeline of `kafscale-iceberg run` (`open_pipeline`: local Spark `local[2]`, its
session kept warm across runs, notifications from the queue, a reconciler pass every
`--poll-interval` seconds, the loop waking when the job ends). `--s3-latency-ms 30` puts
`bench/s3_proxy.py` between the product and moto (S3's first-byte latency).

Workload: pizza-order JSON events (`kafscale_iceberg.segments.generate`, ~250 bytes per record in
the segment), one uncompressed batch per segment, ~128 KB segments (`--segment-kb`). Why: a
KafScale broker flushes on every acknowledged produce request (`KAFSCALE_PRODUCE_SYNC_FLUSH`, on by
default; otherwise at 4 MiB or 500 ms), so a segment is one produce request's batch for the
partition: 16 KB with the Java client's default `batch.size`, up to ~1 MB with librdkafka or
franz-go under load. The mapping extracts 7 columns (long required, int, 2 strings, double,
timestamp from RFC 3339, date); tables are unpartitioned. Segments are uploaded as the broker does:
the `.kfs`, then its `.index` (`--index-first` reverses it for the latency segments).

1. **Warm-up** (not measured): one segment per partition of the latency and backlog topics (the
   tables exist, offsets are set) and 17.5 MB on a `warmup` topic (a run of several Spark tasks, so
   a Python worker per core is up), committed, and the notification queue drained.
2. **Latency**: `--latency-segments` segments, one every `--interval` seconds, round robin over
   `--latency-topics` x `--latency-partitions`, while `run_forever` ingests them. The observer hook
   `run_ended` gives each commit's wall-clock end and offsets; a segment's latency is from the
   start of its `.kfs` PUT to the end of the first commit whose offsets cover its last offset. It
   is split into: PUT -> start of the run that covered it (for segments launched by their own
   notification: PUT -> routed, then the launch), the run's job (as the loop saw it, and the Spark
   job's own `process_s`), the commit step. Segments whose run started before their notification
   was routed were listed by another launch (the re-launch after a commit, another segment's
   notification, the reconciler); they are reported apart. `--after-idle S` then waits S seconds
   and times one more segment.
3. **Backlog** (ours): the loop stopped and the bucket notification removed (`run_once` lists),
   `--backlog-mb` of segments over `--backlog-partitions` partitions are uploaded, then
   `Pipeline.run_once()` is timed; `--backlog-rounds` times, one after the other, each round on its
   own topic holding the same segment bytes (same work, same table state); the median is kept.
4. **Per-segment commits** (the Go processor's approach, with pyiceberg, same process, same
   catalog, Spark stopped): for the first round's segments in key order, GET the `.kfs`,
   `decode_segment`, convert with the same `RecordConverter` and settings as the run (the same
   rows), and `table.append` them, one Iceberg commit per segment, into a table with the same
   schema that starts as ours did (the warm-up rows in one commit). Checked: every table gains the
   same number of rows.

MB are `.kfs` bytes (1e6). The last line is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bench.e2e_runtime import (
    BACKLOG_TOPIC,
    BUCKET,
    PER_SEGMENT_TABLE,
    WARM_BACKLOG_MB,
    WARM_TOPIC,
    Recorder,
    Segment,
    embedded_runtime,
    make_segments,
    percentile,
    put_segment,
    records_for,
    rekeyed,
    round_robin,
    table_of,
    wait_for,
)
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.dataplane.conversion import RecordConverter
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.local.pipeline import Pipeline
from kafscale_iceberg.local.wiring import ProgressPrinter, open_pipeline
from kafscale_iceberg.segments.decode import decode_segment
from kafscale_iceberg.segments.generate import CodecChoice
from kafscale_iceberg.segments.layout import Codec

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table


@dataclass
class LatencyResult:
    """Per segment, in upload order (seconds); `notified[i]` when segment i's run was launched after
    its notification was routed, else a run launched for another reason (the re-launch after a
    commit, another segment's notification, the reconciler) listed it."""

    latencies: list[float] = field(default_factory=list)
    notified: list[bool] = field(default_factory=list)
    routed: list[float] = field(default_factory=list)
    planning: list[float] = field(default_factory=list)
    to_run_start: list[float] = field(default_factory=list)
    jobs: list[float] = field(default_factory=list)
    spark: list[float] = field(default_factory=list)
    commits: list[float] = field(default_factory=list)
    runs: int = 0
    segments_per_run: float = 0.0
    span_s: float = 0.0


def measure_latency(
    recorder: Recorder,
    s3: Any,
    segments: Sequence[Segment],
    interval_s: float,
    *,
    index_first: bool,
    timeout_s: float,
) -> LatencyResult:
    """Upload the segments one every `interval_s` and map each to the commit that covered it."""
    commits_before = len(recorder.commits)
    put_at: list[float] = []
    began = time.monotonic()
    next_at = began
    for number, segment in enumerate(segments, 1):
        time.sleep(max(0.0, next_at - time.monotonic()))
        put_at.append(put_segment(s3, segment, index_first=index_first))
        next_at += interval_s
        if number % 10 == 0:
            done = sum(recorder.first_commit(s) is not None for s in segments[:number])
            print(f"  {number}/{len(segments)} segments uploaded, {done} committed", flush=True)
    wait_for(
        lambda: all(recorder.first_commit(s) is not None for s in segments),
        timeout_s,
        "every latency segment committed",
    )
    result = LatencyResult(span_s=time.monotonic() - began)
    for segment, put in zip(segments, put_at, strict=True):
        commit = recorder.first_commit(segment)
        assert commit is not None
        result.latencies.append(commit.commit_ended_at - put)
        result.to_run_start.append(commit.run_started_at - put)
        result.jobs.append(commit.commit_started_at - commit.run_started_at)
        result.spark.append(commit.spark_s)
        result.commits.append(commit.commit_ended_at - commit.commit_started_at)
        routed = recorder.routed.get(segment.key)
        notified = routed is not None and routed <= commit.run_started_at
        result.notified.append(notified)
        if routed is not None and notified:
            result.routed.append(routed - put)
            result.planning.append(commit.run_started_at - routed)
    runs = recorder.commits[commits_before:]
    result.runs = len(runs)
    result.segments_per_run = sum(c.segments for c in runs) / max(1, len(runs))
    return result


@dataclass
class BacklogResult:
    name: str
    seconds: float
    megabytes: float
    segments: int
    snapshots: int
    data_files: int
    rows: int
    detail: str = ""

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.seconds

    def per_1000(self, count: int) -> float:
        return count * 1000 / self.segments


def table_shape(table: Table) -> tuple[int, int, int]:
    """Snapshots, data files, rows of the table's current state."""
    table.refresh()
    snapshot = table.current_snapshot()
    total = snapshot.summary["total-records"] if snapshot and snapshot.summary else None
    rows = int(total) if total is not None else 0
    return len(table.snapshots()), table.inspect.files().num_rows, rows


def measure_ours(
    pipeline: Pipeline, recorder: Recorder, catalog: Catalog, segments: Sequence[Segment]
) -> BacklogResult:
    """`run_once` over the backlog (of one topic) already in the bucket."""
    topic = segments[0].topic
    table = catalog.load_table(table_of(topic))
    snapshots0, files0, rows0 = table_shape(table)
    pipeline.stopping.clear()
    began = time.perf_counter()
    summary = pipeline.run_once()
    seconds = time.perf_counter() - began
    if not summary.ok:
        raise RuntimeError(f"run_once failed: {summary.failed}")
    snapshots1, files1, rows1 = table_shape(table)
    backlog_runs = [r for r in summary.runs if r.topic == topic]
    covered = {p: o for r in backlog_runs for p, o in r.offsets.items()}  # runs go forward: the last wins
    missing = [s.key for s in segments if covered.get(s.partition, -1) < s.last_offset]
    if missing:
        raise RuntimeError(f"run_once left {len(missing)} backlog segments uncommitted, e.g. {missing[0]}")
    job = sum(r.commit_started_at - r.started_at for r in backlog_runs)
    commit = sum(r.commit_ended_at - r.commit_started_at for r in backlog_runs)
    timings = result.timings if (result := recorder.results.get(topic)) else None
    tasks = (
        f"; the last run's Spark job {timings.process_s:.2f} s, {timings.tasks} task(s) summing read "
        f"{timings.task_read_s:.2f} s, decode {timings.task_decode_s:.2f} s, convert "
        f"{timings.task_convert_s:.2f} s, write {timings.task_write_s:.2f} s"
        if timings
        else ""
    )
    return BacklogResult(
        name="ours (run_once: one run, one commit)",
        seconds=seconds,
        megabytes=sum(len(s.kfs) for s in segments) / 1e6,
        segments=len(segments),
        snapshots=snapshots1 - snapshots0,
        data_files=files1 - files0,
        rows=rows1 - rows0,
        detail=f"{len(backlog_runs)} run(s); job {job:.2f} s, commit step {commit:.2f} s, "
        f"planning and the rest {seconds - job - commit:.2f} s{tasks}",
    )


class PerSegmentCommits:
    """The Go processor's approach with pyiceberg: GET, decode, convert, one `table.append` (one
    Iceberg commit) per segment, into a table with our table's schema that starts as ours did."""

    def __init__(self, catalog: Catalog, s3: Any, plan: RunPlan, warm: Sequence[Segment]) -> None:
        ours = catalog.load_table(table_of(BACKLOG_TOPIC))
        self._s3 = s3
        self._table = catalog.create_table(
            PER_SEGMENT_TABLE,
            schema=ours.schema(),
            properties={"write.format.default": "parquet", "format-version": "2"},
        )
        self._converter = RecordConverter(topic=BACKLOG_TOPIC, run_id="per-segment", settings=plan.conversion)
        # The rows of the warm-up segments our table got, in one commit as there: the same starting
        # state (rows, one snapshot); numba and pyiceberg warm.
        self._table.append(pa.concat_tables([self._rows(s) for s in warm]))
        self._start = table_shape(self._table)
        self.segments: list[Segment] = []
        self.prepares: list[float] = []
        self.appends: list[float] = []
        self.seconds = 0.0

    def _rows(self, segment: Segment) -> pa.Table:
        data = self._s3.get_object(Bucket=BUCKET, Key=segment.key)["Body"].read()
        decoded = decode_segment(data, source=segment.key, partition=segment.partition)
        converted = self._converter.convert(
            decoded.records, partition=segment.partition, segment_key=segment.key
        )
        if converted.dead_letters.num_rows:
            raise RuntimeError(f"{segment.key}: unexpected dead letters")
        return converted.rows

    def commit(self, segments: Sequence[Segment]) -> None:
        """Commit these segments one by one (timed, added to the totals)."""
        began = time.perf_counter()
        for segment in segments:
            prepared = time.perf_counter()
            rows = self._rows(segment)
            appended = time.perf_counter()
            self._table.append(rows)
            self.prepares.append(appended - prepared)
            self.appends.append(time.perf_counter() - appended)
            self.segments.append(segment)
        self.seconds += time.perf_counter() - began

    def result(self) -> BacklogResult:
        snapshots0, files0, rows0 = self._start
        snapshots1, files1, rows1 = table_shape(self._table)
        tenth = max(1, len(self.appends) // 10)
        first, last = statistics.median(self.appends[:tenth]), statistics.median(self.appends[-tenth:])
        return BacklogResult(
            name="per-segment commits (pyiceberg append)",
            seconds=self.seconds,
            megabytes=sum(len(s.kfs) for s in self.segments) / 1e6,
            segments=len(self.segments),
            snapshots=snapshots1 - snapshots0,
            data_files=files1 - files0,
            rows=rows1 - rows0,
            detail=f"of it GET + decode + convert {sum(self.prepares):.1f} s, table.append "
            f"{sum(self.appends):.1f} s; median append {first * 1000:.0f} ms over the first tenth of the "
            f"segments, {last * 1000:.0f} ms over the last",
        )


# -- main ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--segment-kb", type=float, default=128, help="segment size (uncompressed; one batch per segment)"
    )
    parser.add_argument("--latency-segments", type=int, default=40)
    parser.add_argument("--interval", type=float, default=1.5, help="seconds between latency segments")
    parser.add_argument("--latency-topics", type=int, default=2)
    parser.add_argument("--latency-partitions", type=int, default=2)
    parser.add_argument("--poll-interval", type=int, default=5, help="processor.poll_interval_seconds")
    parser.add_argument("--backlog-mb", type=float, default=50.0, help="MB of .kfs in the backlog")
    parser.add_argument("--backlog-partitions", type=int, default=4)
    parser.add_argument(
        "--backlog-rounds",
        type=int,
        default=3,
        help="backlogs of --backlog-mb, one after the other, each committed by run_once (the median is "
        "kept); the per-segment commits take the first",
    )
    parser.add_argument(
        "--codec",
        choices=[*(c.name.lower() for c in Codec), "mixed"],
        default="none",
        help="batch compression; mixed cycles none, gzip, snappy, lz4, zstd",
    )
    parser.add_argument(
        "--index-first",
        action="store_true",
        help="upload each latency segment's .index before its .kfs (the broker uploads both at once)",
    )
    parser.add_argument(
        "--after-idle",
        type=float,
        default=0,
        help="after the latency segments, wait this many seconds, then time one more segment (Spark "
        "stops its Python workers after 60 s without tasks; the backlog's first round then starts cold)",
    )
    parser.add_argument("--verbose", action="store_true", help="one line per run start and end")
    parser.add_argument("--workdir", help="keep data here (default: a temporary folder, removed after)")
    parser.add_argument(
        "--s3-latency-ms",
        type=float,
        default=0,
        help="the product reaches S3 through bench/s3_proxy.py with this first-byte latency (0: directly)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The loop logs every error it reports to the observer; the Recorder counts them and the summary
    # prints them (a `.kfs` routed before its `.index` landed is one, retried: see the docstring).
    logging.getLogger("kafscale_iceberg.local.pipeline").setLevel(logging.CRITICAL)
    codec: CodecChoice = "mixed" if args.codec == "mixed" else Codec[args.codec.upper()]
    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench-e2e-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_before = os.getloadavg()
    try:
        headline = run(args, codec, root)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    print(
        f"\ntotal {time.perf_counter() - started:.0f} s; load average (1/5/15 min) at start "
        f"{'/'.join(f'{v:.1f}' for v in load_before)}, at end {'/'.join(f'{v:.1f}' for v in load_after)}; "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    headline["load_avg_1m"] = [round(load_before[0], 1), round(load_after[0], 1)]
    print(json.dumps(headline))
    return 0


def run(args: argparse.Namespace, codec: CodecChoice, root: Path) -> dict[str, Any]:
    records = records_for(args.segment_kb)
    latency_topics = [f"events{chr(ord('a') + i)}" for i in range(args.latency_topics)]
    per_tp = -(-args.latency_segments // (args.latency_topics * args.latency_partitions))
    generating = time.perf_counter()
    latency_by_tp = make_segments(latency_topics, args.latency_partitions, per_tp + 2, records, codec, seed=1)
    sample = next(iter(latency_by_tp.values()))[0]
    segment_bytes = len(sample.kfs)
    per_partition = max(1, math.ceil(args.backlog_mb * 1e6 / segment_bytes / args.backlog_partitions))
    warm_per_partition = max(1, math.ceil(WARM_BACKLOG_MB * 1e6 / segment_bytes / args.backlog_partitions))
    rounds = args.backlog_rounds
    generated = make_segments(
        [BACKLOG_TOPIC],
        args.backlog_partitions,
        max(1 + per_partition, warm_per_partition),
        records,
        codec,
        seed=2,
    )
    by_partition = [generated[tp] for tp in sorted(generated)]
    # One segment per partition is committed at warm-up (the table exists, the offsets are set), the
    # backlog follows it. Round r runs on its own topic holding the same bytes, so every round is
    # the same work on a table in the same state, from one generation.
    backlog_topics = [BACKLOG_TOPIC, *(f"{BACKLOG_TOPIC}{r}" for r in range(2, rounds + 1))]
    first_segments = [p[0] for p in by_partition]
    backlog = [s for p in by_partition for s in p[1 : 1 + per_partition]]
    chunks = [[rekeyed(s, topic) for s in backlog] for topic in backlog_topics]
    slices = [backlog[len(backlog) * r // 4 : len(backlog) * (r + 1) // 4] for r in range(4)]  # progress
    warm_segments = [
        *(s[0] for s in latency_by_tp.values()),
        *(rekeyed(s, topic) for topic in backlog_topics for s in first_segments),
        *(rekeyed(s, WARM_TOPIC) for p in by_partition for s in p[:warm_per_partition]),
    ]
    measured = round_robin([s[1 : per_tp + 1] for s in latency_by_tp.values()])[: args.latency_segments]
    probe = next(iter(latency_by_tp.values()))[per_tp + 1]  # follows the first partition's measured ones
    print(
        f"segments of {segment_bytes / 1024:.0f} KB (one batch of {records} records, "
        f"codec {args.codec}); latency: {len(measured)} segments over {len(latency_by_tp)} partitions "
        f"of {len(latency_topics)} topics, one every {args.interval:g} s; backlog: {len(backlog)} segments, "
        f"{sum(len(s.kfs) for s in backlog) / 1e6:.1f} MB over {args.backlog_partitions} partitions, "
        f"{rounds} rounds; "
        f"generated in {time.perf_counter() - generating:.1f} s",
        flush=True,
    )
    recorder = Recorder(ProgressPrinter(sys.stdout) if args.verbose else None)
    topics = [*latency_topics, *backlog_topics, WARM_TOPIC]
    with embedded_runtime(root, topics, args.poll_interval, s3_latency_ms=args.s3_latency_ms) as runtime:
        catalog = load_iceberg_catalog(CatalogSettings.from_config(runtime.config))
        with open_pipeline(runtime.config, observers=[recorder]) as pipeline:
            recorder.watch_routing(pipeline)
            loop = threading.Thread(target=pipeline.run_forever, name="pipeline", daemon=True)
            warming = time.perf_counter()
            loop.start()
            try:
                # `.index` first: no notification of the warm-up is retried later, so the queue is
                # empty (and the loop idle) when the measurement starts.
                for segment in warm_segments:
                    put_segment(runtime.s3, segment, index_first=True)
                wait_for(
                    lambda: all(recorder.first_commit(s) is not None for s in warm_segments),
                    600,
                    "warm-up committed",
                )
                wait_for(runtime.queue_empty, 300, "warm-up notifications handled", poll_s=0.5)
                print(
                    f"warm-up: {len(warm_segments)} segments committed in "
                    f"{time.perf_counter() - warming:.1f} s (Spark session start, first runs); "
                    f"offsets in {runtime.offsets_backend}",
                    flush=True,
                )
                print(f"latency: {len(measured)} segments, one every {args.interval:g} s", flush=True)
                latency = measure_latency(
                    recorder, runtime.s3, measured, args.interval, index_first=args.index_first, timeout_s=300
                )
                if args.after_idle > 0:
                    print(f"after idle: {args.after_idle:g} s without segments, then one", flush=True)
                    time.sleep(args.after_idle)
                    after_idle = measure_latency(
                        recorder, runtime.s3, [probe], 0, index_first=args.index_first, timeout_s=300
                    )
            finally:
                pipeline.stop()
                loop.join(timeout=120)
            # Ours back to back: Spark stops its idle Python workers after a minute without tasks
            # (PythonWorkerFactory), so interleaving the minutes of per-segment commits would make
            # every round after the first start cold. `run_once` lists: no notifications for the
            # backlog (moto's queue, never read from now on, slows every PUT as it grows).
            runtime.s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={})
            ours: list[BacklogResult] = []
            for number, chunk in enumerate(chunks, 1):
                uploading = time.perf_counter()
                for segment in chunk:
                    put_segment(runtime.s3, segment)
                uploaded = time.perf_counter() - uploading
                ours.append(measure_ours(pipeline, recorder, catalog, chunk))
                print(
                    f"backlog round {number}/{rounds}: {len(chunk)} segments uploaded in {uploaded:.1f} s; "
                    f"run_once {ours[-1].seconds:.2f} s",
                    flush=True,
                )
            began = time.perf_counter()
            idle = pipeline.run_once()
            idle_s = time.perf_counter() - began
            if idle.runs or not idle.ok:
                raise RuntimeError(f"run_once found work after the backlogs: {idle}")
        # Spark stopped (its JVM idles, but out of the way): the Go processor's way, alone.
        per_segment = PerSegmentCommits(catalog, runtime.s3, recorder.plans[BACKLOG_TOPIC], first_segments)
        for part in slices:
            per_segment.commit(part)
            print(
                f"per-segment commits: {len(per_segment.segments)}/{len(backlog)} in "
                f"{per_segment.seconds:.1f} s, last append {per_segment.appends[-1] * 1000:.0f} ms",
                flush=True,
            )
    theirs = per_segment.result()
    if any(r.rows != theirs.rows for r in ours):
        raise RuntimeError(f"the tables differ: {[r.rows for r in ours]} rows vs {theirs.rows}")
    ours_s = statistics.median(r.seconds for r in ours)
    report_latency(latency, args.interval)
    if args.after_idle > 0:
        print(
            f"one segment after {args.after_idle:g} s idle: {after_idle.latencies[0]:.2f} s PUT -> committed "
            f"(to run start {after_idle.to_run_start[0]:.2f} s, job {after_idle.jobs[0]:.2f} s of which "
            f"Spark {after_idle.spark[0]:.2f} s, commit {after_idle.commits[0]:.2f} s)"
        )
    report_backlog(ours, theirs)
    print(
        f"run_once with nothing pending ({len(topics)} topics: discovery and a launch each that finds "
        f"nothing): {idle_s:.2f} s, part of each round's 'planning and the rest'"
    )
    if recorder.aborted or recorder.errors:
        print(f"aborted runs: {len(recorder.aborted)}; errors: {dict(recorder.errors)}")
        for name, message in recorder.first_error.items():
            print(f"  first {name}: {message}")
    return {
        "latency_p50_s": round(percentile(latency.latencies, 50), 2),
        "latency_p95_s": round(percentile(latency.latencies, 95), 2),
        "backlog_mb_per_s": round(theirs.megabytes / ours_s, 1),
        "vs_per_segment_commits": round(theirs.seconds / ours_s, 1),
        "backlog_mb": round(theirs.megabytes, 1),
        "segment_kb": round(segment_bytes / 1024),
        "backlog_rounds_s": [round(r.seconds, 2) for r in ours],
        "per_segment_s": round(theirs.seconds, 1),
        "run_once_idle_s": round(idle_s, 2),
        "snapshots_per_1000_segments": [
            round(max(r.per_1000(r.snapshots) for r in ours), 1),
            round(theirs.per_1000(theirs.snapshots), 1),
        ],
        "files_per_1000_segments": [
            round(max(r.per_1000(r.data_files) for r in ours), 1),
            round(theirs.per_1000(theirs.data_files), 1),
        ],
    }


def report_latency(result: LatencyResult, interval_s: float) -> None:
    def row(name: str, values: Sequence[float]) -> str:
        if not values:
            return f"{name:48s} {'-':>7s}"
        cells = (percentile(values, 50), percentile(values, 95), min(values), max(values))
        return f"{name:48s} " + " ".join(f"{v:7.2f}" for v in cells)

    print()
    print(
        f"latency, PUT to commit: {len(result.latencies)} segments, one every {interval_s:g} s; "
        f"{result.runs} runs committed them ({result.segments_per_run:.1f} segments per run); "
        f"{result.span_s:.0f} s"
    )
    print(f"{'seconds':48s} {'p50':>7s} {'p95':>7s} {'min':>7s} {'max':>7s}")
    notified = [v for v, n in zip(result.latencies, result.notified, strict=True) if n]
    listed = [v for v, n in zip(result.latencies, result.notified, strict=True) if not n]
    print(row("PUT -> rows committed", result.latencies))
    print(row(f"  launched by its notification ({len(notified)})", notified))
    print(row(f"  listed by another launch ({len(listed)})", listed))
    print(row("PUT -> start of the run that covered it", result.to_run_start))
    print(row("  PUT -> notification routed", result.routed))
    print(row("  routed -> run start (launch: list, lease, plan)", result.planning))
    print(row("the run's job (start -> seen succeeded)", result.jobs))
    print(row("  of it the Spark job itself (process_s)", result.spark))
    print(row("the run's commit step", result.commits))


def report_backlog(ours: Sequence[BacklogResult], theirs: BacklogResult) -> None:
    print()
    print(
        f"backlog: {theirs.segments} segments, {theirs.megabytes:.1f} MB, {theirs.rows:,} rows; ours on "
        f"{len(ours)} such backlogs, one after the other (the first is the per-segment commits' backlog)"
    )
    header = f"{'':44s} {'wall s':>7s} {'MB/s':>7s} {'snapshots/1k seg':>16s} {'files/1k seg':>12s}"
    print(header)
    for number, r in enumerate(ours, 1):
        print(
            f"{r.name + f' round {number}':44s} {r.seconds:7.2f} {r.mb_per_s:7.2f} "
            f"{r.per_1000(r.snapshots):16.1f} {r.per_1000(r.data_files):12.1f}"
        )
        print(f"  {r.detail}")
    print(
        f"{theirs.name:44s} {theirs.seconds:7.2f} {theirs.mb_per_s:7.2f} "
        f"{theirs.per_1000(theirs.snapshots):16.1f} {theirs.per_1000(theirs.data_files):12.1f}"
    )
    print(f"  {theirs.detail}")
    median = statistics.median(r.seconds for r in ours)
    print(
        f"ours, median of {len(ours)}: {median:.2f} s, {theirs.megabytes / median:.2f} MB/s; "
        f"per-segment time / ours: {theirs.seconds / median:.1f}x"
    )


if __name__ == "__main__":
    sys.exit(main())
