"""Spark job throughput: local[1] and local[2], against a pyarrow-only pipeline and an I/O floor.

Run with `python -m bench.spark` (or `make bench-spark`). Workload: synthetic pizza-order JSON events
(`kafscale_iceberg.segments.generate`, ~280 bytes per record in the segment) in segments of 20,000
records (batches of 100), 4 partitions; the mapping extracts 7 columns (long, int, 2 strings,
double, timestamp from RFC 3339, date) and the table is partitioned by `day(event_time)`.

Measured, all on the same segments and the same plan (wall clock, best run; the configurations
are sampled interleaved - each warm Spark run is followed by a pipeline and a floor run, over
`--rounds` rounds of a local[1] then a local[2] session - since other load on a shared machine
comes in bursts):

- spark local[N]: `spark_app.job.run_job` end to end (plan read, task planning, Spark tasks that
  fetch + decode + convert + write Parquet, result folding, result write). The session start and
  the first (cold: Python workers start, numba caches load) run are reported separately, from the
  first session of each kind (later sessions start in the already running JVM).
- pyarrow pipeline: the same `run_task` code for all segments in this one process, no Spark.
- floor: reading the same segment bytes, and writing the rows the job produced (held in memory
  beforehand) as Parquet with the same writer: no decoding, no conversion.

With `--formats mixed` the events' `event_time` cycles through the forms people write (RFC 3339,
`YYYY-MM-DD HH:MM:SS` and `...THH:MM:SS.ffffff` without offset, `+0530`, `+05:30`; see
`segments.generate.TimeFormats`), and the same run also measures the pyarrow pipeline on an RFC 3339
workload of the same shape (the baseline): the ratio of the two, end to end and for the convert
stage alone, shows whether the new formats stay on the compiled scanner's fast path.

With `--route` the same run also measures the pyarrow pipeline over a plan that routes each event by
its `status` into 3 tables (`placed` and `delivered` to their own tables, the other four statuses to
the default table; `mappings[].route`), against the 1-table plan on the same segments: the ratio is
the cost of routing (reading the route field, the split, three file series instead of one).

With `--schema infer` it measures instead what inferring the columns costs (`schema.source: infer`):
spark local[2] runs of the same segments with an inferred table (the observation stage, then the
conversion) and with the columns the inference decided given as a mapping (the conversion alone: same
columns, field ids and output, no partitioning in either), sampled interleaved; the ratio of the two
is the observation stage's cost. With both `--schema infer --route`: the pyarrow pipeline (one task,
no Spark) over the `--route` plan with each table's columns inferred (observation routing every
record, conversion per table with its own columns) against the same route with those columns given
as a mapping: the ratio is the cost of per-table inference in a routed mapping.

With `--format avro` it measures the same events as Avro in Confluent wire format against the JSON
mapped path (`bench/formats.py`).

MB are segment (`.kfs`) bytes. The last line is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from bench.s3_proxy import LatencyProxy
from bench.workload import Workload, clear_output
from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3Settings, make_s3_client
from kafscale_iceberg.dataplane.parquet_files import RollingParquetWriter
from kafscale_iceberg.dataplane.storage import segment_uri
from kafscale_iceberg.dataplane.tasks import observe_task, plan_tasks, run_task
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    DataFile,
    PartitionField,
    PartitionPlan,
    PartitionTransform,
    PlannedSegment,
    RoutePlan,
    RunPlan,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.local.embedded import start_moto
from kafscale_iceberg.segments.generate import CodecChoice, TimeFormats, generate_segments, write_segments
from kafscale_iceberg.segments.layout import Codec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TOPIC = "orders"
COLUMNS = (
    ColumnSpec(name="order_id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="store_id", type=ColumnType.INT),
    ColumnSpec(name="customer", type=ColumnType.STRING),
    ColumnSpec(name="total", type=ColumnType.DOUBLE),
    ColumnSpec(name="status", type=ColumnType.STRING),
    ColumnSpec(name="event_time", type=ColumnType.TIMESTAMP),
    ColumnSpec(name="ordered_on", type=ColumnType.DATE),
)
S3_BUCKET = "bench-spark"
TARGETS = {"mb_per_s_per_core": 50.0, "scaling_2_vs_1": 1.6, "vs_pyarrow_pipeline": 0.7}


@dataclass(frozen=True)
class Measure:
    """One configuration's best wall time."""

    name: str
    cores: int
    seconds: float
    cold_seconds: float | None = None
    session_start_s: float | None = None

    def mb_per_s(self, workload: Workload) -> float:
        return workload.megabytes / self.seconds

    def records_per_s(self, workload: Workload) -> float:
        return workload.records / self.seconds


