"""Protobuf has no time-of-day type: what a `google.type.TimeOfDay` field (googleapis' common type, not a
well-known type of the runtime) lands as, in the two ways a registry can hold its schema.

Records are genuine wire bytes from confluent-kafka's `ProtobufSerializer` (its in-process `mock://`
registry) with the message compiled from googleapis' own `google/type/timeofday.proto` (shipped by
`googleapis-common-protos`); schemas are served by the stand-in Confluent registry
(`tests/support/schema_registry.py`; no registry server installs here).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import google.type
import pyarrow as pa
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.protobuf import ProtobufDecoder
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RegistrySettings
from tests.support.protobuf_messages import compile_proto, message
from tests.support.schema_registry import StandInRegistry

TIME_OF_DAY = "google/type/timeofday.proto"
TIME_OF_DAY_TEXT = (Path(next(iter(google.type.__path__))) / "timeofday.proto").read_text()
SHIFT_PROTO = """
syntax = "proto3";
package shop;
import "google/type/timeofday.proto";
message Shift { string cook = 1; google.type.TimeOfDay starts = 2; }
"""
Shift = message(compile_proto({"shift.proto": SHIFT_PROTO, TIME_OF_DAY: TIME_OF_DAY_TEXT}), "shop.Shift")
STARTS = ColumnSpec(
    name="starts",
    type=ColumnType.STRUCT,
    fields=tuple(
        ColumnSpec(name=n, type=ColumnType.INT, number=number)
        for number, n in enumerate(("hours", "minutes", "seconds", "nanos"), start=1)
    ),
    number=2,  # the field's number in `Shift`, which a rename keeps
)


def _produce(registry: StandInRegistry) -> tuple[list[bytes], Any]:
    client = SchemaRegistryClient.new_client({"url": f"mock://time-of-day-{uuid.uuid4().hex}"})
    serializer = ProtobufSerializer(Shift, client, {"use.deprecated.format": False})
    shift = Shift(cook="ada")
    shift.starts.hours, shift.starts.minutes, shift.starts.seconds = 6, 30, 15
    values = [serializer(shift, SerializationContext("shifts", MessageField.VALUE))]
    registry.register_from(client, "shifts-value")
    return values, client


def _decoder(registry: StandInRegistry) -> ProtobufDecoder:
    return ProtobufDecoder(SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=registry.url))))


def test_as_confluents_serializer_registers_it_a_time_of_day_is_undecodable_naming_the_import(
    schema_registry: StandInRegistry,
) -> None:
    values, _ = _produce(schema_registry)
    assert schema_registry.schemas[1]["references"] == []  # google/type/* is built in to Confluent's registry
    decoded = _decoder(schema_registry).decode(pa.array(values, pa.binary()))
    kind, reason = decoded.errors[0]
    assert kind == "undecodable"
    assert "schema id 1" in reason
    assert f"imports {TIME_OF_DAY!r}" in reason
    assert "list it in the schema's references" in reason


def test_with_its_file_as_a_reference_a_time_of_day_lands_as_its_struct(
    schema_registry: StandInRegistry,
) -> None:
    values, client = _produce(schema_registry)
    schema_registry.register("google-type-timeofday", TIME_OF_DAY_TEXT, schema_type="PROTOBUF")
    registered = client.get_latest_version("shifts-value").schema
    schema_registry.register(
        "shifts-value",
        registered.schema_str,
        schema_type="PROTOBUF",
        schema_id=1,
        references=[{"name": TIME_OF_DAY, "subject": "google-type-timeofday", "version": 1}],
    )
    decoded = _decoder(schema_registry).decode(pa.array(values, pa.binary()))
    assert decoded.errors == {}
    assert decoded.groups[0].columns[1] == STARTS.model_copy(update={"required": False})
    assert conform(decoded, [STARTS]).arrays[0].to_pylist() == [
        {"hours": 6, "minutes": 30, "seconds": 15, "nanos": 0}
    ]
