"""The Spark job, the commit step and planning on an S3 that answers like S3 (30 ms first byte).

Run with `python -m bench.s3` (or `make bench-s3`). Everything talks to a moto server, either
directly (loopback: a GET costs a few ms) or through `bench.s3_proxy.LatencyProxy` (first-byte
latency per request, default 30 ms, and a per-connection bandwidth cap, default 80 MB/s; see
docs/benchmarks.md for why these numbers). Same data, same run, so the ratios are what count:

- **job**: `spark_app.job.run_job` on local[2] over `--partitions` x `--segments` segments of
  ~126 KB (510 pizza orders each, uncompressed), segments read from S3 and files written to S3:
  without latency, with latency (tasks read ahead: the default), and with latency reading one
  segment at a time (`max_in_flight=1`, what tasks did before). Best of `--rounds`, interleaved.
- **commit**: the commit step (`CommitService.commit_run`) of a run of `--files` data files into an
  existing table with the warehouse on the slow S3 (checkpoints in SQLite): from the metrics the run
  carried (no footer read), and from the files' footers (what `add_files` did). The S3 requests are
  counted by method.
- **planning**: `Launcher.launch` of a topic with `--planning-partitions` partitions (two committed
  segments and one new each) on the slow S3: partitions listed concurrently (the default), and one
  at a time.

moto runs in its own process (as S3 runs elsewhere: its server-side CPU is not this process's); the
proxy, which counts the requests, runs in this one. `--moto-in-process` runs moto as a thread here,
as the runs before 2026-11-24 did.

The last line is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.planning import TOPIC as PLANNING_TOPIC
from bench.planning import planning_world
from bench.s3_proxy import DEFAULT_BANDWIDTH_BYTES_PER_S, DEFAULT_LATENCY_S, LatencyProxy
from bench.spark import COLUMNS
from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.s3_segments import S3Settings, make_s3_client
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.dataplane.parquet_files import RollingParquetWriter
from kafscale_iceberg.dataplane.prefetch import PrefetchLimits
from kafscale_iceberg.dataplane.schemas import data_schema
from kafscale_iceberg.domain.commits import TableSpec
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.runs import (
    ConversionSettings,
    DataFile,
    PartitionOutcome,
    PartitionPlan,
    PlannedSegment,
    RunPlan,
    RunResult,
    RunStatus,
    RunTimings,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.local.embedded import (
    DEFAULT_REGION,
    DUMMY_CREDENTIALS,
    EmbeddedMoto,
    free_port,
    start_moto,
)
from kafscale_iceberg.segments.generate import generate_segments
from kafscale_iceberg.segments.layout import Codec
from kafscale_iceberg.services import pending
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.launch import LaunchStatus

TOPIC = "orders"
NAMESPACE = "bench"
TARGETS = {
    "job_vs_no_latency": 0.8,
    "commit_100_files_s": 0.5,
    "planning_64_partitions_s": 1.0,
}


@dataclass(frozen=True)
class Endpoints:
    """The moto server directly, and through the latency proxy."""

    direct: S3Settings
    slow: S3Settings
    bucket: str
    proxy: LatencyProxy


class MotoProcess:
    """A moto server in its own process: the server side of every request (moto's request parsing,
    XML, its object store) then runs beside this process as S3's does, not under this process's
    GIL, where it was counted in the commit and planning times (`--moto-in-process`: as before)."""

    def __init__(self, region: str) -> None:
        for name, value in {**DUMMY_CREDENTIALS, "AWS_DEFAULT_REGION": region}.items():
            os.environ.setdefault(name, value)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.region = region
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not start on port {port}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def best(samples: list[float]) -> float:
    return min(samples)


# -- the job -------------------------------------------------------------------------------------------


def upload_segments(
    endpoints: Endpoints, *, partitions: int, segments: int
) -> dict[int, list[PlannedSegment]]:
    """~126 KB segments (10 batches of 51 orders, no compression) in the bucket; the planned view."""
    client = make_s3_client(endpoints.direct)
    generated = list(
        generate_segments(
            topics=(TOPIC,),
            partitions=partitions,
            segments=segments,
            batches_per_segment=10,
            records_per_batch=51,
            codec=Codec.NONE,
            namespace=NAMESPACE,
        )
    )

    def put(item: Any) -> PlannedSegment:
        segment, files = item.segment, item.files
        client.put_object(Bucket=endpoints.bucket, Key=segment.index_key, Body=files.index)
        client.put_object(Bucket=endpoints.bucket, Key=segment.segment_key, Body=files.kfs)
        return PlannedSegment(
            key=segment.segment_key,
            base_offset=files.base_offset,
            last_offset=files.last_offset,
            size_bytes=len(files.kfs),
        )

    with ThreadPoolExecutor(max_workers=16) as pool:
        planned = list(pool.map(put, generated))
    by_partition: dict[int, list[PlannedSegment]] = {}
    for item, segment in zip(generated, planned, strict=True):
        by_partition.setdefault(item.segment.partition, []).append(segment)
    return {p: sorted(s, key=lambda x: x.base_offset) for p, s in by_partition.items()}


def write_job_plan(
    endpoints: Endpoints, settings: S3Settings, name: str, segments: dict[int, list[PlannedSegment]]
) -> str:
    """A plan over the segments whose source (and so every read and write of the job) is `settings`."""
    ranges = [(p, -1, s[-1].last_offset) for p, s in segments.items()]
    run_id = make_run_id(f"{TOPIC}-{name}", ranges)
    base = f"s3://{endpoints.bucket}/job-{name}"
    plan = RunPlan(
        run_id=run_id,
        topic=TOPIC,
        created_at_ms=0,
        source=SegmentSource(
            bucket=endpoints.bucket,
            endpoint_url=settings.endpoint_url,
            region=settings.region,
            path_style=True,
        ),
        partitions=tuple(
            PartitionPlan(partition=p, start_exclusive=-1, end_inclusive=s[-1].last_offset, segments=tuple(s))
            for p, s in sorted(segments.items())
        ),
        table=TableTarget(identifier="bench.orders", data_uri=f"{base}/data"),
        dead_letter_table=TableTarget(identifier="bench.orders_dl", data_uri=f"{base}/dead_letters"),
        conversion=ConversionSettings(columns=COLUMNS),
        result_uri=f"{base}/runs/result.json",
    )
    uri = f"{base}/runs/plan.json"
    DocumentStore(endpoints.direct).write_text(uri, plan.model_dump_json())
    return uri


def bench_job(endpoints: Endpoints, *, partitions: int, segments: int, rounds: int) -> dict[str, float]:
    from spark_app.job import TaskSizing, build_session, run_job

    planned = upload_segments(endpoints, partitions=partitions, segments=segments)
    megabytes = sum(s.size_bytes for ss in planned.values() for s in ss) / 1e6
    count = sum(len(s) for s in planned.values())
    print(f"job: {count} segments, {megabytes:.1f} MB ({megabytes * 1e3 / count:.0f} KB each)", flush=True)
    configs: dict[str, tuple[str, S3Settings, TaskSizing]] = {
        "no latency": (
            write_job_plan(endpoints, endpoints.direct, "direct", planned),
            endpoints.direct,
            TaskSizing(),
        ),
        "latency, read ahead": (
            write_job_plan(endpoints, endpoints.slow, "slow", planned),
            endpoints.slow,
            TaskSizing(),
        ),
        "latency, one at a time": (
            write_job_plan(endpoints, endpoints.slow, "slow", planned),
            endpoints.slow,
            TaskSizing(prefetch=PrefetchLimits(max_in_flight=1)),
        ),
    }
    spark = build_session(
        master="local[2]",
        app_name="bench-s3",
        conf={"spark.ui.enabled": "false", "spark.default.parallelism": "2"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    try:
        for uri, settings, sizing in configs.values():  # warm: workers, numba caches, clients
            run_job(spark, uri, s3=settings, sizing=sizing)
        for number in range(1, rounds + 1):
            for name, (uri, settings, sizing) in configs.items():
                started = time.perf_counter()
                result = run_job(spark, uri, s3=settings, sizing=sizing)
                seconds[name].append(time.perf_counter() - started)
                assert result.status.value == "succeeded", result.failure
            print(
                f"  round {number}: " + ", ".join(f"{n} {v[-1]:.2f} s" for n, v in seconds.items()),
                flush=True,
            )
    finally:
        spark.stop()
    rates = {name: megabytes / best(values) for name, values in seconds.items()}
    for name, rate in rates.items():
        print(f"  {name:24s} best {best(seconds[name]):6.2f} s  {rate:6.1f} MB/s  {rate / 2:6.1f} MB/s/core")
    return rates


# -- the commit step ---------------------------------------------------------------------------------------


def write_files(endpoints: Endpoints, count: int, rows: int) -> list[DataFile]:
    """`count` data files of `rows` orders each, on S3 (written directly: only the commit is timed)."""
    schema = data_schema(COLUMNS)
    sink = StagedFileStore(endpoints.direct)

    def one(index: int) -> DataFile:
        first = index * rows
        table = pa.table(
            {
                "record_id": [f"{TOPIC}:0:{o}" for o in range(first, first + rows)],
                "topic": [TOPIC] * rows,
                "partition": pa.array([0] * rows, pa.int32()),
                "offset": list(range(first, first + rows)),
                "timestamp_ms": [1_795_132_800_000 + o for o in range(first, first + rows)],
                "key": pa.nulls(rows, pa.binary()),
                "value": [b'{"order_id": %d}' % o for o in range(first, first + rows)],
                "headers": pa.nulls(rows, pa.string()),
                "order_id": list(range(first, first + rows)),
                "store_id": pa.array([o % 40 for o in range(rows)], pa.int32()),
                "customer": [f"customer {o % 997}" for o in range(rows)],
                "total": [o * 0.25 for o in range(rows)],
                "status": ["paid"] * rows,
                "event_time": pa.array([1_795_132_800_000_000 + o for o in range(rows)], pa.timestamp("us")),
                "ordered_on": pa.array([20_775] * rows, pa.date32()),
            },
            schema=schema,
        )
        writer = RollingParquetWriter(
            sink=sink,
            data_uri=f"s3://{endpoints.bucket}/warehouse/commit-files/{index:04d}",
            schema=schema,
            task_index=index,
            target_file_size_bytes=1 << 30,
        )
        writer.write({}, table)
        (written,) = writer.close()
        return written

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(one, range(count)))


def commit_plan(endpoints: Endpoints, identifier: str, files: int) -> RunPlan:
    """A plan of one partition whose run wrote the `write_files` files (their prefix is its data prefix)."""
    end = files * 500 - 1
    segment = PlannedSegment(key=f"{NAMESPACE}/{TOPIC}/0/x.kfs", base_offset=0, last_offset=end, size_bytes=1)
    base = f"s3://{endpoints.bucket}/warehouse"
    return RunPlan(
        run_id=make_run_id(identifier, [(0, -1, end)]),
        topic=TOPIC,
        created_at_ms=0,
        source=SegmentSource(bucket=endpoints.bucket),
        partitions=(PartitionPlan(partition=0, start_exclusive=-1, end_inclusive=end, segments=(segment,)),),
        table=TableTarget(identifier=identifier, data_uri=f"{base}/commit-files"),
        dead_letter_table=TableTarget(identifier=f"{identifier}_dl", data_uri=f"{base}/commit-dead"),
        conversion=ConversionSettings(columns=COLUMNS),
        result_uri=f"{base}/runs/{identifier}/result.json",
    )


def commit_result(plan: RunPlan, written: list[DataFile], *, carried: bool) -> RunResult:
    """The run's result: its files with their carried metrics, or without (the commit reads footers)."""
    files = tuple(f if carried else f.model_copy(update={"stats": None}) for f in written)
    end = plan.partitions[0].end_inclusive
    return RunResult(
        run_id=plan.run_id,
        topic=TOPIC,
        status=RunStatus.SUCCEEDED,
        data_files=files,
        partitions=(PartitionOutcome(partition=0, first_offset=0, last_offset=end),),
        timings=RunTimings(started_at_ms=1, ended_at_ms=2),
    )


