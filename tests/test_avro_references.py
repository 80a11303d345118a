"""Avro schemas with `references` (named types other subjects define, Confluent's Avro references):
the decoder reads each referenced subject version through the task's schema cache and lands the
records as if the schema were self-contained.

Records are genuine wire bytes from confluent-kafka's `AvroSerializer` (its in-process `mock://`
registry resolves the references as a producer's would); the schemas, with their references, are
served over HTTP by `tests/support/schema_registry.py`, a stand-in for a Confluent registry (none
installs here).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.dataplane.formats.avro import AvroDecoder
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.runs import ColumnType, RegistrySettings
from tests.support.schema_registry import StandInRegistry

GEO = {"type": "enum", "name": "Zone", "namespace": "geo", "symbols": ["NORTH", "SOUTH"]}
ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "shop",
    "fields": [{"name": "street", "type": "string"}, {"name": "zone", "type": "geo.Zone"}],
}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "to", "type": "Address"},  # a short name, in the enclosing namespace
        {"name": "billing", "type": ["null", "shop.Address"], "default": None},  # used again
    ],
}


def _produce(registry: StandInRegistry, records: list[dict[str, Any]]) -> list[bytes]:
    client = SchemaRegistryClient.new_client({"url": "mock://avro-references"})
    client.register_schema("geo-zone", Schema(json.dumps(GEO), "AVRO"))
    client.register_schema(
        "shop-address",
        Schema(json.dumps(ADDRESS), "AVRO", references=[SchemaReference("geo.Zone", "geo-zone", 1)]),
    )
    client.register_schema(
        "orders-value",
        Schema(json.dumps(ORDER), "AVRO", references=[SchemaReference("shop.Address", "shop-address", 1)]),
    )
    serializer = AvroSerializer(client, conf={"auto.register.schemas": False, "use.latest.version": True})
    context = SerializationContext("orders", MessageField.VALUE)
    values = [serializer(r, context) for r in records]
    for subject in ("geo-zone", "shop-address", "orders-value"):
        registry.register_from(client, subject)
    return values


def _decoder(registry: StandInRegistry) -> AvroDecoder:
    return AvroDecoder(SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=registry.url))))


def test_a_schema_referencing_other_subjects_types_lands_them_as_struct_columns(
    schema_registry: StandInRegistry,
) -> None:
    values = _produce(
        schema_registry,
        [
            {"id": 1, "to": {"street": "Main", "zone": "NORTH"}, "billing": None},
            {
                "id": 2,
                "to": {"street": "Elm", "zone": "SOUTH"},
                "billing": {"street": "Oak", "zone": "NORTH"},
            },
        ],
    )
    decoded = _decoder(schema_registry).decode(pa.array(values, pa.binary()))
    assert decoded.errors == {}
    (group,) = decoded.groups
    columns = list(group.columns)
    assert [(c.name, c.type) for c in columns] == [
        ("id", ColumnType.LONG),
        ("to", ColumnType.STRUCT),
        ("billing", ColumnType.STRUCT),
    ]
    assert [(f.name, f.type) for f in columns[2].fields] == [
        ("street", ColumnType.STRING),
        ("zone", ColumnType.STRING),
    ]
    rows = pa.Table.from_arrays(conform(decoded, columns).arrays, names=[c.name for c in columns]).to_pylist()
    assert rows == [
        {"id": 1, "to": {"street": "Main", "zone": "NORTH"}, "billing": None},
        {"id": 2, "to": {"street": "Elm", "zone": "SOUTH"}, "billing": {"street": "Oak", "zone": "NORTH"}},
    ]
    # Each referenced subject version is asked for once (the task's schema cache).
    assert sorted(schema_registry.requests) == [
        "/schemas/ids/3",
        "/subjects/geo-zone/versions/1",
        "/subjects/shop-address/versions/1",
    ]


def test_a_reference_the_registry_does_not_have_makes_unknown_schema_dead_letters_naming_it(
    schema_registry: StandInRegistry,
) -> None:
    values = _produce(
        schema_registry, [{"id": 1, "to": {"street": "Main", "zone": "NORTH"}, "billing": None}]
    )
    del schema_registry.subjects["shop-address"]
    decoded = _decoder(schema_registry).decode(pa.array(values, pa.binary()))
    assert decoded.groups == ()
    ((kind, reason),) = decoded.errors.values()
    assert kind == "unknown_schema"
    assert "schema id 3" in reason
    assert "shop-address" in reason
