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

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.commits import TableCommit, TableMarker, TableSpec
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


def _run(tmp_path: Path, columns: tuple[ColumnSpec, ...], values: list[dict[str, Any]]) -> RunResult:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(0, [order_record(o, 0, value=json.dumps(v).encode()) for o, v in enumerate(values)])
    plan: RunPlan = make_plan(
        folder, str(tmp_path / "out"), ranges={0: (-1, len(values) - 1)}, columns=columns
    )
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
        for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    return build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))


def _commit(tables: IcebergTableCommitter, result: RunResult, start: int, end: int) -> None:
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