def make_workload(
    root: Path,
    *,
    partitions: int,
    segments: int,
    codec: CodecChoice,
    formats: TimeFormats = "rfc3339",
    s3: tuple[str, S3Settings] | None = None,
) -> Workload:
    """Generate segments under `root/segments` (or upload them to `s3` = (moto URL, the settings the
    job reads them with)) and a plan writing under `root/out`."""
    if s3 is not None:
        make_s3_client(S3Settings(endpoint_url=s3[0], region=s3[1].region)).create_bucket(Bucket=S3_BUCKET)
    destination = f"s3://{S3_BUCKET}" if s3 is not None else str(root / "segments")
    written = write_segments(
        destination,
        generate_segments(
            topics=(TOPIC,),
            partitions=partitions,
            segments=segments,
            batches_per_segment=200,
            records_per_batch=100,
            codec=codec,
            namespace="bench",
            time_formats=formats,
        ),
        endpoint_url=s3[0] if s3 is not None else None,
    )
    by_partition: dict[int, list[PlannedSegment]] = {}
    for segment in written:
        if s3 is not None:
            key = segment.kfs.removeprefix(f"s3://{S3_BUCKET}/")
        else:
            key = str(Path(segment.kfs).relative_to(root / "segments"))
        by_partition.setdefault(segment.partition, []).append(
            PlannedSegment(
                key=key,
                base_offset=segment.base_offset,
                last_offset=segment.last_offset,
                size_bytes=segment.kfs_bytes,
            )
        )
    ranges = [(p, -1, s[-1].last_offset) for p, s in by_partition.items()]
    run_id = make_run_id(TOPIC, ranges)
    out = root / "out"
    plan = RunPlan(
        run_id=run_id,
        topic=TOPIC,
        created_at_ms=0,
        source=(
            SegmentSource(
                bucket=S3_BUCKET, endpoint_url=s3[1].endpoint_url, region=s3[1].region, path_style=True
            )
            if s3 is not None
            else SegmentSource(root=str(root / "segments"))
        ),
        partitions=tuple(
            PartitionPlan(partition=p, start_exclusive=-1, end_inclusive=s[-1].last_offset, segments=tuple(s))
            for p, s in sorted(by_partition.items())
        ),
        table=TableTarget(identifier="bench.orders", data_uri=str(out / "data")),
        dead_letter_table=TableTarget(identifier="bench.orders_dl", data_uri=str(out / "dead_letters")),
        conversion=ConversionSettings(
            columns=COLUMNS,
            partition_by=(PartitionField(column="event_time", transform=PartitionTransform.DAY),),
        ),
        result_uri=str(out / "runs" / TOPIC / run_id / "result.json"),
    )
    plan_path = out / "runs" / TOPIC / run_id / "plan.json"
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_text(plan.model_dump_json())
    return Workload(
        root=root, plan=plan, records=sum(s.records for s in written), s3=s3[1] if s3 is not None else None
    )


