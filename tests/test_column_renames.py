"""Issue 34: a field renamed in the producer's schema renames its column, keeping the column's field id
and rows: the decisions (`domain/schema_evolution.py`, `domain/renames.py`, `domain/column_sources.py`),
then whole Avro and Protobuf runs committed to a real SQLite catalog and read back by pyiceberg and by
DuckDB projecting each file's columns by field id, as an Iceberg reader does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import field_ids_by_path, table_columns
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.avro_schemas import avro_columns
from kafscale_iceberg.domain.column_sources import sources_property, with_sources
from kafscale_iceberg.domain.field_ids import TableFieldIds, planned_field_ids
from kafscale_iceberg.domain.protobuf_schemas import protobuf_columns
from kafscale_iceberg.domain.renames import Rename, column_renames, renamed_paths
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RunStatus
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.domain.schema_evolution import evolved_columns
from kafscale_iceberg.exceptions import ColumnRenameError
from tests.support.iceberg_runs import sql_committer, sql_settings
from tests.support.protobuf_messages import compile_proto, message
from tests.support.schema_registry import StandInRegistry
from tests.test_avro_runs import avro_run
from tests.test_protobuf_values import Producer as ProtobufProducer
from tests.test_record_decoders import PIZZA_V1, Producer, pizza
from tests.test_schema_inference import TABLE, commit

LONG = ColumnType.LONG
STRING = ColumnType.STRING


def _col(name: str, kind: ColumnType = STRING, **more: Any) -> ColumnSpec:
    return ColumnSpec(name=name, type=kind, **more)


def _struct(name: str, *fields: ColumnSpec, **more: Any) -> ColumnSpec:
    return ColumnSpec(name=name, type=ColumnType.STRUCT, fields=fields, **more)


# -- the decisions --------------------------------------------------------------------------------


def test_an_avro_alias_renames_the_column_in_place_and_keeps_its_old_name() -> None:
    current = (_col("id", LONG), _col("sauce"), _col("price"))
    renamed = (_col("id", LONG), _col("topping_sauce", aliases=("sauce",)), _col("price"))
    assert evolved_columns(current, [renamed]) == (
        _col("id", LONG),
        _col("topping_sauce", aliases=("sauce",)),
        _col("price"),
    )


def test_records_still_written_with_the_old_name_land_in_the_renamed_column() -> None:
    current = (_col("id", LONG), _col("topping_sauce", aliases=("sauce",)))
    old_version = (_col("id", LONG), _col("sauce"))
    assert evolved_columns(current, [old_version]) == current
    # one run holding both versions, older first: one column, renamed
    both = evolved_columns((_col("id", LONG), _col("sauce")), [old_version, current])
    assert [c.name for c in both] == ["id", "topping_sauce"]


def test_a_protobuf_field_renamed_under_its_number_renames_the_column() -> None:
    current = (_col("id", LONG, number=1), _col("sauce", number=2))
    renamed = (_col("id", LONG, number=1), _col("topping_sauce", number=2))
    assert evolved_columns(current, [renamed]) == (
        _col("id", LONG, number=1),
        _col("topping_sauce", number=2, aliases=("sauce",)),
    )
    # a new field under a new number is a new column; the old one stays, null from then on
    added = (_col("id", LONG, number=1), _col("crust", number=3))
    assert [c.name for c in evolved_columns(current, [added])] == ["id", "sauce", "crust"]


def test_a_field_keeping_the_old_name_beside_the_alias_is_not_a_rename() -> None:
    current = (_col("sauce"),)
    both = (_col("sauce"), _col("topping_sauce", aliases=("sauce",)))
    assert [c.name for c in evolved_columns(current, [both])] == ["sauce", "topping_sauce"]


def test_a_rename_onto_another_columns_name_is_refused_naming_both() -> None:
    current = (_col("sauce"), _col("Topping_Sauce"))
    with pytest.raises(ColumnRenameError) as raised:
        evolved_columns(current, [(_col("topping_sauce", aliases=("sauce",)),)])
    message = str(raised.value)
    assert "'sauce'" in message
    assert "'topping_sauce'" in message
    assert "'Topping_Sauce'" in message


def test_a_column_the_mapping_names_is_never_renamed() -> None:
    # partitioned by `sauce` (or keyed by it): the renaming field becomes a column of its own
    current = (_col("id", LONG), _col("sauce"))
    renamed = (_col("id", LONG), _col("topping_sauce", aliases=("sauce",)))
    columns = evolved_columns(current, [renamed], pinned={"sauce"})
    assert [c.name for c in columns] == ["id", "sauce", "topping_sauce"]


def test_a_struct_field_renames_inside_its_column() -> None:
    current = (_struct("customer", _col("name"), _col("city")),)
    renamed = (_struct("customer", _col("full_name", aliases=("name",)), _col("city")),)
    (column,) = evolved_columns(current, [renamed])
    assert [(f.name, f.aliases) for f in column.fields] == [("full_name", ("name",)), ("city", ())]


def test_renamed_paths_keep_their_field_ids_at_any_depth() -> None:
    known = TableFieldIds(
        identifier=TABLE,
        field_ids={
            **{f.name: f.field_id or 0 for f in table_fields(()) if f.field_id},
            "customer": 9,
            "customer.name": 10,
            "customer.city": 11,
        },
        last_column_id=11,
    )
    columns = (
        _struct(
            "buyer",
            _col("full_name", aliases=("name",)),
            _col("city"),
            _col("zip"),
            aliases=("customer",),
        ),
    )
    renames = column_renames(columns, known.field_ids)
    assert renames == (Rename(("customer",), "buyer"), Rename(("customer", "name"), "full_name"))
    assert renamed_paths({"customer.name": 10, "customer": 9}, renames) == {"buyer.full_name": 10, "buyer": 9}
    ids = planned_field_ids(table_fields(columns), known, new_parts=True)
    assert ids is not None
    assert (ids["buyer"], ids["buyer.full_name"], ids["buyer.city"], ids["buyer.zip"]) == (9, 10, 11, 12)


def test_column_sources_round_trip_by_field_id() -> None:
    columns = (_col("id", LONG, number=1), _struct("buyer", _col("full_name", aliases=("name",), number=2)))
    ids = {"id": 9, "buyer": 10, "buyer.full_name": 11}
    value = sources_property(columns, ids)
    assert value is not None
    plain = (_col("id", LONG), _struct("buyer", _col("full_name")))
    assert with_sources(plain, ids, value) == columns
    assert with_sources(plain, ids, "not json") == plain
    assert sources_property(plain, ids) is None


def test_record_schemas_carry_avro_aliases_and_protobuf_numbers() -> None:
    avro = {
        "type": "record",
        "name": "Pizza",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "topping_sauce", "type": "string", "aliases": ["sauce", 7, "topping_sauce"]},
        ],
    }
    assert avro_columns(avro, schema_name="id 2")[1] == _col("topping_sauce", aliases=("sauce",))
    assert [(c.name, c.number) for c in protobuf_columns(ORDER_V1.DESCRIPTOR, schema_name="id 3")] == [
        ("id", 1),
        ("sauce", 2),
        ("at", 3),
    ]


# -- whole runs ----------------------------------------------------------------------------------

ORDER_V1 = message(
    compile_proto(
        {
            "order.proto": 'syntax = "proto3"; package shop; import "google/protobuf/timestamp.proto";\n'
            "message Order { int32 id = 1; string sauce = 2; google.protobuf.Timestamp at = 3; }"
        }
    ),
    "shop.Order",
)
ORDER_RENAMED = message(
    compile_proto(
        {
            "order.proto": 'syntax = "proto3"; package shop; import "google/protobuf/timestamp.proto";\n'
            "message Order { int32 id = 1; string topping_sauce = 2; google.protobuf.Timestamp at = 3; }"
        }
    ),
    "shop.Order",
)

PIZZA_RENAMED = {
    **PIZZA_V1,
    "fields": [
        PIZZA_V1["fields"][0],
        {"name": "topping_sauce", "type": "string", "aliases": ["sauce"]},
        *PIZZA_V1["fields"][2:],
    ],
}


def _rows_by_field_id(table: Any, names: list[str]) -> list[tuple[Any, ...]]:
    """`names` of every row as an Iceberg reader reads them with DuckDB: each data file's columns
    found by their Parquet field ids (the name they were written under may be an older one)."""
    import duckdb

    ids = field_ids_by_path(table.schema())
    selects = []
    for task in table.scan().plan_files():
        path = task.file.file_path.removeprefix("file://")
        by_id = {
            int(field.metadata[b"PARQUET:field_id"]): field.name
            for field in pq.read_schema(path)
            if field.metadata and b"PARQUET:field_id" in field.metadata
        }
        columns = ", ".join(
            f'"{by_id[ids[name]]}" AS "{name}"' if ids[name] in by_id else f'NULL AS "{name}"'
            for name in names
        )
        selects.append(f"SELECT {columns} FROM read_parquet('{path}')")
    return sorted(duckdb.sql(" UNION ALL ".join(selects)).fetchall())


def _renamed_avro_table(tmp_path: Path, schema_registry: StandInRegistry) -> tuple[Any, int | None]:
    """Three Avro runs: `sauce` written, renamed `topping_sauce` (aliases), written by an old producer
    again; the table and `sauce`'s field id before the rename."""
    producer = Producer(schema_registry)
    plan, result = avro_run(
        tmp_path / "r1", producer.values(PIZZA_V1, [pizza(1, sauce="red")]), None, schema_registry
    )
    assert result.status is RunStatus.SUCCEEDED
    commit(sql_committer(tmp_path), plan, result, -1, 0)
    before = (
        load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).schema().find_field("sauce").field_id
    )

    renamed = producer.values(PIZZA_RENAMED, [{**pizza(2), "topping_sauce": "white"}])
    plan, result = avro_run(
        tmp_path / "r2", renamed, sql_committer(tmp_path), schema_registry, first_offset=1
    )
    assert result.status is RunStatus.SUCCEEDED
    commit(sql_committer(tmp_path), plan, result, 0, 1)

    # an old producer, still writing `sauce`: its records land in the renamed column
    old = producer.values(PIZZA_V1, [pizza(3, sauce="pesto")])
    plan, result = avro_run(tmp_path / "r3", old, sql_committer(tmp_path), schema_registry, first_offset=2)
    assert result.status is RunStatus.SUCCEEDED
    commit(sql_committer(tmp_path), plan, result, 1, 2)
    return load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE), before


