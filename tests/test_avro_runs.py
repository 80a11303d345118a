"""Avro values (Confluent wire format) through whole runs: the table is created from the records'
schemas, evolves with a new schema version in the same Iceberg commit as the rows that bring it, bad
input lands in the dead-letter table with its reason (or fails a strict run), a registry outage fails
the run transiently.

Real parts: genuine wire bytes from confluent-kafka's `AvroSerializer`; the schemas served over HTTP
by `tests/support/schema_registry.py` (a stand-in for a Confluent registry: none installs here); the
data plane's tasks in this process (`spark_app/job.py`'s stages call the same `observe_task` and
`run_task`); a real SQLite Iceberg catalog for the commit.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import io
import json
import struct
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq
import pytest

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import table_columns
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.registries import record_schema_registry
from kafscale_iceberg.dataplane.inference import with_inferred_columns
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import observe_task, plan_tasks, run_task
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.field_ids import planned_field_ids
from kafscale_iceberg.domain.inference import merge_observations
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    FailureKind,
    RegistrySettings,
    RunPlan,
    RunResult,
    RunStatus,
    RunTimings,
    SchemaMode,
    TimeColumns,
)
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.domain.value_formats import ValueFormatSpec
from tests.support.glue_registry import GlueRegistry
from tests.support.hang_limit import hang_limit
from tests.support.iceberg_runs import sql_committer, sql_settings
from tests.support.schema_registry import StandInRegistry
from tests.support.spark_job import SegmentFolder, make_plan, order_record
from tests.test_avro_bad_payloads import HANG_SECONDS, ORDER_KEY
from tests.test_record_decoders import PIZZA_V1, PIZZA_V2, Producer, pizza
from tests.test_schema_inference import TABLE, commit


def avro_run(
    root: Path,
    values: list[bytes],
    tables: IcebergTableCommitter | None,
    registry: StandInRegistry | GlueRegistry,
    *,
    first_offset: int = 0,
    columns: tuple[ColumnSpec, ...] | None = None,
    value_format: ValueFormatSpec = value_formats.AVRO,
    keys: list[bytes | None] | None = None,
    **conversion: Any,
) -> tuple[RunPlan, RunResult]:
    """A run of an Avro mapping as the launcher plans it and the Spark job runs it (observation
    stage, the driver's decision, the conversion), reading schemas from `registry` (a Confluent
    stand-in, or a Glue registry on moto)."""
    known = tables.field_ids(TABLE) if tables is not None else None
    folder = SegmentFolder(root / "segments")
    records = [order_record(o, 0, value=v) for o, v in enumerate(values, start=first_offset)]
    if keys is not None:  # the records' keys as given (else `order_record`'s `key-<offset>`)
        records = [dataclasses.replace(r, key=k) for r, k in zip(records, keys, strict=True)]
    folder.add(0, records)
    infer = columns is None
    plan: RunPlan = make_plan(
        folder,
        str(root / "out"),
        ranges={0: (first_offset - 1, first_offset + len(values) - 1)},
        columns=(known.columns or ()) if infer and known is not None else (columns or ()),
        infer_columns=infer,
        value_format=value_format,
        **conversion,
    )
    settings = (
        registry.settings() if isinstance(registry, GlueRegistry) else RegistrySettings(url=registry.url)
    )
    plan = plan.model_copy(
        update={
            "schema_registry": settings,
            "table": plan.table.model_copy(
                update={
                    "field_ids": planned_field_ids(table_fields(plan.conversion.columns), known),
                    "last_column_id": None if known is None else known.last_column_id,
                }
            ),
        }
    )
    client = record_schema_registry(settings)
    tasks = plan_tasks(plan, max_tasks=2, min_task_bytes=1)
    decided = plan
    if infer:
        observed = merge_observations(
            observe_task(plan, t, reader=DocumentStore(), registry=client).tables for t in tasks
        )
        decided = with_inferred_columns(plan, observed)
    reports = [
        run_task(decided, t, reader=DocumentStore(), sink=StagedFileStore(), registry=client) for t in tasks
    ]
    result = build_run_result(decided, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
    if result.status is RunStatus.FAILED:
        return plan, result
    return plan, result.model_copy(
        update={"columns": decided.conversion.columns, "field_ids": decided.table.field_ids}
    )


def _table_rows(tmp_path: Path) -> tuple[dict[str, str], list[dict[str, Any]]]:
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    columns = {c.name: c.type_name for c in table_columns(table.schema())}
    return columns, sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])


def test_the_table_is_created_from_the_schema_and_evolves_with_its_next_version_in_one_commit(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    producer = Producer(schema_registry)
    plan, result = avro_run(
        tmp_path / "r1", producer.values(PIZZA_V1, [pizza(1), pizza(2)]), None, schema_registry
    )
    assert result.status is RunStatus.SUCCEEDED
    commit(sql_committer(tmp_path), plan, result, -1, 1)
    columns, _rows = _table_rows(tmp_path)
    assert {name: columns[name] for name in ("id", "price", "ordered", "toppings")} == {
        "id": "int",
        "price": "decimal(6,2)",
        "ordered": "timestamptz",
        "toppings": "list<string>",
    }
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    snapshots, versions = len(table.metadata.snapshots), len(table.metadata.metadata_log)

    values = producer.values(PIZZA_V2, [pizza(2**40, tip=2.5)])
    plan, result = avro_run(tmp_path / "r2", values, sql_committer(tmp_path), schema_registry, first_offset=2)
    assert result.status is RunStatus.SUCCEEDED
    commit(sql_committer(tmp_path), plan, result, 1, 2)

    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert len(table.metadata.snapshots) == snapshots + 1
    assert len(table.metadata.metadata_log) == versions + 1  # the schema change rode with the append
    columns, rows = _table_rows(tmp_path)
    assert columns["id"] == "long"  # widened by the new version
    assert columns["tip"] == "double"
    assert list(columns)[-2:] == ["tip", "order_key"]
    assert [(r["id"], r["tip"], r["price"]) for r in rows] == [
        (1, None, decimal.Decimal("12.50")),
        (2, None, decimal.Decimal("12.50")),
        (2**40, 2.5, decimal.Decimal("12.50")),
    ]


def test_listed_columns_take_the_fields_of_that_name(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    values = Producer(schema_registry).values(PIZZA_V1, [pizza(7)])
    columns = (ColumnSpec(name="id", type=ColumnType.LONG), ColumnSpec(name="sauce", type=ColumnType.STRING))
    _plan, result = avro_run(tmp_path, values, None, schema_registry, columns=columns)
    (data_file,) = result.data_files
    rows = pq.read_table(data_file.uri.removeprefix("file://")).select(["id", "sauce"]).to_pylist()
    assert rows == [{"id": 7, "sauce": "tomato"}]


def test_bad_input_lands_in_the_dead_letter_table_with_its_reason(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    good = Producer(schema_registry).values(PIZZA_V1, [pizza(1)])
    values = [good[0], b'{"id": 2}', b"\x00\x00\x00\x00\x63" + good[0][5:], good[0][:-3]]
    _plan, result = avro_run(tmp_path, values, None, schema_registry, schema_mode=SchemaMode.LENIENT)
    assert result.status is RunStatus.SUCCEEDED
    assert (result.counts.written, result.counts.dead_lettered) == (1, 3)
    assert result.counts.dead_letter_reasons == {"wire_format": 1, "unknown_schema": 1, "undecodable": 1}
    (dead_file,) = result.dead_letter_files
    dead = pq.read_table(dead_file.uri.removeprefix("file://")).to_pylist()
    assert [(d["offset"], d["error_kind"]) for d in dead] == [
        (1, "wire_format"),
        (2, "unknown_schema"),
        (3, "undecodable"),
    ]
    assert "schema id 99" in dead[1]["error"]
    assert "schema id 1" in dead[2]["error"]


def test_in_strict_mode_an_undecodable_record_fails_the_run_naming_it_and_its_schema_id(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    good = Producer(schema_registry).values(PIZZA_V1, [pizza(1)])
    _plan, result = avro_run(
        tmp_path, [good[0], good[0][:-3]], None, schema_registry, schema_mode=SchemaMode.STRICT
    )
    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.STRICT_VALIDATION
    assert result.failure.record_id == "orders:0:1"
    assert "schema id 1" in result.failure.message


def _misregistered(registry: StandInRegistry) -> list[bytes]:
    """A good order key, then two pizzas framed with the order key schema's id (a mis-registered id)."""
    schema_id = registry.register("orders-key", json.dumps(ORDER_KEY))
    frame = b"\x00" + struct.pack(">I", schema_id)
    pizzas = [frame + _avro_bytes(PIZZA_V1, pizza(n)) for n in (1, 2)]
    return [frame + _avro_bytes(ORDER_KEY, {"id": 7, "region": "eu"}), *pizzas]