def routed_workload(workload: Workload) -> Workload:
    """The same segments, with a plan routing each event by `status` into 3 tables (see `--route`)."""
    plan = workload.plan
    assert plan.table is not None
    out = workload.root / "out"

    def target(name: str) -> TableTarget:
        return TableTarget(identifier=f"bench.{name}", data_uri=str(out / "routed" / name))

    routed = plan.model_copy(
        update={
            "table": None,
            "dead_letter_table": target("orders_routed_dl"),
            "route": RoutePlan(
                field="status",
                tables={"placed": target("orders_placed"), "delivered": target("orders_delivered")},
                default_table=target("orders_other"),
            ),
        }
    )
    return replace(workload, plan=RunPlan.model_validate(routed.model_dump()))


def plan_uri(workload: Workload) -> str:
    return workload.plan.result_uri.rsplit("/", 1)[0] + "/plan.json"


def timed(run: Callable[[], None], before: Callable[[], None] | None = None) -> float:
    if before is not None:
        before()
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def pipeline_runner(
    workload: Workload, convert_seconds: list[float] | None = None
) -> tuple[Callable[[], None], list[DataFile]]:
    """`run_task` over every segment in this process: the job without Spark. Also its files; each
    run's convert-stage seconds are appended to `convert_seconds` when given."""
    plan = workload.plan
    (task,) = plan_tasks(plan, max_tasks=1, min_task_bytes=1, max_task_bytes=2**62)
    files: list[DataFile] = []

    def run() -> None:
        clear_output(workload)
        report = run_task(plan, task, reader=DocumentStore(workload.s3), sink=StagedFileStore())
        assert report.failure is None, report.failure
        assert not report.segments or not any(s.conversion_failures for s in report.segments), (
            "every event_time must convert"
        )
        files[:] = report.data_files or [f for t in report.tables for f in t.files]
        if convert_seconds is not None:
            convert_seconds.append(report.timings.convert)

    run()  # warm: imports, numba caches; and the rows the floor writes
    return run, files


def floor_runner(workload: Workload, files: list[DataFile]) -> Callable[[], None]:
    """Read the segment bytes and write the job's rows with the same Parquet writer; nothing else."""
    plan = workload.plan
    rows = [(dict(f.partition_values), pq.read_table(f.uri)) for f in files]
    schema = rows[0][1].schema
    floor_uri = str(workload.root / "out" / "floor")
    keys = [segment_uri(plan.source, s.key) for p in plan.partitions for s in p.segments]

    def run() -> None:
        reader = DocumentStore(workload.s3)
        total = sum(len(reader.read_bytes(k)) for k in keys)
        assert total == plan.total_bytes
        writer = RollingParquetWriter(
            sink=StagedFileStore(),
            data_uri=floor_uri,
            schema=schema,
            task_index=0,
            target_file_size_bytes=plan.conversion.target_file_size_bytes,
        )
        for values, table in rows:
            writer.write(values, table)
        writer.close()

    run()
    return run


