"""Avro schemas -> columns (`domain/avro_schemas.py`) and columns evolving with new schema versions
(`domain/schema_evolution.py`): every row of the documented type mapping, and the evolution rules."""

from __future__ import annotations

from typing import Any

import fastavro
import pytest

from kafscale_iceberg.domain.avro_schemas import avro_columns, with_references
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema_evolution import evolved_columns, widened_parts
from kafscale_iceberg.exceptions import RecordSchemaError


def _record(*fields: dict[str, Any], name: str = "Pizza") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


def _type_of(avro: object) -> str:
    (column,) = avro_columns(_record({"name": "f", "type": avro}), schema_name="id 1")
    return column.type_name


@pytest.mark.parametrize(
    ("avro", "column"),
    [
        ("boolean", "boolean"),
        ("int", "int"),
        ("long", "long"),
        ("float", "float"),
        ("double", "double"),
        ("string", "string"),
        ("bytes", "binary"),
        ({"type": "fixed", "name": "Hash", "size": 16}, "binary"),
        ({"type": "enum", "name": "Size", "symbols": ["S", "M"]}, "string"),
        (_record({"name": "x", "type": "int"}, name="Inner"), "struct<x: int>"),
        ({"type": "array", "items": "string"}, "list<string>"),
        ({"type": "map", "values": "long"}, "map<string, long>"),
        (["null", "string"], "string"),
        (["string", "null"], "string"),
        (["int", "string"], "struct<int: int, string: string>"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, "decimal(10,2)"),
        (
            {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4},
            "decimal(18,4)",
        ),
        ({"type": "string", "logicalType": "uuid"}, "uuid"),
        ({"type": "int", "logicalType": "date"}, "date"),
        ({"type": "int", "logicalType": "time-millis"}, "time"),
        ({"type": "long", "logicalType": "time-micros"}, "time"),
        ({"type": "long", "logicalType": "timestamp-millis"}, "timestamptz"),
        ({"type": "long", "logicalType": "timestamp-micros"}, "timestamptz"),
        ({"type": "long", "logicalType": "local-timestamp-millis"}, "timestamp"),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp"),
    ],
)
def test_each_avro_type_maps_to_its_documented_column(avro: object, column: str) -> None:
    assert _type_of(avro) == column


def test_every_column_is_optional_and_in_the_schemas_field_order() -> None:
    columns = avro_columns(
        _record({"name": "b", "type": "int"}, {"name": "a", "type": "string"}), schema_name="x"
    )
    assert [(c.name, c.required) for c in columns] == [("b", False), ("a", False)]


def test_base_field_names_and_case_twins_never_become_columns() -> None:
    schema = _record(
        {"name": "offset", "type": "long"}, {"name": "tip", "type": "int"}, {"name": "Tip", "type": "int"}
    )
    assert [c.name for c in avro_columns(schema, schema_name="x")] == ["tip"]


def test_a_named_type_used_again_is_read_from_its_first_definition() -> None:
    point = _record({"name": "x", "type": "int"}, name="Point")
    schema = _record({"name": "a", "type": point}, {"name": "b", "type": "Point"})
    assert [c.type_name for c in avro_columns(schema, schema_name="x")] == ["struct<x: int>"] * 2


def test_a_referenced_type_of_the_null_namespace_keeps_its_name_inside_a_namespaced_record() -> None:
    point = _record({"name": "x", "type": "int"}, name="Point")  # no namespace
    order = {**_record({"name": "at", "type": "Point"}), "namespace": "shop"}
    inlined = with_references(order, [point])
    assert inlined["fields"][0]["type"] == {**point, "namespace": ""}  # type: ignore[index]
    assert fastavro.parse_schema(inlined)["fields"][0]["type"]["name"] == "Point"  # not shop.Point
    assert [c.type_name for c in avro_columns(inlined, schema_name="x")] == ["struct<x: int>"]