def bench_commit(endpoints: Endpoints, workdir: Path, *, files: int, rounds: int) -> dict[str, float]:
    """The commit step (`CommitService.commit_run`: lease, state reads, checks, table creation, ONE
    Iceberg commit, offsets) of a run of `files` files into a new table on the slow S3, per round."""
    written = write_files(endpoints, files, rows=500)
    settings = CatalogSettings(
        type="sql",
        uri=f"sqlite:///{workdir}/catalog.db",
        warehouse=f"s3://{endpoints.bucket}/warehouse",
        s3_endpoint=endpoints.slow.endpoint_url or "",
        s3_region=endpoints.slow.region or "",
        s3_path_style=True,
    )
    store = SqliteCheckpointStore(workdir / "commit-offsets.sqlite")
    service = CommitService(IcebergTableCommitter(load_iceberg_catalog(settings)), store)
    policy = TablePolicy(create_table_if_missing=True)
    seconds: dict[str, list[float]] = {"carried metrics": [], "footers": []}
    requests: dict[str, list[str]] = {}
    for number in range(rounds):
        for name, samples in seconds.items():
            plan = commit_plan(endpoints, f"bench.commit_{name.split()[0]}_{number}", files)
            result = commit_result(plan, written, carried=name == "carried metrics")
            # The table exists, as it does for every run but a topic's first.
            IcebergTableCommitter(load_iceberg_catalog(settings)).ensure_table(
                TableSpec(plan.table.identifier, table_fields(COLUMNS), create_if_missing=True)
            )
            grant = store.claim_lease(TOPIC, owner_id="bench", run_id=plan.run_id)
            assert isinstance(grant, LeaseGrant)
            store.reset_offsets(grant, {0: OffsetUpdate(-1, 0)})
            before = len(endpoints.proxy.request_lines)
            started = time.perf_counter()
            outcome = service.commit_run(plan, result, grant, policy)
            samples.append(time.perf_counter() - started)
            assert outcome.table_committed, outcome
            # Request lines only: a body sent after `100 Continue` is noted too (its chunk sizes).
            requests[name] = [line for line in endpoints.proxy.request_lines[before:] if " HTTP/1." in line]
    for name, values in seconds.items():
        listed = ", ".join(f"{v:.3f}" for v in values)
        print(
            f"commit of {files} files, {name:16s}: best {best(values):.3f} s ({listed}); "
            f"{len(requests[name])} S3 requests ({describe_requests(requests[name])})"
        )
    return {name: best(values) for name, values in seconds.items()}