def measure(
    workload: Workload,
    *,
    rounds: int,
    repeats: int,
    baseline: Workload | None = None,
    convert: dict[str, list[float]] | None = None,
    routed: Workload | None = None,
) -> list[Measure]:
    """Best wall times of every configuration, sampled interleaved over the whole benchmark.

    Each round starts a local[1] then a local[2] session; inside each session every warm Spark run
    is followed by a pipeline run and a floor run (and, with `baseline`, a pipeline run over it), so
    a burst of other load on the machine hits all configurations alike instead of one (`routed`: a
    pipeline run over it too). `convert` receives the pipelines' convert-stage seconds (`pipeline`,
    `baseline`).
    """
    from spark_app.job import build_session, run_job

    convert = convert if convert is not None else {}
    pipeline, files = pipeline_runner(workload, convert.setdefault("pipeline", []))
    floor = floor_runner(workload, files)
    seconds: dict[str, list[float]] = {"spark1": [], "spark2": [], "pipeline": [], "floor": []}
    baseline_run = None
    if baseline is not None:
        baseline_run, _ = pipeline_runner(baseline, convert.setdefault("baseline", []))
        seconds["baseline"] = []
    routed_run = None
    if routed is not None:
        routed_run, _ = pipeline_runner(routed)
        seconds["routed"] = []
    first_session: dict[int, tuple[float, float]] = {}
    for number in range(1, rounds + 1):
        for cores in (1, 2):
            started = time.perf_counter()
            spark = build_session(
                master=f"local[{cores}]",
                app_name=f"bench-local-{cores}",
                conf={"spark.ui.enabled": "false", "spark.default.parallelism": str(cores)},
            )
            spark.sparkContext.setLogLevel("ERROR")
            session_start = time.perf_counter() - started
            try:

                def run_spark(session: SparkSession = spark) -> None:
                    result = run_job(session, plan_uri(workload))
                    assert result.status.value == "succeeded", result.failure

                cold = timed(run_spark, lambda: clear_output(workload))
                first_session.setdefault(cores, (session_start, cold))
                for _ in range(repeats):
                    seconds[f"spark{cores}"].append(timed(run_spark, lambda: clear_output(workload)))
                    seconds["pipeline"].append(timed(pipeline))
                    seconds["floor"].append(timed(floor))
                    if baseline_run is not None:
                        seconds["baseline"].append(timed(baseline_run))
                    if routed_run is not None:
                        seconds["routed"].append(timed(routed_run))
            finally:
                spark.stop()
        best = ", ".join(f"{name} {min(values):.2f} s" for name, values in seconds.items())
        print(f"  after round {number}, best: {best}", flush=True)
    sparks = [
        Measure(
            f"spark local[{cores}]",
            cores,
            min(seconds[f"spark{cores}"]),
            cold_seconds=first_session[cores][1],
            session_start_s=first_session[cores][0],
        )
        for cores in (1, 2)
    ]
    measures = [
        *sparks,
        Measure("pyarrow pipeline", 1, min(seconds["pipeline"])),
        Measure("floor (read bytes + write rows)", 1, min(seconds["floor"])),
    ]
    if baseline is not None:
        measures.append(Measure("pyarrow pipeline, RFC 3339 times", 1, min(seconds["baseline"])))
    if routed is not None:
        measures.append(Measure("pyarrow pipeline, routed to 3 tables", 1, min(seconds["routed"])))
    return measures