def test_a_recursive_schema_is_refused_naming_the_schema_and_the_field() -> None:
    node = _record({"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}, name="Node")
    with pytest.raises(
        RecordSchemaError, match=r"schema id 7: field list\.next uses the record 'Node' inside itself"
    ):
        avro_columns(_record({"name": "list", "type": node}), schema_name="schema id 7")


def test_a_decimal_wider_than_38_digits_is_refused() -> None:
    with pytest.raises(RecordSchemaError, match=r"decimal\(40,2\)"):
        _type_of({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2})


def test_a_top_level_schema_that_is_not_a_record_gives_no_columns() -> None:
    assert avro_columns("string", schema_name="x") == ()


def _col(name: str, kind: ColumnType, **parts: Any) -> ColumnSpec:
    return ColumnSpec(name=name, type=kind, **parts)


def test_a_new_schema_version_adds_its_new_fields_as_optional_columns_after_the_others() -> None:
    v1 = (_col("id", ColumnType.INT), _col("name", ColumnType.STRING))
    v2 = (
        _col("id", ColumnType.INT),
        _col("size", ColumnType.STRING, required=True),
        _col("name", ColumnType.STRING),
    )
    assert [(c.name, c.required) for c in evolved_columns((), [v1, v2])] == [
        ("id", False),
        ("name", False),
        ("size", False),
    ]


def test_int_widens_to_long_float_to_double_and_decimal_precision_grows() -> None:
    v1 = (
        _col("n", ColumnType.INT),
        _col("x", ColumnType.FLOAT),
        _col("d", ColumnType.DECIMAL, precision=10, scale=2),
    )
    v2 = (
        _col("n", ColumnType.LONG),
        _col("x", ColumnType.DOUBLE),
        _col("d", ColumnType.DECIMAL, precision=20, scale=2),
    )
    assert [c.type_name for c in evolved_columns(v1, [v2])] == ["long", "double", "decimal(20,2)"]


def test_a_type_change_iceberg_cannot_make_keeps_the_columns_type() -> None:
    v1 = (_col("n", ColumnType.STRING), _col("d", ColumnType.DECIMAL, precision=10, scale=2))
    v2 = (_col("n", ColumnType.LONG), _col("d", ColumnType.DECIMAL, precision=12, scale=3))
    assert [c.type_name for c in evolved_columns(v1, [v2])] == ["string", "decimal(10,2)"]


def test_a_field_a_newer_version_drops_stays_a_column() -> None:
    v1 = (_col("id", ColumnType.LONG), _col("legacy", ColumnType.STRING))
    v2 = (_col("id", ColumnType.LONG),)
    assert [c.name for c in evolved_columns(v1, [v2])] == ["id", "legacy"]


def test_struct_fields_evolve_inside_their_column() -> None:
    v1 = (_col("s", ColumnType.STRUCT, fields=(_col("a", ColumnType.INT),)),)
    v2 = (_col("s", ColumnType.STRUCT, fields=(_col("a", ColumnType.LONG), _col("b", ColumnType.STRING))),)
    (evolved,) = evolved_columns(v1, [v2])
    assert evolved.type_name == "struct<a: long, b: string>"
    assert [(p, c.type_name) for p, c in widened_parts(v1[0], evolved)] == [(("s", "a"), "long")]


def test_a_fields_scalar_default_is_carried_by_its_column_and_the_newest_schemas_wins() -> None:
    def schema(*fields: dict[str, Any]) -> dict[str, Any]:
        return {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}, *fields]}

    older = avro_columns(schema({"name": "size", "type": "string", "default": "small"}), schema_name="id 1")
    newer = avro_columns(
        schema(
            {"name": "size", "type": "string", "default": "medium"},
            {"name": "slices", "type": ["int", "null"], "default": 8},
            {"name": "flag", "type": "int", "default": True},  # not an int: not carried
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
        ),
        schema_name="id 2",
    )
    assert [(c.name, c.default) for c in newer] == [
        ("id", None),
        ("size", "medium"),
        ("slices", 8),
        ("flag", None),
        ("at", None),
    ]
    evolved = evolved_columns((ColumnSpec(name="size", type=ColumnType.STRING),), [older, newer])
    assert {c.name: c.default for c in evolved}["size"] == "medium"
    assert "default" not in ColumnSpec(name="id", type=ColumnType.LONG).model_dump_json()
