"""Decoded records -> table rows and dead-letter rows (no Spark; hand-built Arrow tables)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from kafscale_iceberg.dataplane.conversion import ErrorKind, RecordConverter, corrupt_segment_row
from kafscale_iceberg.dataplane.schemas import DEAD_LETTER_SCHEMA, data_schema
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, ConversionSettings, SchemaMode
from kafscale_iceberg.segments.decode import SEGMENT_RECORD_SCHEMA

COLUMNS = (
    ColumnSpec(name="id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="name", type=ColumnType.STRING),
    ColumnSpec(name="at", type=ColumnType.TIMESTAMP),
)


def records(values: list[bytes | None], *, first_offset: int = 100) -> pa.Table:
    count = len(values)
    return pa.Table.from_pydict(
        {
            "partition": [3] * count,
            "offset": list(range(first_offset, first_offset + count)),
            "timestamp_ms": [1_000 + i for i in range(count)],
            "key": [b"k" if i % 2 else None for i in range(count)],
            "value": values,
            "headers": [[{"key": "h", "value": b"<v>"}] if i == 0 else [] for i in range(count)],
        },
        schema=SEGMENT_RECORD_SCHEMA,
    )


def converter(**settings: Any) -> RecordConverter:
    return RecordConverter(
        topic="t", run_id="run-1", settings=ConversionSettings(**{"columns": COLUMNS, **settings})
    )


def test_rows_carry_the_base_fields_then_the_mapping_columns() -> None:
    converted = converter().convert(
        records([b'{"id": 1, "name": "a", "at": "1970-01-01T00:00:01Z"}', b'{"id": 2}']),
        partition=3,
        segment_key="seg",
    )
    assert converted.rows.schema == data_schema(COLUMNS)
    assert converted.rows.to_pylist() == [
        {
            "record_id": "t:3:100",
            "topic": "t",
            "partition": 3,
            "offset": 100,
            "timestamp_ms": 1000,
            "key": None,
            "value": b'{"id": 1, "name": "a", "at": "1970-01-01T00:00:01Z"}',
            "headers": '[{"key":"h","value":"\\u003cv\\u003e"}]',
            "id": 1,
            "name": "a",
            "at": dt.datetime(1970, 1, 1, 0, 0, 1),
        },
        {
            "record_id": "t:3:101",
            "topic": "t",
            "partition": 3,
            "offset": 101,
            "timestamp_ms": 1001,
            "key": b"k",
            "value": b'{"id": 2}',
            "headers": "",
            "id": 2,
            "name": None,
            "at": None,
        },
    ]
    assert converted.dead_letters.num_rows == 0
    assert converted.first_invalid is None


def test_required_fields_are_non_nullable_in_the_written_schema() -> None:
    schema = data_schema(COLUMNS)
    assert [f.name for f in schema if not f.nullable] == [
        "record_id",
        "topic",
        "partition",
        "offset",
        "timestamp_ms",
        "id",
    ]
    assert not [f for f in schema if f.metadata]


def test_without_columns_or_validation_values_are_not_parsed() -> None:
    converted = RecordConverter(topic="t", run_id="r", settings=ConversionSettings()).convert(
        records([b"not json", None]), partition=3, segment_key="seg"
    )
    assert converted.rows.num_rows == 2
    assert converted.rows.column_names[-1] == "headers"


def test_invalid_records_become_dead_letter_rows_with_the_first_named() -> None:
    values = [b'{"id": 1}', b"{oops", b'{"name": "no id"}', b'{"id": 2, "name": 5}', None, b'{"id": "1"}']
    converted = converter().convert(records(values), partition=3, segment_key="seg")

    assert converted.rows.column("offset").to_pylist() == [100, 103]
    assert converted.rows.column("name").to_pylist() == [None, None]
    dead = converted.dead_letters
    assert dead.schema == DEAD_LETTER_SCHEMA
    assert dead.column("offset").to_pylist() == [101, 102, 104, 105]
    assert dead.column("error_kind").to_pylist() == [
        "invalid_json",
        "required_column",
        "required_column",
        "required_column",
    ]
    assert dead.column("error").to_pylist()[1:] == [
        "required column 'id' (long): missing",
        "required column 'id' (long): missing",
        "required column 'id' (long): \"1\" is not a valid long",
    ]
    assert set(dead.column("run_id").to_pylist()) == {"run-1"}
    assert set(dead.column("segment_key").to_pylist()) == {"seg"}
    assert dead.column("last_offset").null_count == 4
    assert dead.column("value").to_pylist() == [values[1], values[2], values[4], values[5]]
    invalid = converted.first_invalid
    assert invalid is not None
    assert (invalid.record_id, invalid.kind) == ("t:3:101", ErrorKind.INVALID_JSON)


def test_schema_violations_are_invalid_only_when_validating() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}}
    values = [b'{"id": 1, "name": "abcd"}', b'{"id": 2, "name": "abc"}', None]
    lenient = converter(schema_mode=SchemaMode.LENIENT, json_schema=schema).convert(
        records(values), partition=3, segment_key="seg"
    )
    assert lenient.dead_letters.column("error_kind").to_pylist() == ["schema_violation", "required_column"]
    assert "$.name" in lenient.dead_letters.column("error")[0].as_py()
    off = converter().convert(records(values), partition=3, segment_key="seg")
    assert off.dead_letters.column("error_kind").to_pylist() == ["required_column"]


def test_a_json_schema_that_is_itself_invalid_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="json_schema is invalid"):
        converter(schema_mode=SchemaMode.STRICT, json_schema={"type": 12})


def test_an_empty_batch_converts_to_empty_tables() -> None:
    converted = converter().convert(records([]), partition=3, segment_key="seg")
    assert converted.rows.num_rows == converted.dead_letters.num_rows == 0
    assert converted.rows.schema == data_schema(COLUMNS)


def test_a_quarantined_segment_is_one_dead_letter_row() -> None:
    row = corrupt_segment_row(
        topic="t",
        partition=1,
        segment_key="seg",
        base_offset=10,
        last_offset=19,
        error="byte 49: bad",
        run_id="r",
    )
    assert row.schema == DEAD_LETTER_SCHEMA
    assert row.to_pylist() == [
        {
            "record_id": "t:1:10",
            "topic": "t",
            "partition": 1,
            "offset": 10,
            "timestamp_ms": None,
            "key": None,
            "value": None,
            "headers": "",
            "error_kind": "corrupt_segment",
            "error": "byte 49: bad",
            "run_id": "r",
            "segment_key": "seg",
            "last_offset": 19,
        }
    ]


PIZZA = (
    b'{"order_id": "af69865f-61a7-4e39-824e-cbdcf4a0c45e", "store_id": 42, "sauce": "extra", '
    b'"cheese": "three cheese", "meats": "ham", "veggies": "onions & pineapple", '
    b'"date_ordered": "2024-01-04 12:28:13"}'
)


@pytest.mark.parametrize("validating", [False, True], ids=["scanner", "parsed"])
def test_the_seed_articles_pizza_event_fills_its_timestamp_column(validating: bool) -> None:
    columns = (
        ColumnSpec(name="store_id", type=ColumnType.INT),
        ColumnSpec(name="date_ordered", type=ColumnType.TIMESTAMP),
    )
    settings: dict[str, Any] = {"columns": columns}
    if validating:
        settings.update(schema_mode=SchemaMode.LENIENT, json_schema={"type": "object"})
    converted = converter(**settings).convert(records([PIZZA]), partition=3, segment_key="seg")
    assert converted.rows.select(["store_id", "date_ordered"]).to_pylist() == [
        {"store_id": 42, "date_ordered": dt.datetime(2024, 1, 4, 12, 28, 13)}
    ]
    assert converted.conversion_failures == {}


@pytest.mark.parametrize("validating", [False, True], ids=["scanner", "parsed"])
def test_present_values_that_do_not_convert_are_counted_per_column_and_the_record_kept(
    validating: bool,
) -> None:
    settings: dict[str, Any] = {}
    if validating:
        settings.update(schema_mode=SchemaMode.LENIENT, json_schema={"type": "object"})
    converted = converter(**settings).convert(
        records(
            [
                b'{"id": 1, "at": "next tuesday"}',  # a failure of `at`
                b'{"id": 2, "at": null, "name": 7}',  # null is not a failure; 7 is one of `name`
                b'{"id": 3}',  # missing is not a failure
                b'{"id": 4, "at": "2024-01-04 12:28:13", "name": "x"}',
                b'{"id": "5", "at": "soon"}',  # dead-lettered (required id): not counted as kept
                b'{"id": 6, "at": [1]}',
            ]
        ),
        partition=3,
        segment_key="seg",
    )
    assert converted.conversion_failures == {"at": 2, "name": 1}
    assert converted.rows.column("id").to_pylist() == [1, 2, 3, 4, 6]
    assert converted.rows.column("at").to_pylist() == [
        None,
        None,
        None,
        dt.datetime(2024, 1, 4, 12, 28, 13),
        None,
    ]
    assert converted.rows.column("value")[0].as_py() == b'{"id": 1, "at": "next tuesday"}'
    assert converted.first_invalid is not None
    assert converted.first_invalid.kind is ErrorKind.REQUIRED_COLUMN
    assert converted.first_invalid.column == "id"


def test_in_strict_mode_a_conversion_failure_is_invalid_naming_record_and_column() -> None:
    converted = converter(schema_mode=SchemaMode.STRICT, json_schema={"type": "object"}).convert(
        records([b'{"id": 1, "at": "2024-01-04T12:28:13Z"}', b'{"id": 2, "at": "2024-13-01 00:00:00"}']),
        partition=3,
        segment_key="seg",
    )
    invalid = converted.first_invalid
    assert invalid is not None
    assert (invalid.record_id, invalid.kind, invalid.column) == (
        "t:3:101",
        ErrorKind.CONVERSION_FAILURE,
        "at",
    )
    assert invalid.error == (
        "column 'at' (timestamp): \"2024-13-01 00:00:00\" is not a valid timestamp "
        "(a date-time or epoch milliseconds, 0001-01-01T00:00:00 to 9999-12-31T23:59:59.999999 UTC)"
    )