def measure_inference(workload: Workload, *, rounds: int, repeats: int) -> dict[str, object]:
    """Best local[2] wall times of the inferred plan and of the same run with the inferred columns
    given as a mapping, interleaved (see the module docstring); the headline figures."""
    from spark_app.job import build_session, run_job

    base = workload.plan
    assert base.table is not None
    out = workload.root / "out"
    plans: dict[str, RunPlan] = {}
    for name in ("infer", "mapped"):
        plans[name] = base.model_copy(
            update={
                "conversion": ConversionSettings(infer_columns=name == "infer"),
                "table": base.table.model_copy(update={"data_uri": str(out / name / "data")}),
                "dead_letter_table": base.dead_letter_table.model_copy(
                    update={"data_uri": str(out / name / "dead_letters")}
                ),
                "result_uri": str(out / name / "runs" / TOPIC / base.run_id / "result.json"),
            }
        )
    seconds: dict[str, list[float]] = {"infer": [], "mapped": []}
    columns: tuple[ColumnSpec, ...] = ()
    for number in range(1, rounds + 1):
        spark = build_session(
            master="local[2]",
            app_name="bench-infer",
            conf={"spark.ui.enabled": "false", "spark.default.parallelism": "2"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            for run in range(repeats + 1):
                for name in ("infer", "mapped"):
                    plan = plans[name]
                    uri = plan.result_uri.rsplit("/", 1)[0] + "/plan.json"
                    Path(uri).parent.mkdir(parents=True, exist_ok=True)
                    Path(uri).write_text(plan.model_dump_json())
                    shutil.rmtree(plan.table.data_uri, ignore_errors=True)
                    started = time.perf_counter()
                    result = run_job(spark, uri)
                    elapsed = time.perf_counter() - started
                    assert result.status.value == "succeeded", result.failure
                    if name == "infer" and result.columns is not None:
                        columns = result.columns
                        mapped = plans["mapped"]
                        plans["mapped"] = mapped.model_copy(
                            update={
                                "conversion": mapped.conversion.model_copy(update={"columns": columns}),
                                "table": mapped.table.model_copy(update={"field_ids": result.field_ids}),
                            }
                        )
                    if run > 0:  # the first run of a session is cold (Python workers start)
                        seconds[name].append(elapsed)
        finally:
            spark.stop()
        print(
            f"  after round {number}, best: infer {min(seconds['infer']):.2f} s, "
            f"mapped {min(seconds['mapped']):.2f} s",
            flush=True,
        )
    # The same two stages without Spark, in this process (less exposed to other load): the
    # observation of every segment, against the conversion of every segment with those columns.
    mapped_plan = plans["mapped"]
    (task,) = plan_tasks(mapped_plan, max_tasks=1, min_task_bytes=1, max_task_bytes=2**62)
    reader = DocumentStore(workload.s3)
    observe_s: list[float] = []
    convert_s: list[float] = []

    def observe() -> None:
        observe_task(plans["infer"], task, reader=reader)

    def convert() -> None:
        report = run_task(mapped_plan, task, reader=reader, sink=StagedFileStore())
        assert report.failure is None, report.failure

    for _ in range(rounds * repeats):
        observe_s.append(timed(observe))
        convert_s.append(
            timed(convert, lambda: shutil.rmtree(mapped_plan.table.data_uri, ignore_errors=True))
        )
    observe_best, convert_best = min(observe_s), min(convert_s)
    infer, mapped_s = min(seconds["infer"]), min(seconds["mapped"])
    print(f"inferred columns: {', '.join(f'{c.name} {c.type_name}' for c in columns)}")
    print(f"{'spark local[2], schema infer':34s} {infer:7.2f} s {workload.megabytes / infer:7.1f} MB/s")
    print(
        f"{'spark local[2], mapped columns':34s} {mapped_s:7.2f} s {workload.megabytes / mapped_s:7.1f} MB/s"
    )
    print(f"pyarrow, observation stage          {observe_best:7.2f} s")
    print(f"pyarrow, conversion stage (mapped)  {convert_best:7.2f} s")
    return {
        "infer_s": round(infer, 2),
        "mapped_s": round(mapped_s, 2),
        "infer_vs_mapped": round(infer / mapped_s, 2),
        "pyarrow_observe_s": round(observe_best, 2),
        "pyarrow_convert_s": round(convert_best, 2),
        "pyarrow_infer_vs_mapped": round((observe_best + convert_best) / convert_best, 2),
        "columns": len(columns),
    }


def measure_routed_inference(workload: Workload, *, rounds: int, repeats: int) -> dict[str, object]:
    """The pyarrow pipeline (no Spark, one task in this process) over the `--route` plan with each
    table's columns inferred (the observation stage routing every record, then the conversion
    routing base rows and converting each table's share with its own columns) against the same
    route with those columns given as a mapping (convert, then route); interleaved, best of each."""
    from kafscale_iceberg.dataplane.inference import with_inferred_columns
    from kafscale_iceberg.domain.inference import merge_observations

    routed = routed_workload(workload).plan
    inferred = routed.model_copy(update={"conversion": ConversionSettings(infer_columns=True)})
    (task,) = plan_tasks(inferred, max_tasks=1, min_task_bytes=1, max_task_bytes=2**62)
    reader = DocumentStore(workload.s3)
    decided = with_inferred_columns(inferred, observe_task(inferred, task, reader=reader).tables)
    route = decided.route
    assert route is not None
    assert route.default_table is not None
    columns = route.default_table.columns or ()
    mapped = routed.model_copy(update={"conversion": ConversionSettings(columns=columns)})

    def clear(plan: RunPlan) -> None:
        for mapping in plan.mappings:
            for target, _role in mapping.static_targets():
                shutil.rmtree(target.data_uri, ignore_errors=True)

    def run_inferred() -> None:
        observed = merge_observations([observe_task(inferred, task, reader=reader).tables])
        report = run_task(
            with_inferred_columns(inferred, observed), task, reader=reader, sink=StagedFileStore()
        )
        assert report.failure is None, report.failure

    def run_mapped() -> None:
        report = run_task(mapped, task, reader=reader, sink=StagedFileStore())
        assert report.failure is None, report.failure

    seconds: dict[str, list[float]] = {"infer": [], "mapped": []}
    for _ in range(rounds * repeats):
        seconds["infer"].append(timed(run_inferred, lambda: clear(inferred)))
        seconds["mapped"].append(timed(run_mapped, lambda: clear(mapped)))
    infer, mapped_s = min(seconds["infer"]), min(seconds["mapped"])
    print(f"inferred columns per table: {', '.join(f'{c.name} {c.type_name}' for c in columns)}")
    print(
        f"{'pyarrow, routed, inferred per table':38s} {infer:7.2f} s {workload.megabytes / infer:7.1f} MB/s"
    )
    print(
        f"{'pyarrow, routed, mapped columns':38s} {mapped_s:7.2f} s {workload.megabytes / mapped_s:7.1f} MB/s"
    )
    return {
        "routed_infer_s": round(infer, 2),
        "routed_mapped_s": round(mapped_s, 2),
        "routed_infer_vs_mapped": round(infer / mapped_s, 2),
        "columns": len(columns),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--segments", type=int, default=9, help="segments per partition (20,000 records each)"
    )
    parser.add_argument(
        "--codec",
        choices=[*(c.name.lower() for c in Codec), "mixed"],
        default="none",
        help="batch compression; mixed cycles none, gzip, snappy, lz4, zstd",
    )
    parser.add_argument("--repeats", type=int, default=2, help="warm runs per configuration and session")
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds over all configurations (best kept: other load is bursty)",
    )
    parser.add_argument(
        "--formats",
        choices=["rfc3339", "mixed"],
        default="rfc3339",
        help="event_time forms; mixed cycles the forms people write and adds an RFC 3339 baseline",
    )
    parser.add_argument(
        "--route",
        action="store_true",
        help="also measure the pipeline routing each event by status into 3 tables (vs 1 table)",
    )
    parser.add_argument(
        "--schema",
        choices=["mapping", "infer"],
        default="mapping",
        help="infer: measure an inferred table against the same columns given as a mapping",
    )
    parser.add_argument(
        "--format",
        choices=["json", "avro"],
        default="json",
        help="avro: the same events as Avro wire format against the JSON mapped path (bench/formats.py)",
    )
    parser.add_argument("--workdir", help="keep data here (default: a temporary folder, removed after)")
    parser.add_argument(
        "--s3-latency-ms",
        type=float,
        help="read the segments from a moto server through bench/s3_proxy.py with this first-byte "
        "latency (0: moto directly); default: from a local folder",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench-spark-"))
    moto = proxy = None
    try:
        s3: tuple[str, S3Settings] | None = None
        if args.s3_latency_ms is not None:
            moto = start_moto()
            endpoint = moto.url
            if args.s3_latency_ms > 0:
                proxy = LatencyProxy.for_url(moto.url, latency_s=args.s3_latency_ms / 1000)
                endpoint = proxy.start()
            s3 = (moto.url, S3Settings(endpoint_url=endpoint, region=moto.region, path_style=True))
            print(f"segments on S3 at {endpoint} ({args.s3_latency_ms:.0f} ms first-byte latency)")
        started = time.perf_counter()
        codec: CodecChoice = "mixed" if args.codec == "mixed" else Codec[args.codec.upper()]
        workload = make_workload(
            root,
            partitions=args.partitions,
            segments=args.segments,
            codec=codec,
            formats=args.formats,
            s3=s3,
        )
        baseline = None
        if args.formats == "mixed":
            baseline = make_workload(
                root / "baseline", partitions=args.partitions, segments=args.segments, codec=codec
            )
        print(
            f"workload: {workload.records:,} records, {workload.megabytes:.1f} MB of segments "
            f"({args.partitions} partitions x {args.segments} segments, codec {args.codec}, "
            f"event_time {args.formats}), generated in {time.perf_counter() - started:.1f} s; "
            f"{os.cpu_count()} cores",
            flush=True,
        )
        if args.format == "avro":
            from bench.formats import measure_formats  # its own module (fastavro, polars)

            print(json.dumps(measure_formats(workload, rounds=args.rounds)))
            return 0
        if args.schema == "infer" and args.route:
            print(json.dumps(measure_routed_inference(workload, rounds=args.rounds, repeats=args.repeats)))
            return 0
        if args.schema == "infer":
            print(json.dumps(measure_inference(workload, rounds=args.rounds, repeats=args.repeats)))
            return 0
        convert: dict[str, list[float]] = {}
        routed = routed_workload(workload) if args.route else None
        measures = measure(
            workload,
            rounds=args.rounds,
            repeats=args.repeats,
            baseline=baseline,
            convert=convert,
            routed=routed,
        )
        spark1, spark2, pipeline, floor = measures[:4]
        report(workload, measures)
        headline: dict[str, object] = {
            "mb_per_s_per_core": round(spark2.mb_per_s(workload) / 2, 1),
            "scaling_2_vs_1": round(spark2.mb_per_s(workload) / spark1.mb_per_s(workload), 2),
            "vs_pyarrow_pipeline": round(spark1.mb_per_s(workload) / pipeline.mb_per_s(workload), 2),
            "vs_floor": round(spark1.mb_per_s(workload) / floor.mb_per_s(workload), 2),
        }
        if routed is not None:
            headline["routed_3_tables_vs_1_table_pipeline"] = round(
                measures[-1].seconds / pipeline.seconds, 2
            )
        if baseline is not None:
            rfc3339 = measures[4]
            headline["mixed_vs_rfc3339_pipeline"] = round(pipeline.seconds / rfc3339.seconds, 2)
            headline["mixed_vs_rfc3339_convert"] = round(
                min(convert["pipeline"]) / min(convert["baseline"]), 2
            )
            headline["convert_s"] = {
                "mixed": round(min(convert["pipeline"]), 3),
                "rfc3339": round(min(convert["baseline"]), 3),
            }
        print(json.dumps(headline))
    finally:
        if proxy is not None:
            proxy.stop()
        if moto is not None:
            moto.stop()
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def report(workload: Workload, measures: list[Measure]) -> None:
    print()
    header = ("wall s", "MB/s", "MB/s/core", "rec/s/core", "cold s", "session s")
    print(f"{'':34s} " + " ".join(f"{h:>{w}s}" for h, w in zip(header, (7, 7, 9, 11, 7, 9), strict=True)))
    for m in measures:
        cold = f"{m.cold_seconds:7.2f}" if m.cold_seconds is not None else f"{'':7s}"
        session = f"{m.session_start_s:9.2f}" if m.session_start_s is not None else f"{'':9s}"
        rate = m.mb_per_s(workload)
        print(
            f"{m.name:34s} {m.seconds:7.2f} {rate:7.1f} {rate / m.cores:9.1f} "
            f"{m.records_per_s(workload) / m.cores:11,.0f} {cold} {session}"
        )
    print(f"targets: {json.dumps(TARGETS)}")


if __name__ == "__main__":
    sys.exit(main())
