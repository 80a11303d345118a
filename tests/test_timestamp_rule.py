"""One timestamp rule for every record format (`dataplane/datetimes.py`): a plain integer in a
`timestamp`/`timestamptz` column is epoch milliseconds, a field with its own unit keeps it, and only
instants from 0001-01-01 to 9999-12-31 (UTC) land; anything outside is a counted conversion failure
of its column (`lenient`) or a failed run naming the column and value (`strict`).

Records go through `RecordConverter`, what a run's tasks use, as each format's producer writes them:
confluent-kafka's Avro, Protobuf and JSON Schema serializers (their in-process `mock://` registry),
schemas served over HTTP by the stand-in Confluent registry (`tests/support/schema_registry.py`; no
registry server installs here), and Kafka Connect JSON envelopes as `JsonConverter` writes them. A
property test holds JSON's two readers (the compiled scanner, the per-record path) and the decoders'
projection (`conform_array`) to the same answer for any 64-bit integer.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.dataplane.columns import ColumnScanner, parse_columns
from kafscale_iceberg.dataplane.conversion import ConvertedRecords, ErrorKind, RecordConverter
from kafscale_iceberg.dataplane.formats.decoding import conform_array
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    RegistrySettings,
    SchemaMode,
)
from kafscale_iceberg.domain.value_formats import ValueFormatSpec
from kafscale_iceberg.segments.decode import SEGMENT_RECORD_SCHEMA
from tests.support.protobuf_messages import compile_proto, message
from tests.support.schema_registry import StandInRegistry

TOPIC = "events"
AT_MILLIS = 1_704_371_293_123
AT = datetime.datetime(2024, 1, 4, 12, 28, 13, 123_000, tzinfo=datetime.UTC)
LAST_MILLIS = 253_402_300_799_999  # 9999-12-31T23:59:59.999
FIRST_MILLIS = -62_135_596_800_000  # 0001-01-01T00:00:00
LAST_MICROS = LAST_MILLIS * 1000 + 999  # 9999-12-31T23:59:59.999999
FIRST_MICROS = FIRST_MILLIS * 1000
LAST = datetime.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=datetime.UTC)
FIRST = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)

MICROS = {"type": "long", "logicalType": "timestamp-micros"}
VISIT = ColumnSpec(
    name="visit", type=ColumnType.STRUCT, fields=(ColumnSpec(name="at", type=ColumnType.TIMESTAMPTZ),)
)

EVENT_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Event { int64 at = 1; }\n'
EventMessage = message(compile_proto({"event.proto": EVENT_PROTO}), "shop.Event")
EVENT_JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"at": {"type": "integer"}},
}


def _context() -> SerializationContext:
    return SerializationContext(TOPIC, MessageField.VALUE)


def _mock() -> Any:
    return SchemaRegistryClient.new_client({"url": f"mock://timestamps-{uuid.uuid4().hex}"})


def _avro_records(registry: StandInRegistry, field: dict[str, Any], records: list[Any]) -> list[bytes]:
    client = _mock()
    schema = {"type": "record", "name": "Event", "fields": [field]}
    serializer = AvroSerializer(client, json.dumps(schema))
    values = [serializer({field["name"]: record}, _context()) for record in records]
    registry.register_from(client, f"{TOPIC}-value")
    return values


def _avro(registry: StandInRegistry, ats: list[int], at_type: object = "long") -> list[bytes]:
    return _avro_records(registry, {"name": "at", "type": at_type}, ats)


def _avro_visits(registry: StandInRegistry, micros: list[int]) -> list[bytes]:
    visit = {"type": "record", "name": "Visit", "fields": [{"name": "at", "type": MICROS}]}
    return _avro_records(registry, {"name": "visit", "type": visit}, [{"at": at} for at in micros])


def _protobuf(registry: StandInRegistry, ats: list[int]) -> list[bytes]:
    client = _mock()
    serializer = ProtobufSerializer(EventMessage, client, {"use.deprecated.format": False})
    values = [serializer(EventMessage(at=at), _context()) for at in ats]
    registry.register_from(client, f"{TOPIC}-value")
    return values


def _json_schema(registry: StandInRegistry, ats: list[int]) -> list[bytes]:
    client = _mock()
    serializer = JSONSerializer(json.dumps(EVENT_JSON_SCHEMA), client)
    values = [serializer({"at": at}, _context()) for at in ats]
    registry.register_from(client, f"{TOPIC}-value")
    return values


def _connect(registry: StandInRegistry, ats: list[int], name: str | None = None) -> list[bytes]:
    field: dict[str, Any] = {"field": "at", "type": "int64", "optional": True}
    if name is not None:
        field = {**field, "name": name, "version": 1}
    schema = {"type": "struct", "name": "Event", "optional": False, "fields": [field]}
    return [json.dumps({"schema": schema, "payload": {"at": at}}).encode() for at in ats]


def _json(registry: StandInRegistry, ats: list[int]) -> list[bytes]:
    return [json.dumps({"at": at}).encode() for at in ats]


PRODUCERS: dict[ValueFormatSpec, Callable[[StandInRegistry, list[int]], list[bytes]]] = {
    value_formats.JSON: _json,
    value_formats.AVRO: _avro,
    value_formats.PROTOBUF: _protobuf,
    value_formats.JSON_SCHEMA: _json_schema,
    value_formats.CONNECT_JSON: _connect,
}


def _convert(
    registry: StandInRegistry,
    value_format: ValueFormatSpec,
    values: list[bytes],
    column: ColumnSpec,
    *,
    strict: bool = False,
) -> ConvertedRecords:
    settings = ConversionSettings(
        columns=(column,),
        value_format=value_format,
        schema_mode=SchemaMode.STRICT if strict else SchemaMode.OFF,
        json_schema={} if strict and value_format is value_formats.JSON else None,
    )
    schemas = SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=registry.url)))
    converter = RecordConverter(topic=TOPIC, run_id="run-1", settings=settings, schemas=schemas)
    count = len(values)
    records = pa.Table.from_pydict(
        {
            "partition": [0] * count,
            "offset": list(range(count)),
            "timestamp_ms": [0] * count,
            "key": [None] * count,
            "value": values,
            "headers": [[] for _ in range(count)],
        },
        schema=SEGMENT_RECORD_SCHEMA,
    )
    return converter.convert(records, partition=0, segment_key="segment-0")


def _landed(converted: ConvertedRecords, name: str = "at") -> list[Any]:
    assert converted.dead_letters.num_rows == 0, converted.dead_letters.column("error").to_pylist()
    return converted.rows.column(name).to_pylist()


@pytest.mark.parametrize("value_format", list(PRODUCERS), ids=lambda f: f.name)
@pytest.mark.parametrize("column_type", [ColumnType.TIMESTAMPTZ, ColumnType.TIMESTAMP])
def test_a_plain_integer_in_a_timestamp_column_is_epoch_milliseconds_in_every_format(
    schema_registry: StandInRegistry, value_format: ValueFormatSpec, column_type: ColumnType
) -> None:
    values = PRODUCERS[value_format](schema_registry, [AT_MILLIS])
    converted = _convert(schema_registry, value_format, values, ColumnSpec(name="at", type=column_type))
    expected = AT if column_type is ColumnType.TIMESTAMPTZ else AT.replace(tzinfo=None)
    assert _landed(converted) == [expected]
    assert converted.conversion_failures == {}


def test_a_field_with_its_own_unit_keeps_it(schema_registry: StandInRegistry) -> None:
    values = _avro(schema_registry, [AT_MILLIS * 1000], MICROS)
    column = ColumnSpec(name="at", type=ColumnType.TIMESTAMPTZ)
    assert _landed(_convert(schema_registry, value_formats.AVRO, values, column)) == [AT]
    connect = _connect(schema_registry, [AT_MILLIS], "org.apache.kafka.connect.data.Timestamp")
    assert _landed(_convert(schema_registry, value_formats.CONNECT_JSON, connect, column)) == [AT]


@pytest.mark.parametrize("value_format", list(PRODUCERS), ids=lambda f: f.name)
def test_epoch_milliseconds_land_from_year_1_to_9999_and_beyond_are_counted_failures(
    schema_registry: StandInRegistry, value_format: ValueFormatSpec
) -> None:
    inside = [LAST_MILLIS, FIRST_MILLIS]
    outside = [LAST_MILLIS + 1, FIRST_MILLIS - 1, AT_MILLIS * 1000]  # the last: micros sent as millis
    values = PRODUCERS[value_format](schema_registry, inside + outside)
    column = ColumnSpec(name="at", type=ColumnType.TIMESTAMPTZ)
    converted = _convert(schema_registry, value_format, values, column)
    assert _landed(converted) == [
        datetime.datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=datetime.UTC),
        FIRST,
        None,
        None,
        None,
    ]
    assert converted.conversion_failures == {"at": 3}


@pytest.mark.parametrize("value_format", list(PRODUCERS), ids=lambda f: f.name)
def test_a_timestamp_beyond_9999_fails_a_strict_run_naming_the_column_and_value(
    schema_registry: StandInRegistry, value_format: ValueFormatSpec
) -> None:
    values = PRODUCERS[value_format](schema_registry, [AT_MILLIS, LAST_MILLIS + 1])
    column = ColumnSpec(name="at", type=ColumnType.TIMESTAMPTZ)
    invalid = _convert(schema_registry, value_format, values, column, strict=True).first_invalid
    assert invalid is not None
    assert (invalid.record_id, invalid.kind, invalid.column) == (
        f"{TOPIC}:0:1",
        ErrorKind.CONVERSION_FAILURE,
        "at",
    )
    assert str(LAST_MILLIS + 1) in invalid.error
    assert "9999-12-31T23:59:59.999999" in invalid.error


def test_microsecond_fields_land_to_the_last_microsecond_of_9999_and_no_further(
    schema_registry: StandInRegistry,
) -> None:
    values = _avro(schema_registry, [LAST_MICROS, LAST_MICROS + 1, FIRST_MICROS, FIRST_MICROS - 1], MICROS)
    column = ColumnSpec(name="at", type=ColumnType.TIMESTAMPTZ)
    converted = _convert(schema_registry, value_formats.AVRO, values, column)
    assert _landed(converted) == [LAST, None, FIRST, None]
    assert converted.conversion_failures == {"at": 2}


def test_a_date_time_string_lands_to_the_last_microsecond_of_9999_and_no_further(
    schema_registry: StandInRegistry,
) -> None:
    texts = [
        "9999-12-31T23:59:59.999999Z",
        "9999-12-31T23:59:59.999999-00:01",  # a minute later in UTC
        "0001-01-01T00:00:00Z",
        "0000-12-31T23:59:59.999999Z",
        "0001-01-01T00:00:00+00:01",  # a minute earlier in UTC
    ]
    values = [json.dumps({"at": text}).encode() for text in texts]
    column = ColumnSpec(name="at", type=ColumnType.TIMESTAMPTZ)
    converted = _convert(schema_registry, value_formats.JSON, values, column)
    assert _landed(converted) == [LAST, None, FIRST, None, None]
    assert converted.conversion_failures == {"at": 3}


@pytest.mark.parametrize(
    ("value_format", "produce"),
    [
        (value_formats.JSON, _json),
        (
            value_formats.AVRO,
            lambda registry, days: _avro(registry, days, {"type": "int", "logicalType": "date"}),
        ),
        (
            value_formats.CONNECT_JSON,
            lambda registry, days: _connect(registry, days, "org.apache.kafka.connect.data.Date"),
        ),
    ],
    ids=["json", "avro", "connect_json"],
)
def test_dates_land_from_year_1_to_9999_and_beyond_are_counted_failures(
    schema_registry: StandInRegistry,
    value_format: ValueFormatSpec,
    produce: Callable[[StandInRegistry, list[int]], list[bytes]],
) -> None:
    first_day, last_day = -719_162, 2_932_896
    values = produce(schema_registry, [last_day, last_day + 1, first_day, first_day - 1])
    if value_format is value_formats.CONNECT_JSON:
        values = [v.replace(b'"type": "int64"', b'"type": "int32"') for v in values]
    column = ColumnSpec(name="at", type=ColumnType.DATE)
    converted = _convert(schema_registry, value_format, values, column)
    assert _landed(converted) == [datetime.date(9999, 12, 31), None, datetime.date(1, 1, 1), None]
    assert converted.conversion_failures == {"at": 2}


@pytest.mark.parametrize("name", [None, "org.apache.kafka.connect.data.Timestamp"], ids=["int64", "ts"])
def test_a_null_decoded_timestamp_stays_null_and_is_not_counted(
    schema_registry: StandInRegistry, name: str | None
) -> None:
    values = [v.replace(b'"at": 0', b'"at": null') for v in _connect(schema_registry, [0, AT_MILLIS], name)]
    column = ColumnSpec(name="at", type=ColumnType.TIMESTAMPTZ)
    converted = _convert(schema_registry, value_formats.CONNECT_JSON, values, column)
    assert _landed(converted) == [None, AT]
    assert converted.conversion_failures == {}


def test_a_timestamp_inside_a_struct_takes_the_same_rule_and_counts_for_its_column(
    schema_registry: StandInRegistry,
) -> None:
    avro = _avro_visits(schema_registry, [AT_MILLIS * 1000, LAST_MICROS + 1])
    as_json = [json.dumps({"visit": {"at": at}}).encode() for at in (AT_MILLIS, LAST_MILLIS + 1)]
    for value_format, values in ((value_formats.AVRO, avro), (value_formats.JSON, as_json)):
        converted = _convert(schema_registry, value_format, values, VISIT)
        assert _landed(converted, "visit") == [{"at": AT}, {"at": None}], value_format
        assert converted.conversion_failures == {"visit": 1}, value_format


def test_a_struct_holding_a_timestamp_beyond_9999_fails_a_strict_run_naming_its_column(
    schema_registry: StandInRegistry,
) -> None:
    values = _avro_visits(schema_registry, [LAST_MICROS + 1])
    invalid = _convert(schema_registry, value_formats.AVRO, values, VISIT, strict=True).first_invalid
    assert invalid is not None
    assert (invalid.kind, invalid.column) == (ErrorKind.CONVERSION_FAILURE, "visit")
    assert "schema id 1" in invalid.error


INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
NEAR_EDGES = st.one_of(
    INT64,
    st.integers(min_value=FIRST_MILLIS - 3, max_value=FIRST_MILLIS + 3),
    st.integers(min_value=LAST_MILLIS - 3, max_value=LAST_MILLIS + 3),
    st.integers(min_value=-719_165, max_value=-719_160),
    st.integers(min_value=2_932_894, max_value=2_932_899),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(NEAR_EDGES, min_size=1, max_size=8))
def test_json_numbers_and_decoded_integers_give_the_same_instants_and_dates(numbers: list[int]) -> None:
    first_day, last_day = -719_162, 2_932_896
    expected_micros = [n * 1000 if FIRST_MILLIS <= n <= LAST_MILLIS else None for n in numbers]
    expected_days = [n if first_day <= n <= last_day else None for n in numbers]
    values = pa.array([json.dumps({"at": n}).encode() for n in numbers], pa.binary())
    decoded = pa.array(numbers, pa.int64())
    for kind, expected in ((ColumnType.TIMESTAMPTZ, expected_micros), (ColumnType.DATE, expected_days)):
        column = ColumnSpec(name="at", type=kind)
        physical = pa.int32() if kind is ColumnType.DATE else pa.int64()
        results = {
            "scanned": ColumnScanner([column]).scan(values).arrays[0],
            "parsed": parse_columns(values, [column], documents=False).arrays[0],
            "decoded": conform_array(decoded, column)[0],
        }
        for path, array in results.items():
            assert array.cast(physical).to_pylist() == expected, (kind, path)