def test_an_avro_rename_keeps_the_column_and_its_rows_and_old_producers_still_land(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    table, before = _renamed_avro_table(tmp_path, schema_registry)
    schema = table.schema()
    assert schema.find_field("topping_sauce").field_id == before
    assert "sauce" not in [f.name for f in schema.fields]
    assert [c.name for c in table_columns(schema, table.properties)][:3] == ["id", "topping_sauce", "price"]
    assert table_columns(schema, table.properties)[1].aliases == ("sauce",)
    rows = sorted((r["id"], r["topping_sauce"]) for r in table.scan().to_arrow().to_pylist())
    assert rows == [(1, "red"), (2, "white"), (3, "pesto")]
    assert _rows_by_field_id(table, ["id", "topping_sauce"]) == rows


def test_a_rename_onto_an_existing_column_fails_the_run_and_commits_nothing(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    producer = Producer(schema_registry)
    plan, result = avro_run(tmp_path / "r1", producer.values(PIZZA_V1, [pizza(1)]), None, schema_registry)
    commit(sql_committer(tmp_path), plan, result, -1, 0)
    # `sauce` renamed to `price`, a name the table already has (the old `price` was dropped)
    fields = [f for f in PIZZA_V1["fields"] if f["name"] not in ("sauce", "price")]
    clashing = {**PIZZA_V1, "fields": [*fields, {"name": "price", "type": "string", "aliases": ["sauce"]}]}
    record = {k: v for k, v in pizza(2).items() if k != "sauce"} | {"price": "x"}
    with pytest.raises(
        ColumnRenameError, match=r"renames column 'sauce' to 'price'.*already has a column 'price'"
    ):
        avro_run(
            tmp_path / "r2",
            producer.values(clashing, [record]),
            sql_committer(tmp_path),
            schema_registry,
            first_offset=1,
        )
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert len(table.metadata.snapshots) == 1


def test_a_protobuf_field_renamed_under_its_number_keeps_its_column_and_rows(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    producer = ProtobufProducer(schema_registry)
    runs = [
        (ORDER_V1, ORDER_V1(id=1, sauce="red")),  # type: ignore[operator]
        (ORDER_RENAMED, ORDER_RENAMED(id=2, topping_sauce="white")),  # type: ignore[operator]
        (ORDER_V1, ORDER_V1(id=3, sauce="pesto")),  # type: ignore[operator]  # an old producer
    ]
    for offset, (kind, record) in enumerate(runs):
        tables = sql_committer(tmp_path) if offset else None
        plan, result = avro_run(
            tmp_path / f"r{offset}",
            producer.values(kind, [record]),
            tables,
            schema_registry,
            first_offset=offset,
            value_format=value_formats.PROTOBUF,
        )
        assert result.status is RunStatus.SUCCEEDED
        commit(sql_committer(tmp_path), plan, result, offset - 1, offset)
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert [f.name for f in table.schema().fields][8:] == ["id", "topping_sauce", "at"]
    rows = sorted((r["id"], r["topping_sauce"]) for r in table.scan().to_arrow().to_pylist())
    assert rows == [(1, "red"), (2, "white"), (3, "pesto")]
    assert _rows_by_field_id(table, ["id", "topping_sauce"]) == rows


@pytest.mark.slow
def test_spark_reads_old_and_new_rows_under_the_new_name_by_field_id(
    tmp_path: Path, schema_registry: StandInRegistry, spark: Any
) -> None:
    # Spark's own Parquet reader matching columns by field id (`spark.sql.parquet.fieldId.read.enabled`,
    # what Iceberg's Spark reader does; Iceberg's runtime jar does not install here)
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    table, _ = _renamed_avro_table(tmp_path, schema_registry)
    ids = field_ids_by_path(table.schema())
    wanted = StructType(
        [
            StructField("id", IntegerType(), True, {"parquet.field.id": ids["id"]}),
            StructField("topping_sauce", StringType(), True, {"parquet.field.id": ids["topping_sauce"]}),
        ]
    )
    files = [task.file.file_path for task in table.scan().plan_files()]
    spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
    try:
        rows = sorted(tuple(r) for r in spark.read.schema(wanted).parquet(*files).collect())
    finally:
        spark.conf.unset("spark.sql.parquet.fieldId.read.enabled")
    assert rows == [(1, "red"), (2, "white"), (3, "pesto")]
