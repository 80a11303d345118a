"""Decimal and uuid columns in real Parquet files committed to a real SQLite catalog: values exact,
failures counted, bounds that no reader misreads (issue 23, "found by an independent reading")."""

from __future__ import annotations

import datetime
import decimal
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.table import Table

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.commits import TableCommit, TableMarker, TableSpec
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RunResult, RunStatus, RunTimings
from kafscale_iceberg.domain.schema import table_fields
from tests.support.iceberg_runs import sql_committer, sql_settings
from tests.support.spark_job import SegmentFolder, make_plan, order_record

D = decimal.Decimal
TABLE = "prod.exact"
WIDE = ColumnSpec(name="amount", type=ColumnType.DECIMAL, precision=38, scale=10)
WHOLE = ColumnSpec(name="units", type=ColumnType.DECIMAL, precision=38, scale=0)
NESTED = ColumnSpec(
    name="line",
    type=ColumnType.STRUCT,
    fields=(ColumnSpec(name="price", type=ColumnType.DECIMAL, precision=38, scale=10),),
)
REF = ColumnSpec(name="ref", type=ColumnType.UUID)
DECIMALS = (WIDE, WHOLE, NESTED)


def _land(tmp_path: Path, columns: tuple[ColumnSpec, ...], values: list[bytes]) -> tuple[RunResult, Table]:
    """The values (raw JSON, as producers wrote them) through a task, then one commit to a new table."""
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(0, [order_record(offset, 0, value=value) for offset, value in enumerate(values)])
    plan = make_plan(folder, str(tmp_path / "out"), ranges={0: (-1, len(values) - 1)}, columns=columns)
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
        for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    result = build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
    assert result.status is RunStatus.SUCCEEDED, result.failure
    tables = sql_committer(tmp_path)
    tables.ensure_table(TableSpec(identifier=TABLE, fields=table_fields(columns), create_if_missing=True))
    end = len(values) - 1
    tables.commit(
        tables.read_state(TABLE, "orders"),
        TableCommit(
            topic="orders",
            run_id=result.run_id,
            file_uris=tuple(f.uri for f in result.data_files),
            files=result.data_files,
            start_offsets={0: -1},
            end_offsets={0: end},
            marker_after=TableMarker(offsets={0: end}, run_id=result.run_id),
        ),
    )
    return result, load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)


def _column(table: Table, name: str) -> list[object]:
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    return [r[name] for r in rows]


def _bounds(table: Table, name: str) -> tuple[object, object]:
    """The manifest's (lower, upper) bound of column `name` over the table's one data file."""
    (task,) = table.scan().plan_files()
    field = table.schema().find_field(name)
    lower, upper = task.file.lower_bounds.get(field.field_id), task.file.upper_bounds.get(field.field_id)
    return (
        None if lower is None else from_bytes(field.field_type, lower),
        None if upper is None else from_bytes(field.field_type, upper),
    )


EXACT_VALUES = [
    # JSON numbers, written as text: float64 would make the first 12345678901234567000.
    b'{"amount": 12345678901234567890.123, "units": 99999999999999999999999999999999999999,'
    b' "line": {"price": 0.1000000000}}',
    b'{"amount": -9999999999999999999999999999.9999999999, "units": -99999999999999999999999999999999999999,'
    b' "line": {"price": 12345678901234567890.123}}',
    b'{"amount": "1.50", "units": 1e3, "line": {"price": -0.5}}',
]


def test_json_numbers_land_exactly_in_decimal_columns_at_any_depth(tmp_path: Path) -> None:
    result, table = _land(tmp_path, DECIMALS, EXACT_VALUES)
    assert result.counts.conversion_failures == {}
    assert _column(table, "amount") == [
        D("12345678901234567890.1230000000"),
        D("-9999999999999999999999999999.9999999999"),
        D("1.5000000000"),
    ]
    assert _column(table, "units") == [D("9" * 38), D("-" + "9" * 38), D(1000)]
    assert _column(table, "line") == [
        {"price": D("0.1000000000")},
        {"price": D("12345678901234567890.1230000000")},
        {"price": D("-0.5000000000")},
    ]


def test_a_decimal_the_column_cannot_hold_is_a_counted_conversion_failure_never_rounded(
    tmp_path: Path,
) -> None:
    values = [
        b'{"amount": 1.00000000005}',  # 11 fraction digits for a scale of 10: Connect/Spark round, we count
        b'{"amount": 10000000000000000000000000000}',  # 29 integer digits where 28 fit
        b'{"units": 0.5, "line": {"price": 1e-11}}',
        b'{"amount": 2.5, "units": 7}',
    ]
    result, table = _land(tmp_path, DECIMALS, values)
    # What `conversion_failures_total{topic,column}` and the snapshot's summary count.
    assert result.counts.conversion_failures == {"amount": 2, "units": 1, "line": 1}
    assert _column(table, "amount") == [None, None, None, D("2.5000000000")]
    assert _column(table, "units") == [None, None, None, D(7)]
    assert _column(table, "value")[0] == values[0]  # the record is kept, its bytes intact


