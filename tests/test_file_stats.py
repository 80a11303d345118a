"""Data-file metrics computed by the task while writing equal what pyiceberg computes from the footers.

Property test: random rows of every column type (nulls, NaN, infinities, long and non-ASCII strings,
several row groups) written by the real `RollingParquetWriter`; the `DataFile` built from the
carried metrics (`data_file_from_stats`, no I/O) must equal pyiceberg's `parquet_file_to_data_file`
(which reads the footer, as `add_files` does) field by field, for each Iceberg metrics mode and for
a table whose field ids are not the files' column order. Real SQLite catalog, real files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import NestedField

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_data_files import (
    MetricsNeedFooterError,
    TableMetrics,
    data_file_from_stats,
    data_files_to_add,
)
from kafscale_iceberg.adapters.iceberg_schemas import iceberg_type
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.dataplane.file_stats import CARRIED_PREFIX
from kafscale_iceberg.dataplane.parquet_files import RollingParquetWriter
from kafscale_iceberg.dataplane.schemas import data_schema
from kafscale_iceberg.domain.commits import TableSpec
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, DataFile
from kafscale_iceberg.domain.schema import table_fields
from tests.support.iceberg_runs import sql_settings

COLUMNS = (
    ColumnSpec(name="name", type=ColumnType.STRING),
    ColumnSpec(name="qty", type=ColumnType.INT),
    ColumnSpec(name="total", type=ColumnType.DOUBLE),
    ColumnSpec(name="ratio", type=ColumnType.FLOAT),
    ColumnSpec(name="paid", type=ColumnType.BOOLEAN),
    ColumnSpec(name="blob", type=ColumnType.BINARY),
    ColumnSpec(name="at", type=ColumnType.TIMESTAMP),
    ColumnSpec(name="on", type=ColumnType.DATE),
    ColumnSpec(name="at_utc", type=ColumnType.TIMESTAMPTZ),
    ColumnSpec(name="big", type=ColumnType.LONG, required=True),
)
FIELDS = table_fields(COLUMNS)
SCHEMA = data_schema(COLUMNS)
MODES = ("default", "truncate(4)", "truncate(64)", "full", "counts", "none", "mixed")

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=90) | st.sampled_from(
    ["", "a", "\U0010ffff" * 20, "x" * 20 + "\U0010ffff" * 50]
)
_float = st.floats(allow_nan=True, allow_infinity=True, width=64)
_float32 = st.floats(allow_nan=True, allow_infinity=True, width=32)


def _nullable(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


_row = st.fixed_dictionaries(
    {
        "record_id": _text,
        "topic": st.sampled_from(["orders", "payments"]),
        "partition": st.integers(0, 2**31 - 1),
        "offset": st.integers(0, 2**63 - 1),
        "timestamp_ms": st.integers(-(2**40), 2**41),
        "key": _nullable(st.binary(max_size=80)),
        "value": _nullable(st.binary(max_size=200)),
        "headers": _nullable(_text),
        "name": _nullable(_text),
        "qty": _nullable(st.integers(-(2**31), 2**31 - 1)),
        "total": _nullable(_float),
        "ratio": _nullable(_float32),
        "paid": _nullable(st.booleans()),
        "blob": _nullable(st.binary(max_size=100) | st.just(b"\xff" * 70)),
        "at": _nullable(st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1))),
        "on": _nullable(st.dates(dt.date(1800, 1, 1), dt.date(2300, 1, 1))),
        "at_utc": _nullable(
            st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC))
        ),
        "big": st.integers(-(2**63), 2**63 - 1),
    }
)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Table]:
    """One table per metrics mode (created by this product), plus one with the Go processor's ids."""
    root = tmp_path_factory.mktemp("stats")
    catalog = load_iceberg_catalog(sql_settings(root))
    committer = IcebergTableCommitter(catalog)
    made: dict[str, Table] = {}
    for mode in MODES:
        identifier = f"lake.t_{mode.replace('(', '_').replace(')', '')}"
        committer.ensure_table(TableSpec(identifier=identifier, fields=FIELDS, create_if_missing=True))
        table = catalog.load_table(identifier)
        if mode == "mixed":
            with table.transaction() as tx:
                tx.set_properties(
                    {
                        "write.metadata.metrics.default": "truncate(8)",
                        "write.metadata.metrics.column.name": "full",
                        "write.metadata.metrics.column.blob": "counts",
                        "write.metadata.metrics.column.qty": "none",
                    }
                )
        elif mode != "default":
            with table.transaction() as tx:
                tx.set_properties({"write.metadata.metrics.default": mode})
        made[mode] = catalog.load_table(identifier)
    made["shuffled_ids"] = _shuffled_ids_table(catalog)
    return made


def _shuffled_ids_table(catalog: Catalog) -> Table:
    """Field ids in reverse column order with gaps (a table someone else created), name-mapped."""
    fields = [
        NestedField(field_id=200 - 7 * i, name=f.name, field_type=iceberg_type(f.type), required=f.required)
        for i, f in enumerate(FIELDS)
    ]
    table = catalog.create_table("lake.shuffled", Schema(*reversed(fields)))
    with table.transaction() as tx:
        tx.set_properties({"schema.name-mapping.default": table.schema().name_mapping.model_dump_json()})
    return catalog.load_table("lake.shuffled")