def describe_requests(lines: list[str]) -> str:
    """`GET 3, PUT 4, HEAD 3`: the requests by method (query strings tell multipart parts apart)."""
    counts: dict[str, int] = {}
    for line in lines:
        method, _, rest = line.partition(" ")
        path = rest.split(" ")[0]
        kind = method + ("?uploads" if "uploads" in path else "?part" if "partNumber" in path else "")
        kind += "?uploadId" if "uploadId" in path and "partNumber" not in path else ""
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


# -- planning -----------------------------------------------------------------------------------------


def bench_planning(endpoints: Endpoints, workdir: Path, *, partitions: int, rounds: int) -> dict[str, float]:
    direct = make_s3_client(endpoints.direct)
    bucket = f"{endpoints.bucket}-planning"
    direct.create_bucket(Bucket=bucket)
    (workdir / "planning").mkdir(exist_ok=True)
    world = planning_world(
        direct,
        bucket,
        workdir / "planning",
        endpoints.slow,
        partitions=partitions,
        committed=2 * partitions,
        new=partitions,
    )
    launcher, store = world.launcher, world.store
    concurrency = pending.PLANNING_CONCURRENCY
    seconds: dict[str, list[float]] = {"concurrent": [], "one partition at a time": []}
    requests: dict[str, int] = {}
    try:
        for _ in range(rounds):
            for name, samples in seconds.items():
                pending.PLANNING_CONCURRENCY = concurrency if name == "concurrent" else 1
                before = endpoints.proxy.requests
                started = time.perf_counter()
                outcome = launcher.launch(PLANNING_TOPIC)
                samples.append(time.perf_counter() - started)
                requests[name] = endpoints.proxy.requests - before
                assert outcome.status is LaunchStatus.STARTED, outcome
                assert outcome.ticket is not None
                store.release_lease(outcome.ticket.grant)
    finally:
        pending.PLANNING_CONCURRENCY = concurrency
    for name, values in seconds.items():
        print(
            f"planning {partitions} partitions, {name:24s}: best {best(values):.3f} s; "
            f"{requests[name]} S3 requests"
        )
    return {name: best(values) for name, values in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=DEFAULT_LATENCY_S * 1000)
    parser.add_argument("--bandwidth-mb-per-s", type=float, default=DEFAULT_BANDWIDTH_BYTES_PER_S / 1e6)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segments", type=int, default=40, help="segments per partition (~126 KB each)")
    parser.add_argument("--files", type=int, default=100, help="data files in the timed commit")
    parser.add_argument("--planning-partitions", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-job", action="store_true", help="only the commit and planning parts")
    parser.add_argument("--skip-planning", action="store_true", help="leave the planning part out")
    parser.add_argument(
        "--moto-in-process",
        action="store_true",
        help="run moto as a thread of this process (its server-side CPU then counts in every time)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    moto: EmbeddedMoto | MotoProcess = start_moto() if args.moto_in_process else MotoProcess(DEFAULT_REGION)
    # A client made without an endpoint must reach moto, never AWS.
    os.environ["AWS_ENDPOINT_URL"] = moto.url
    proxy = LatencyProxy.for_url(
        moto.url, latency_s=args.latency_ms / 1000, bandwidth_bytes_per_s=args.bandwidth_mb_per_s * 1e6
    )
    try:
        proxy.start()
        endpoints = Endpoints(
            direct=S3Settings(endpoint_url=moto.url, region=moto.region, path_style=True),
            slow=S3Settings(endpoint_url=proxy.url, region=moto.region, path_style=True),
            bucket="bench-s3",
            proxy=proxy,
        )
        make_s3_client(endpoints.direct).create_bucket(Bucket=endpoints.bucket)
        print(
            f"S3: moto ({'a thread of this process' if args.moto_in_process else 'its own process'}) "
            f"at {moto.url}; proxy {proxy.url} adds {args.latency_ms:.0f} ms first-byte latency, "
            f"caps a connection at {args.bandwidth_mb_per_s:.0f} MB/s; {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        rates: dict[str, float] = {}
        if not args.skip_job:
            rates = bench_job(
                endpoints, partitions=args.partitions, segments=args.segments, rounds=args.rounds
            )
        commit = bench_commit(endpoints, workdir, files=args.files, rounds=args.rounds)
        planning: dict[str, float] = {}
        if not args.skip_planning:
            planning = bench_planning(
                endpoints, workdir, partitions=args.planning_partitions, rounds=args.rounds
            )
    finally:
        proxy.stop()
        moto.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    headline: dict[str, float | None] = {
        "job_vs_no_latency": round(rates["latency, read ahead"] / rates["no latency"], 2) if rates else None,
        "commit_100_files_s": round(commit["carried metrics"], 3),
        "planning_64_partitions_s": round(planning["concurrent"], 3) if planning else None,
        "mb_per_s_per_core_latency": round(rates["latency, read ahead"] / 2, 1) if rates else None,
    }
    if rates:
        sequential = rates["latency, one at a time"] / rates["no latency"]
        print(f"one segment at a time with latency: {sequential:.2f}x the no-latency throughput")
    print(f"commit from footers: {commit['footers']:.3f} s")
    if planning:
        print(f"planning one partition at a time: {planning['one partition at a time']:.3f} s")
    print(f"targets: {json.dumps(TARGETS)}")
    print(json.dumps(headline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