def _avro_bytes(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_records_written_with_another_schema_than_their_id_names_are_dead_letters_and_the_rest_land(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    # Before the payload check (formats/avro_skip.py) this run never ended: the block reader spun
    # (`hang_limit` ends the process should it again).
    columns = (ColumnSpec(name="id", type=ColumnType.LONG), ColumnSpec(name="region", type=ColumnType.STRING))
    values = _misregistered(schema_registry)
    with hang_limit(HANG_SECONDS):
        _plan, result = avro_run(
            tmp_path, values, None, schema_registry, columns=columns, schema_mode=SchemaMode.LENIENT
        )
    assert result.status is RunStatus.SUCCEEDED
    assert (result.counts.written, result.counts.dead_letter_reasons) == (1, {"undecodable": 2})
    (data_file,) = result.data_files
    assert pq.read_table(data_file.uri.removeprefix("file://")).select(["id", "region"]).to_pylist() == [
        {"id": 7, "region": "eu"}
    ]
    (dead_file,) = result.dead_letter_files
    dead = pq.read_table(dead_file.uri.removeprefix("file://")).to_pylist()
    assert [d["offset"] for d in dead] == [1, 2]
    assert "schema id 1: 15 bytes left over after the record (it ends at byte 8 of 23)" in dead[0]["error"]


def test_in_strict_mode_a_record_written_with_another_schema_fails_the_run_naming_it(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    columns = (ColumnSpec(name="id", type=ColumnType.LONG),)
    values = _misregistered(schema_registry)
    with hang_limit(HANG_SECONDS):
        _plan, result = avro_run(
            tmp_path, values, None, schema_registry, columns=columns, schema_mode=SchemaMode.STRICT
        )
    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.STRICT_VALIDATION
    assert result.failure.record_id == "orders:0:1"
    assert "schema id 1: 15 bytes left over" in result.failure.message


def test_a_registry_outage_fails_the_run_transiently_and_dead_letters_nothing(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    values = Producer(schema_registry).values(PIZZA_V1, [pizza(1)])
    schema_registry.failing = True
    _plan, result = avro_run(tmp_path, values, None, schema_registry)
    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.REGISTRY_UNAVAILABLE
    assert result.counts.dead_lettered == 0


SHIFT = {
    "type": "record",
    "name": "Shift",
    "namespace": "shop",
    "fields": [
        {"name": "opens", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "closes", "type": ["null", {"type": "long", "logicalType": "time-micros"}], "default": None},
    ],
}


def test_avro_times_of_day_land_in_iceberg_time_columns_that_readers_read_as_times(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    opens, closes = datetime.time(9, 30, 15, 250_000), datetime.time(23, 59, 59, 999_999)
    values = Producer(schema_registry).values(SHIFT, [{"opens": opens, "closes": closes}])
    plan, result = avro_run(tmp_path / "r1", values, None, schema_registry)
    assert result.status is RunStatus.SUCCEEDED
    commit(sql_committer(tmp_path), plan, result, -1, 0)

    columns, rows = _table_rows(tmp_path)
    assert (columns["opens"], columns["closes"]) == ("time", "time")
    assert [(r["opens"], r["closes"]) for r in rows] == [(opens, closes)]
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    (task,) = table.scan().plan_files()
    opens_id = table.schema().find_field("opens").field_id
    assert task.file.lower_bounds[opens_id] == struct.pack("<q", 34_215_250_000)  # µs since midnight
    duckdb = pytest.importorskip("duckdb")  # an independent reader of the committed file
    assert duckdb.sql(
        f"SELECT typeof(opens), CAST(closes AS VARCHAR) FROM read_parquet('{task.file.file_path}')"
    ).fetchall() == [("TIME", "23:59:59.999999")]


@pytest.mark.parametrize(
    ("choice", "column_type", "landed"),
    [
        (TimeColumns.LONG_MICROS, "long", (34_215_250_000, 86_399_999_999)),
        (TimeColumns.STRING, "string", ("09:30:15.250000", "23:59:59.999999")),
    ],
)
def test_types_time_lands_avro_times_of_day_as_the_chosen_type_spark_reads(
    tmp_path: Path,
    schema_registry: StandInRegistry,
    choice: TimeColumns,
    column_type: str,
    landed: tuple[Any, Any],
) -> None:
    opens, closes = datetime.time(9, 30, 15, 250_000), datetime.time(23, 59, 59, 999_999)
    values = Producer(schema_registry).values(SHIFT, [{"opens": opens, "closes": closes}])
    plan, result = avro_run(tmp_path / "r1", values, None, schema_registry, time_columns=choice)
    assert result.status is RunStatus.SUCCEEDED
    assert not result.counts.conversion_failures
    commit(sql_committer(tmp_path), plan, result, -1, 0)

    columns, rows = _table_rows(tmp_path)
    assert (columns["opens"], columns["closes"]) == (column_type, column_type)
    assert [(r["opens"], r["closes"]) for r in rows] == [landed]


PIZZA_SIZED = {
    **PIZZA_V1,
    "fields": [
        *PIZZA_V1["fields"],
        {"name": "size", "type": "string", "default": "medium"},
        {"name": "slices", "type": ["int", "null"], "default": 8},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def test_a_record_written_with_an_older_schema_lands_the_newer_schemas_declared_defaults(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    producer = Producer(schema_registry)
    old = producer.values(PIZZA_V1, [pizza(1)])
    new = producer.values(PIZZA_SIZED, [pizza(2, size="large", slices=12, note="extra")])
    plan, result = avro_run(tmp_path / "r1", [*old, *new, *old], None, schema_registry)
    assert result.status is RunStatus.SUCCEEDED
    assert not result.counts.conversion_failures
    commit(sql_committer(tmp_path), plan, result, -1, 2)

    _columns, rows = _table_rows(tmp_path)
    assert [(r["id"], r["size"], r["slices"], r["note"]) for r in rows] == [
        (1, "medium", 8, None),  # Avro's resolution: the reader's default for a field the writer lacks
        (2, "large", 12, "extra"),
        (1, "medium", 8, None),
    ]
