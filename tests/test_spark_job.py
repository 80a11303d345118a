"""The Spark job, run for real in a local SparkSession on generated segments.

Every row is checked against values computed independently from the generated records, and the
files are added with pyiceberg `add_files` to SQLite-catalog tables built from the same fields.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField as IcebergPartitionField
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (
    NestedField,
)
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_schemas import iceberg_type
from kafscale_iceberg.domain.runs import (
    CorruptSegmentPolicy,
    FailureKind,
    OffsetGap,
    PartitionField,
    PartitionTransform,
    RunPlan,
    RunResult,
    RunStatus,
    SchemaMode,
    SegmentSource,
)
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, FieldSpec, table_fields
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.layout import HEADER_SIZE, Codec
from spark_app.job import TaskSizing, run_job
from tests.support.moto import MotoEndpoint
from tests.support.spark_job import (
    BASE_TIME_MS,
    ORDER_COLUMNS,
    SegmentFolder,
    make_plan,
    order_record,
    write_plan,
)

pytestmark = pytest.mark.slow
# Several tasks even for these small runs, so the bin-packing and the report folding are exercised.
SMALL_TASKS = TaskSizing(max_tasks=4, min_task_bytes=1)


# --- expectations, computed without the code under test ------------------------------------------


def expected_headers(record: Record) -> str:
    if not record.headers:
        return ""
    pairs = [{"key": k, "value": (v or b"").decode()} for k, v in record.headers]
    text = json.dumps(pairs, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def expected_row(topic: str, partition: int, record: Record) -> dict[str, Any]:
    assert record.value is not None
    order = json.loads(record.value)
    event_time = dt.datetime.fromisoformat(order["event_time"]).astimezone(dt.UTC).replace(tzinfo=None)
    return {
        "record_id": f"{topic}:{partition}:{record.offset}",
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "key": record.key,
        "value": record.value,
        "headers": expected_headers(record),
        "order_id": order["order_id"],
        "store_id": order["store_id"],
        "customer": order["customer"],
        "total": order["total"],
        "event_time": event_time,
        "ordered_on": dt.date.fromisoformat(order["ordered_on"]),
    }


def read_rows(uris: Sequence[str]) -> list[dict[str, Any]]:
    tables = [pq.read_table(u) for u in uris]
    rows = [r for t in tables for r in t.to_pylist()]
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


# --- Iceberg tables built from the same fields ---------------------------------------------------


def iceberg_schema(fields: Sequence[FieldSpec]) -> Schema:
    return Schema(
        *(
            NestedField(field_id=i, name=f.name, field_type=iceberg_type(f.type), required=f.required)
            for i, f in enumerate(fields, start=1)
        )
    )


def sql_catalog(tmp_path: Path) -> SqlCatalog:
    warehouse = tmp_path / "iceberg"
    warehouse.mkdir(exist_ok=True)
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{warehouse}")
    catalog.create_namespace_if_not_exists("prod")
    return catalog


def add_files(table: Table, uris: Sequence[str]) -> None:
    table.add_files(file_paths=list(uris))


# --- the runs ------------------------------------------------------------------------------------


def run(spark: SparkSession, plan: RunPlan, **options: Any) -> RunResult:
    return run_job(spark, write_plan(plan), sizing=options.pop("sizing", SMALL_TASKS), **options)


@pytest.fixture(scope="module")
def codecs_folder(tmp_path_factory: pytest.TempPathFactory) -> SegmentFolder:
    """Three partitions whose batches use every codec; ranges start and end inside and at segment edges."""
    folder = SegmentFolder(tmp_path_factory.mktemp("codecs"))
    folder.add_orders(0, 0, 30, codecs=(Codec.NONE, Codec.GZIP))
    folder.add_orders(0, 30, 30, codecs=(Codec.SNAPPY, Codec.LZ4))
    folder.add_orders(0, 60, 30, codecs=(Codec.ZSTD,))
    folder.add_orders(1, 0, 20)
    folder.add_orders(1, 20, 20, codecs=(Codec.ZSTD, Codec.GZIP), batch_size=7)
    folder.add_orders(2, 0, 10, codecs=(Codec.LZ4,))
    return folder


CODEC_RANGES = {0: (4, 75), 1: (19, 39), 2: (-1, 9)}


def test_rows_of_every_codec_and_boundary_are_exact_and_iceberg_accepts_them(
    spark: SparkSession, codecs_folder: SegmentFolder, tmp_path: Path
) -> None:
    plan = make_plan(codecs_folder, str(tmp_path), ranges=CODEC_RANGES)
    result = run(spark, plan)

    assert result.status is RunStatus.SUCCEEDED, result.failure
    expected = [
        expected_row("orders", p, codecs_folder.records[p][o])
        for p, (start, end) in sorted(CODEC_RANGES.items())
        for o in range(start + 1, end + 1)
    ]
    assert read_rows([f.uri for f in result.data_files]) == expected
    assert sum(f.record_count for f in result.data_files) == len(expected)
    assert all(f.size_bytes == os.path.getsize(f.uri) for f in result.data_files)
    assert result.dead_letter_files == ()
    # 0..4 and 76..89 of partition 0 are read but outside the range (committed before, or after its
    # end), and partition 1's first segment owns nothing: no segment overlaps another, so none of
    # them counts as overlapped (issue 12 §6: only records another segment owns do).
    assert result.counts.out_of_range == 0
    assert result.counts.written == len(expected)
    assert result.counts.segments_read == 5
    outcomes = {p.partition: p for p in result.partitions}
    for partition, (start, end) in CODEC_RANGES.items():
        outcome = outcomes[partition]
        assert (outcome.first_offset, outcome.last_offset) == (start + 1, end)
        assert outcome.max_timestamp_ms == BASE_TIME_MS + end * 1000
        assert outcome.records_written == end - start
        assert outcome.gaps == ()

    catalog = sql_catalog(tmp_path)
    table = catalog.create_table("prod.orders", iceberg_schema(table_fields(ORDER_COLUMNS)))
    add_files(table, [f.uri for f in result.data_files])
    assert table.scan().to_arrow().num_rows == len(expected)


def test_a_rerun_rewrites_the_same_files(
    spark: SparkSession, codecs_folder: SegmentFolder, tmp_path: Path
) -> None:
    plan = make_plan(codecs_folder, str(tmp_path), ranges=CODEC_RANGES)
    first = run(spark, plan)
    again = run(spark, plan)

    assert [f.uri for f in again.data_files] == [f.uri for f in first.data_files]
    assert [f.size_bytes for f in again.data_files] == [f.size_bytes for f in first.data_files]
    on_disk = sorted(str(p) for p in Path(plan.table.data_uri).iterdir())
    assert on_disk == sorted(f.uri for f in first.data_files)
    stored = RunResult.model_validate_json(Path(plan.result_uri).read_text())
    assert stored.data_files == again.data_files


def test_a_partitioned_table_gets_one_partition_value_per_file(
    spark: SparkSession, codecs_folder: SegmentFolder, tmp_path: Path
) -> None:
    partition_by = (
        PartitionField(column="store_id", transform=PartitionTransform.IDENTITY),
        PartitionField(column="event_time", transform=PartitionTransform.DAY),
    )
    plan = make_plan(codecs_folder, str(tmp_path), ranges=CODEC_RANGES, partition_by=partition_by)
    result = run(spark, plan)

    assert result.status is RunStatus.SUCCEEDED, result.failure
    epoch = dt.datetime(1970, 1, 1)
    for file in result.data_files:
        rows = pq.read_table(file.uri).to_pylist()
        days = {(r["event_time"] - epoch).days for r in rows}
        stores = {r["store_id"] for r in rows}
        assert file.partition_values == {"store_id": stores.pop(), "event_time_day": days.pop()}
        assert not stores
        assert not days
    assert sum(f.record_count for f in result.data_files) == result.counts.written == 71 + 20 + 10

    catalog = sql_catalog(tmp_path)
    spec = PartitionSpec(
        IcebergPartitionField(source_id=10, field_id=1000, transform=IdentityTransform(), name="store_id"),
        IcebergPartitionField(source_id=13, field_id=1001, transform=DayTransform(), name="event_time_day"),
    )
    table = catalog.create_table(
        "prod.orders", iceberg_schema(table_fields(ORDER_COLUMNS)), partition_spec=spec
    )
    add_files(table, [f.uri for f in result.data_files])
    files = table.inspect.files().to_pylist()
    by_path = {f["file_path"]: f["partition"] for f in files}
    for file in result.data_files:
        partition = by_path[f"file://{file.uri}" if f"file://{file.uri}" in by_path else file.uri]
        day = dt.date(1970, 1, 1) + dt.timedelta(days=file.partition_values["event_time_day"])  # type: ignore[arg-type]
        assert partition == {"store_id": file.partition_values["store_id"], "event_time_day": day}


def test_offsets_no_segment_holds_are_reported_as_gaps(spark: SparkSession, tmp_path: Path) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 10)
    folder.add_orders(0, 20, 10)
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 34)})
    result = run(spark, plan)

    assert result.status is RunStatus.SUCCEEDED, result.failure
    (outcome,) = result.partitions
    assert outcome.gaps == (OffsetGap(first=10, last=19), OffsetGap(first=30, last=34))
    assert (outcome.first_offset, outcome.last_offset, outcome.records_written) == (0, 29, 20)


# --- invalid records -----------------------------------------------------------------------------

INVALID_VALUES: dict[int, bytes | None] = {
    2: b'{"order_id":',
    3: b"[1,2]",
    5: b'{"store_id":1}',
    6: b'{"order_id":"12"}',
    7: None,
    8: b'{"order_id":8,"total":-1}',
}
NEGATIVE_TOTAL_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"total": {"type": "number", "minimum": 0}},
}


@pytest.fixture(scope="module")
def invalid_folder(tmp_path_factory: pytest.TempPathFactory) -> SegmentFolder:
    folder = SegmentFolder(tmp_path_factory.mktemp("invalid"))
    records = [order_record(o, 0) for o in range(10)]
    for offset, value in INVALID_VALUES.items():
        original = records[offset]
        records[offset] = Record(offset, original.timestamp_ms, original.key, value, original.headers)
    folder.add(0, records)
    return folder


@pytest.mark.parametrize(
    ("mode", "dead"),
    [
        (
            SchemaMode.LENIENT,
            {
                2: "invalid_json",
                3: "invalid_json",
                5: "required_column",
                6: "required_column",
                7: "required_column",
                8: "schema_violation",
            },
        ),
        (
            SchemaMode.OFF,
            {
                2: "invalid_json",
                3: "invalid_json",
                5: "required_column",
                6: "required_column",
                7: "required_column",
            },
        ),
    ],
)
def test_invalid_records_become_dead_letter_rows(
    spark: SparkSession, invalid_folder: SegmentFolder, tmp_path: Path, mode: SchemaMode, dead: dict[int, str]
) -> None:
    schema = NEGATIVE_TOTAL_SCHEMA if mode is not SchemaMode.OFF else None
    plan = make_plan(invalid_folder, str(tmp_path), ranges={0: (-1, 9)}, schema_mode=mode, json_schema=schema)
    result = run(spark, plan)

    assert result.status is RunStatus.SUCCEEDED, result.failure
    written = read_rows([f.uri for f in result.data_files])
    assert [r["offset"] for r in written] == [o for o in range(10) if o not in dead]
    dead_rows = read_rows([f.uri for f in result.dead_letter_files])
    assert {r["offset"]: r["error_kind"] for r in dead_rows} == dead
    records = invalid_folder.records[0]
    (segment,) = invalid_folder.written[0]
    for row in dead_rows:
        record = records[row["offset"]]
        assert row["record_id"] == f"orders:0:{record.offset}"
        assert (row["timestamp_ms"], row["key"], row["value"]) == (
            record.timestamp_ms,
            record.key,
            record.value,
        )
        assert row["headers"] == expected_headers(record)
        assert (row["run_id"], row["segment_key"], row["last_offset"]) == (plan.run_id, segment.key, None)
        assert row["error"]
    by_offset = {r["offset"]: r["error"] for r in dead_rows}
    assert "not JSON" in by_offset[2]
    assert "array" in by_offset[3]
    assert by_offset[5] == "required column 'order_id' (long): missing"
    assert by_offset[6] == "required column 'order_id' (long): \"12\" is not a valid long"
    assert result.counts.dead_lettered == len(dead)
    assert result.partitions[0].records_dead_lettered == len(dead)

    catalog = sql_catalog(tmp_path)
    table = catalog.create_table("prod.orders_dead_letters", iceberg_schema(DEAD_LETTER_FIELDS))
    add_files(table, [f.uri for f in result.dead_letter_files])
    assert table.scan().to_arrow().num_rows == len(dead)


def test_strict_mode_fails_the_run_naming_the_first_invalid_record(
    spark: SparkSession, invalid_folder: SegmentFolder, tmp_path: Path
) -> None:
    plan = make_plan(
        invalid_folder,
        str(tmp_path),
        ranges={0: (-1, 9)},
        schema_mode=SchemaMode.STRICT,
        json_schema=NEGATIVE_TOTAL_SCHEMA,
    )
    result = run(spark, plan)

    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.STRICT_VALIDATION
    assert result.failure.record_id == "orders:0:2"
    assert "orders:0:2" in result.failure.message
    assert result.data_files == result.dead_letter_files == ()
    assert RunResult.model_validate_json(Path(plan.result_uri).read_text()) == result


# --- corrupt and missing segments ----------------------------------------------------------------


@pytest.fixture(scope="module")
def corrupt_folder(tmp_path_factory: pytest.TempPathFactory) -> SegmentFolder:
    folder = SegmentFolder(tmp_path_factory.mktemp("corrupt"))
    folder.add_orders(0, 0, 10)
    # A flipped byte inside the first batch's records: its CRC-32C no longer matches.
    folder.add_orders(0, 10, 10, corrupt_at=HEADER_SIZE + 70)
    folder.add_orders(0, 20, 10)
    return folder


def test_a_corrupt_segment_fails_the_run_under_policy_fail(
    spark: SparkSession, corrupt_folder: SegmentFolder, tmp_path: Path
) -> None:
    plan = make_plan(corrupt_folder, str(tmp_path), ranges={0: (-1, 29)})
    result = run(spark, plan)

    assert result.status is RunStatus.FAILED
    failure = result.failure
    assert failure is not None
    assert failure.kind is FailureKind.CORRUPT_SEGMENT
    assert failure.segment_key == corrupt_folder.written[0][1].key
    assert failure.position == HEADER_SIZE + 17  # the batch CRC field
    assert "CRC" in failure.message
    assert result.data_files == result.dead_letter_files == ()


def test_a_corrupt_segment_is_quarantined_and_the_run_continues(
    spark: SparkSession, corrupt_folder: SegmentFolder, tmp_path: Path
) -> None:
    plan = make_plan(
        corrupt_folder,
        str(tmp_path),
        ranges={0: (-1, 29)},
        corrupt_segment_policy=CorruptSegmentPolicy.QUARANTINE,
    )
    result = run(spark, plan)

    assert result.status is RunStatus.SUCCEEDED, result.failure
    assert [r["offset"] for r in read_rows([f.uri for f in result.data_files])] == [
        *range(10),
        *range(20, 30),
    ]
    (outcome,) = result.partitions
    (quarantined,) = outcome.quarantined
    corrupt_key = corrupt_folder.written[0][1].key
    assert (quarantined.key, quarantined.base_offset, quarantined.last_offset) == (corrupt_key, 10, 19)
    assert "CRC" in quarantined.error
    assert outcome.gaps == ()
    (row,) = read_rows([f.uri for f in result.dead_letter_files])
    assert row["error_kind"] == "corrupt_segment"
    assert (row["segment_key"], row["offset"], row["last_offset"]) == (corrupt_key, 10, 19)
    assert row["record_id"] == "orders:0:10"
    assert row["timestamp_ms"] is None


def test_a_missing_segment_fails_the_run_as_unavailable(spark: SparkSession, tmp_path: Path) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    segment = folder.add_orders(0, 0, 10)
    Path(folder.root / segment.key).unlink()
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 9)})
    result = run(spark, plan)

    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.SEGMENT_UNAVAILABLE
    assert result.failure.segment_key == segment.key


def test_a_plan_partitioned_on_a_missing_column_fails_as_invalid(spark: SparkSession, tmp_path: Path) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 5)
    plan = make_plan(
        folder, str(tmp_path), ranges={0: (-1, 4)}, partition_by=(PartitionField(column="nope"),)
    )
    result = run(spark, plan)

    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.INVALID_PLAN
    assert "nope" in result.failure.message


# --- S3 and spark-submit -------------------------------------------------------------------------


def test_segments_plan_files_and_result_on_s3(
    spark: SparkSession, moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 25, codecs=(Codec.SNAPPY,))
    folder.add_orders(1, 0, 15)
    bucket = moto_server.new_bucket()
    s3 = boto3.client("s3", endpoint_url=moto_server.url, region_name=moto_server.region)
    for segments in folder.written.values():
        for segment in segments:
            s3.put_object(Bucket=bucket, Key=segment.key, Body=(folder.root / segment.key).read_bytes())
    source = SegmentSource(
        bucket=bucket, endpoint_url=moto_server.url, region=moto_server.region, path_style=True
    )
    plan = make_plan(
        folder,
        f"s3://{bucket}",
        ranges={0: (-1, 24), 1: (-1, 14)},
        source=source,
        runs_uri=f"s3://{bucket}/runs",
    )
    store = DocumentStore(moto_server.s3_settings())
    plan_uri = write_plan(plan, store)

    result = run_job(spark, plan_uri, s3=moto_server.s3_settings(), sizing=SMALL_TASKS)

    assert result.status is RunStatus.SUCCEEDED, result.failure
    assert RunResult.model_validate_json(store.read_bytes(plan.result_uri)) == result
    tables = [pq.read_table(pa.BufferReader(store.read_bytes(f.uri))) for f in result.data_files]
    assert all(
        f.uri.startswith(f"s3://{bucket}/warehouse/orders/data/{plan.run_id}/") for f in result.data_files
    )
    offsets = sorted((r["partition"], r["offset"]) for t in tables for r in t.to_pylist())
    assert offsets == [(0, o) for o in range(25)] + [(1, o) for o in range(15)]


def test_spark_submit_runs_the_entry_point(tmp_path: Path) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 10)
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 9)})
    plan_uri = write_plan(plan)
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    completed = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            "spark_app/main.py",
            "--plan",
            plan_uri,
        ],
        cwd=Path(__file__).parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    result = RunResult.model_validate_json(Path(plan.result_uri).read_text())
    assert result.status is RunStatus.SUCCEEDED
    assert result.counts.written == 10
    assert result.timings.session_start_s > 0