def _write(tmp_path: Path, rows: list[dict[str, Any]], row_group_bytes: int) -> DataFile:
    writer = RollingParquetWriter(
        sink=StagedFileStore(),
        data_uri=str(tmp_path),
        schema=SCHEMA,
        task_index=0,
        target_file_size_bytes=1 << 30,
        row_group_bytes=row_group_bytes,
    )
    for start in range(0, len(rows), 7):
        writer.write({}, pa.Table.from_pylist(rows[start : start + 7], schema=SCHEMA))
    (written,) = writer.close()
    return written


def _fields(data_file: IcebergDataFile) -> dict[str, Any]:
    names = (
        "file_path",
        "record_count",
        "file_size_in_bytes",
        "column_sizes",
        "value_counts",
        "null_value_counts",
        "nan_value_counts",
        "lower_bounds",
        "upper_bounds",
        "split_offsets",
        "content",
        "file_format",
    )
    values = {name: getattr(data_file, name) for name in names}
    values["partition"] = list(data_file.partition)
    return values


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(_row, min_size=1, max_size=40),
    row_group_bytes=st.sampled_from([1, 2_000, 1 << 20]),
    mode=st.sampled_from((*MODES, "shuffled_ids")),
)
def test_carried_metrics_equal_pyiceberg_from_the_footer(
    tables: dict[str, Table], tmp_path: Path, rows: list[dict[str, Any]], row_group_bytes: int, mode: str
) -> None:
    table = tables[mode]
    written = _write(tmp_path / f"{abs(hash((mode, row_group_bytes, len(rows))))}", rows, row_group_bytes)
    assert written.stats is not None

    from_footer = parquet_file_to_data_file(table.io, table.metadata, written.uri)
    carried = None
    with contextlib.suppress(MetricsNeedFooterError):
        carried = data_file_from_stats(TableMetrics(table.metadata), written, written.stats)

    if carried is None:  # only a cut bound the table's metrics mode needs sends a file to its footer
        assert any(c.lower_cut or c.upper_cut for c in written.stats.columns)
    else:
        assert _fields(carried) == _fields(from_footer)


def test_long_bounds_are_carried_cut_and_still_give_truncated_bounds(
    tables: dict[str, Table], tmp_path: Path
) -> None:
    row = dict.fromkeys(SCHEMA.names)
    row.update(
        record_id="r" * 200, topic="orders", partition=0, offset=1, timestamp_ms=0, big=1, name="é" * 100
    )
    written = _write(tmp_path, [row], 1 << 20)
    assert written.stats is not None
    name = next(c for c in written.stats.columns if c.name == "name")
    assert name.lower_cut
    assert name.upper_cut
    assert len(name.lower or "") < 4 * CARRIED_PREFIX * 2

    table = tables["default"]
    carried = data_file_from_stats(TableMetrics(table.metadata), written, written.stats)
    assert _fields(carried) == _fields(parquet_file_to_data_file(table.io, table.metadata, written.uri))
    # A full-metrics column cannot be given from a cut bound: that file's footer is read instead.
    full = tables["full"]
    (fallback,) = data_files_to_add(full.metadata, full.io, [written.uri], {written.uri: written})
    assert _fields(fallback) == _fields(parquet_file_to_data_file(full.io, full.metadata, written.uri))


def test_results_without_metrics_are_read_from_the_footers(tables: dict[str, Table], tmp_path: Path) -> None:
    row = dict.fromkeys(SCHEMA.names)
    row.update(record_id="r", topic="orders", partition=0, offset=1, timestamp_ms=0, big=1)
    written = _write(tmp_path, [row], 1 << 20)
    old = written.model_copy(update={"stats": None})
    table = tables["default"]

    (built,) = data_files_to_add(table.metadata, table.io, [old.uri], {old.uri: old})

    assert _fields(built) == _fields(parquet_file_to_data_file(table.io, table.metadata, old.uri))


def test_carried_metrics_need_no_footer_read(tables: dict[str, Table], tmp_path: Path) -> None:
    row = dict.fromkeys(SCHEMA.names)
    row.update(record_id="r", topic="orders", partition=0, offset=1, timestamp_ms=0, big=2)
    written = _write(tmp_path, [row], 1 << 20)
    Path(written.uri).unlink()  # reading the footer now fails: the carried metrics must be enough
    table = tables["default"]

    (built,) = data_files_to_add(table.metadata, table.io, [written.uri], {written.uri: written})

    assert built.record_count == 1
    with pytest.raises(FileNotFoundError):
        data_files_to_add(table.metadata, table.io, [written.uri], {})


def test_files_with_nested_or_decimal_columns_carry_no_metrics_and_are_read_from_the_footer(
    tmp_path: Path,
) -> None:
    """Metrics are carried only for the scalar types mapped here; a nested or decimal column makes the
    file's `stats` None (the commit step reads its footer) instead of failing the task."""
    schema = pa.schema([("amount", pa.decimal128(8, 2)), ("customer", pa.struct([("name", pa.string())]))])
    writer = RollingParquetWriter(
        sink=StagedFileStore(),
        data_uri=str(tmp_path),
        schema=schema,
        task_index=0,
        target_file_size_bytes=1 << 30,
    )
    writer.write({}, pa.Table.from_pylist([{"amount": None, "customer": {"name": "Bo"}}], schema=schema))

    (written,) = writer.close()

    assert written.record_count == 1
    assert written.stats is None
