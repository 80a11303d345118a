"""`types.time`: the column a record schema's time of day becomes (`domain/schema_evolution.with_time_as`),
read from the config; the landing itself is `tests/test_avro_runs.py`'s."""

from __future__ import annotations

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, TimeColumns
from kafscale_iceberg.domain.schema_evolution import with_time_as
from tests.test_config import load, minimal, problems_of

OPENS = ColumnSpec(name="opens", type=ColumnType.TIME)
SHIFT = ColumnSpec(
    name="shift",
    type=ColumnType.STRUCT,
    fields=(OPENS, ColumnSpec(name="note", type=ColumnType.STRING)),
)
BREAKS = ColumnSpec(
    name="breaks", type=ColumnType.LIST, element=ColumnSpec(name="element", type=ColumnType.TIME)
)


def _types(columns: tuple[ColumnSpec, ...]) -> list[object]:
    def kinds(column: ColumnSpec) -> object:
        if column.fields:
            return {f.name: kinds(f) for f in column.fields}
        if column.element is not None:
            return [kinds(column.element)]
        return column.type.value

    return [kinds(c) for c in columns]


def test_every_time_of_day_nested_ones_included_becomes_the_chosen_type() -> None:
    given = (OPENS, SHIFT, BREAKS)
    assert _types(with_time_as(given, TimeColumns.LONG_MICROS)) == [
        "long",
        {"opens": "long", "note": "string"},
        ["long"],
    ]
    assert _types(with_time_as(given, TimeColumns.STRING))[0] == "string"
    assert with_time_as(given, TimeColumns.TIME) == given


def test_a_column_the_table_already_holds_as_time_stays_time() -> None:
    current = (OPENS, ColumnSpec(name="shift", type=ColumnType.STRUCT, fields=(OPENS,)))
    assert _types(with_time_as((OPENS, SHIFT, BREAKS), TimeColumns.LONG_MICROS, current)) == [
        "time",
        {"opens": "time", "note": "string"},
        ["long"],
    ]


def test_types_time_is_read_from_the_config_and_defaults_to_time() -> None:
    assert load(minimal()).types.time is TimeColumns.TIME
    assert load({**minimal(), "types": {"time": "LONG_MICROS"}}).types.time is TimeColumns.LONG_MICROS
    problem = problems_of({**minimal(), "types": {"time": "nanos"}})["types.time"]
    assert "long_micros" in problem