def test_decimal_38_bounds_are_the_files_real_minimum_and_maximum(tmp_path: Path) -> None:
    _, table = _land(tmp_path, DECIMALS, EXACT_VALUES)
    assert _bounds(table, "amount") == (
        D("-9999999999999999999999999999.9999999999"),
        D("12345678901234567890.1230000000"),
    )
    assert _bounds(table, "units") == (D("-" + "9" * 38), D("9" * 38))


UUIDS = ["f0000000-0000-0000-0000-000000000001", "10000000-0000-0000-0000-000000000000"]


def test_uuid_columns_are_parquet_uuids_without_bounds_any_reader_could_misread(tmp_path: Path) -> None:
    """Iceberg Java <= 1.10 compares uuids signed (apache/iceberg#14216): with unsigned bounds
    [10.., f0..], `ref = 'f0..01'` looked out of range and Spark skipped the file. No bounds at all,
    in the manifest or the Parquet row groups, and every reader keeps every file."""
    values = [f'{{"ref": "{u}", "line": {{"price": 1}}}}'.encode() for u in UUIDS]
    result, table = _land(tmp_path, (REF, NESTED), values)
    (data_file,) = result.data_files
    parquet = pq.ParquetFile(data_file.uri.removeprefix("file://"))
    ref = parquet.schema.column(parquet.schema.names.index("ref"))
    assert (ref.physical_type, ref.length, str(ref.logical_type)) == ("FIXED_LEN_BYTE_ARRAY", 16, "UUID")
    chunk = parquet.metadata.row_group(0).column(parquet.schema.names.index("ref"))
    assert not chunk.is_stats_set
    assert _bounds(table, "ref") == (None, None)
    assert _column(table, "ref") == [uuid.UUID(u) for u in UUIDS]
    assert table.scan(row_filter=f"ref == '{UUIDS[0]}'").to_arrow().num_rows == 1


def test_a_nested_uuid_is_written_without_statistics_too(tmp_path: Path) -> None:
    column = ColumnSpec(
        name="pair", type=ColumnType.STRUCT, fields=(REF, ColumnSpec(name="n", type=ColumnType.LONG))
    )
    values = [f'{{"pair": {{"ref": "{u}", "n": {i}}}}}'.encode() for i, u in enumerate(UUIDS)]
    result, table = _land(tmp_path, (column,), values)
    metadata = pq.ParquetFile(result.data_files[0].uri.removeprefix("file://")).metadata
    paths = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    assert not metadata.row_group(0).column(paths["pair.ref"]).is_stats_set
    assert metadata.row_group(0).column(paths["pair.n"]).is_stats_set
    assert _bounds(table, "pair.ref") == (None, None)
    assert _column(table, "pair") == [{"ref": uuid.UUID(u), "n": i} for i, u in enumerate(UUIDS)]


def test_duckdb_reads_the_committed_files_values_exactly(tmp_path: Path) -> None:
    """An independent reader of the files the table lists (DuckDB's own Parquet reader)."""
    duckdb = pytest.importorskip("duckdb")
    values = [
        f'{{"amount": 12345678901234567890.123, "ref": "{UUIDS[0]}", "line": {{"price": 0.1}}}}'.encode(),
        f'{{"amount": -9999999999999999999999999999.9999999999, "ref": "{UUIDS[1]}"}}'.encode(),
    ]
    _, table = _land(tmp_path, (WIDE, REF, NESTED), values)
    files = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    rows = duckdb.sql(
        "SELECT CAST(amount AS VARCHAR), typeof(ref), CAST(ref AS VARCHAR), CAST(line.price AS VARCHAR)"
        f' FROM read_parquet({files!r}) ORDER BY "offset"'
    ).fetchall()
    assert rows == [
        ("12345678901234567890.1230000000", "UUID", UUIDS[0], "0.1000000000"),
        ("-9999999999999999999999999999.9999999999", "UUID", UUIDS[1], None),
    ]


def test_time_columns_take_json_times_of_day_with_their_real_bounds_and_count_the_rest(
    tmp_path: Path,
) -> None:
    opens = ColumnSpec(name="opens", type=ColumnType.TIME)
    slot = ColumnSpec(
        name="slot", type=ColumnType.STRUCT, fields=(ColumnSpec(name="at", type=ColumnType.TIME),)
    )
    values = [
        b'{"opens": "09:30:15.25", "slot": {"at": "00:00"}}',
        b'{"opens": "23:59:59.999999"}',
        b'{"opens": "12:00:00+02:00", "slot": {"at": 43200000}}',  # an offset, a number: not times of day
        b'{"opens": "2024-01-04T12:00:00"}',
    ]
    result, table = _land(tmp_path, (opens, slot), values)
    assert result.counts.conversion_failures == {"opens": 2, "slot": 1}
    assert _column(table, "opens") == [
        datetime.time(9, 30, 15, 250_000),
        datetime.time(23, 59, 59, 999_999),
        None,
        None,
    ]
    assert _column(table, "slot") == [{"at": datetime.time(0, 0)}, None, {"at": None}, None]
    assert _bounds(table, "opens") == (34_215_250_000, 86_399_999_999)  # µs since midnight
