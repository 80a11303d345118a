"""Nested and wider column types from JSON records to an Iceberg table: the data plane writes them
(one task in this process, no Spark), the table committer creates or evolves the table and adds the
files (a real SQLite catalog), and the rows read back exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import field_ids_by_path
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.schemas import FIELD_ID_KEY
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.commits import TableCommit, TableMarker, TableSpec
from kafscale_iceberg.domain.field_ids import planned_field_ids
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RunPlan, RunResult, RunStatus, RunTimings
from kafscale_iceberg.domain.schema import table_fields
from tests.support.iceberg_runs import sql_committer, sql_settings
from tests.support.spark_job import SegmentFolder, make_plan, order_record

TABLE = "prod.orders"
ORDER_ID = ColumnSpec(name="order_id", type=ColumnType.LONG, required=True)
NESTED = (
    ORDER_ID,
    ColumnSpec(name="amount", type=ColumnType.DECIMAL, precision=8, scale=2),
    ColumnSpec(name="ref", type=ColumnType.UUID),
    ColumnSpec(name="placed", type=ColumnType.TIMESTAMPTZ),
    ColumnSpec(
        name="customer",
        type=ColumnType.STRUCT,
        fields=(
            ColumnSpec(name="name", type=ColumnType.STRING),
            ColumnSpec(name="since", type=ColumnType.DATE),
        ),
    ),
    ColumnSpec(name="tags", type=ColumnType.LIST, element=ColumnSpec(name="element", type=ColumnType.STRING)),
    ColumnSpec(name="prices", type=ColumnType.MAP, value=ColumnSpec(name="value", type=ColumnType.DOUBLE)),
)
REF = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
VALUES: list[dict[str, Any]] = [
    {
        "order_id": 0,
        "amount": 12.5,
        "ref": REF,
        "placed": "2024-01-04 12:28:13+0100",
        "customer": {"name": "Ada", "since": "2020-02-29"},
        "tags": ["veggie", "large"],
        "prices": {"margherita": 9.5, "extra": 1},
    },
    # Inner values that do not convert are null, and count for their top-level column.
    {"order_id": 1, "amount": "1.005", "customer": {"name": 7}, "tags": ["ok", 3], "prices": {"x": "cheap"}},
    {"order_id": 2},
]


def _run(
    tmp_path: Path,
    columns: tuple[ColumnSpec, ...],
    values: list[dict[str, Any]],
    *,
    field_ids: dict[str, int] | None = None,
    first_offset: int = 0,
) -> RunResult:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(
        0,
        [order_record(o, 0, value=json.dumps(v).encode()) for o, v in enumerate(values, start=first_offset)],
    )
    plan: RunPlan = make_plan(
        folder,
        str(tmp_path / "out"),
        ranges={0: (first_offset - 1, first_offset + len(values) - 1)},
        columns=columns,
    )
    plan = plan.model_copy(update={"table": plan.table.model_copy(update={"field_ids": field_ids})})
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
        for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    return build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))


def _commit(
    tables: IcebergTableCommitter,
    result: RunResult,
    start: int,
    end: int,
    field_ids: dict[str, int] | None = None,
) -> None:
    state = tables.read_state(TABLE, "orders")
    tables.commit(
        state,
        TableCommit(
            topic="orders",
            run_id=result.run_id,
            file_uris=tuple(f.uri for f in result.data_files),
            start_offsets={0: start},
            end_offsets={0: end},
            marker_after=TableMarker(offsets={0: end}, run_id=result.run_id),
            field_ids=field_ids,  # checked against the table's ids before the files are added
        ),
    )


def test_nested_decimal_uuid_and_timestamptz_columns_land_in_a_new_table(tmp_path: Path) -> None:
    result = _run(tmp_path, NESTED, VALUES)
    assert result.status is RunStatus.SUCCEEDED, result.failure
    assert result.counts.conversion_failures == {"amount": 1, "customer": 1, "prices": 1, "tags": 1}

    tables = sql_committer(tmp_path)
    tables.ensure_table(TableSpec(identifier=TABLE, fields=table_fields(NESTED), create_if_missing=True))
    _commit(tables, result, -1, 2)

    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert (types["amount"], types["ref"], types["placed"]) == ("decimal(8, 2)", "uuid", "timestamptz")
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    first, second, third = rows
    assert first["amount"] == decimal.Decimal("12.50")
    assert first["ref"] == uuid.UUID(REF)
    assert first["placed"] == dt.datetime(2024, 1, 4, 11, 28, 13, tzinfo=dt.UTC)
    assert first["customer"] == {"name": "Ada", "since": dt.date(2020, 2, 29)}
    assert first["tags"] == ["veggie", "large"]
    assert dict(first["prices"]) == {"margherita": 9.5, "extra": 1.0}
    assert second["amount"] is None  # three fraction digits for a scale of 2: never rounded
    assert second["customer"] == {"name": None, "since": None}
    assert second["tags"] == ["ok", None]
    assert dict(second["prices"]) == {"x": None}
    assert {k: third[k] for k in ("amount", "ref", "placed", "customer", "tags", "prices")} == dict.fromkeys(
        ("amount", "ref", "placed", "customer", "tags", "prices")
    )


def test_a_table_with_scalar_columns_gains_nested_ones_as_new_optional_columns(tmp_path: Path) -> None:
    tables = sql_committer(tmp_path)
    scalar = (ORDER_ID,)
    tables.ensure_table(TableSpec(identifier=TABLE, fields=table_fields(scalar), create_if_missing=True))
    first = _run(tmp_path / "first", scalar, [{"order_id": 0}])
    _commit(tables, first, -1, 0)

    wider = (*scalar, *NESTED[4:])
    changes = tables.ensure_table(TableSpec(identifier=TABLE, fields=table_fields(wider)))
    assert changes.added == ("customer", "tags", "prices")
    # Widening the same table again with the same mapping changes nothing (nested types compare as a whole).
    assert not tables.ensure_table(TableSpec(identifier=TABLE, fields=table_fields(wider)))

    second = _run(tmp_path / "second", wider, [{"order_id": 1, "customer": {"name": "Bo"}, "tags": ["a"]}])
    _commit(tables, second, 0, 1)
    rows = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).scan().to_arrow().to_pylist()
    by_order = sorted(((r["order_id"], r["customer"], r["tags"]) for r in rows), key=lambda r: r[0])
    assert by_order == [(0, None, None), (1, {"name": "Bo", "since": None}, ["a"])]


def _parquet_ids(field: pa.Field, path: str) -> dict[str, int]:
    """The Parquet field ids a file carries, by the same paths the plans use."""
    ids = (
        {path: int(field.metadata[FIELD_ID_KEY])} if field.metadata and FIELD_ID_KEY in field.metadata else {}
    )
    dtype = field.type
    if pa.types.is_struct(dtype):
        for i in range(dtype.num_fields):
            ids.update(_parquet_ids(dtype.field(i), f"{path}.{dtype.field(i).name}"))
    elif pa.types.is_list(dtype):
        ids.update(_parquet_ids(dtype.value_field, f"{path}.element"))
    elif pa.types.is_map(dtype):
        ids.update(_parquet_ids(dtype.key_field, f"{path}.key"))
        ids.update(_parquet_ids(dtype.item_field, f"{path}.value"))
    return ids


def _drop_name_mapping_and_rename(tmp_path: Path) -> None:
    """No name mapping, and a nested field renamed: only the files' field ids can find the values."""
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    with table.transaction() as transaction:
        transaction.remove_properties("schema.name-mapping.default")
    with table.update_schema() as update:
        update.rename_column(("customer", "name"), "full_name")


def test_nested_columns_get_field_ids_for_every_part_and_read_by_id_after_a_nested_rename(
    tmp_path: Path,
) -> None:
    ids = planned_field_ids(table_fields(NESTED), None)
    assert ids is not None
    assert {"customer.name", "customer.since", "tags.element", "prices.key", "prices.value"} <= set(ids)
    result = _run(tmp_path, NESTED, VALUES, field_ids=ids)
    tables = sql_committer(tmp_path)
    tables.ensure_table(TableSpec(identifier=TABLE, fields=table_fields(NESTED), create_if_missing=True))
    _commit(tables, result, -1, 2, field_ids=ids)  # the plan's ids are the ones the table assigned

    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert field_ids_by_path(table.schema()) == ids
    (data_file,) = result.data_files
    schema = pq.read_schema(data_file.uri.removeprefix("file://"))
    assert {k: v for f in schema for k, v in _parquet_ids(f, f.name).items()} == ids
    _drop_name_mapping_and_rename(tmp_path)

    rows = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).scan().to_arrow().to_pylist()
    first = min(rows, key=lambda r: r["offset"])
    assert first["customer"] == {"full_name": "Ada", "since": dt.date(2020, 2, 29)}
    assert first["tags"] == ["veggie", "large"]
    assert dict(first["prices"]) == {"margherita": 9.5, "extra": 1.0}


def test_nested_columns_added_by_evolution_get_the_ids_the_plan_gave_their_parts(tmp_path: Path) -> None:
    tables = sql_committer(tmp_path)
    scalar = (ORDER_ID,)
    tables.ensure_table(TableSpec(identifier=TABLE, fields=table_fields(scalar), create_if_missing=True))
    first_ids = planned_field_ids(table_fields(scalar), None)
    first = _run(tmp_path / "first", scalar, [{"order_id": 0}], field_ids=first_ids)
    _commit(tables, first, -1, 0, field_ids=first_ids)

    wider = (*scalar, *NESTED[4:])
    ids = planned_field_ids(table_fields(wider), tables.field_ids(TABLE))
    assert ids is not None
    tables.ensure_table(TableSpec(identifier=TABLE, fields=table_fields(wider)))
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert field_ids_by_path(table.schema()) == ids  # the ids evolution gave the columns and parts
    second = _run(
        tmp_path / "second",
        wider,
        [{"order_id": 1, "customer": {"name": "Bo"}}],
        field_ids=ids,
        first_offset=1,
    )
    _commit(tables, second, 0, 1, field_ids=ids)
    _drop_name_mapping_and_rename(tmp_path)

    rows = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).scan().to_arrow().to_pylist()
    by_order = sorted(((r["order_id"], r["customer"]) for r in rows), key=lambda r: r[0])
    assert by_order == [(0, None), (1, {"full_name": "Bo", "since": None})]
