"""`value_format: json_schema`: JSON in Confluent wire format, validated against the registry's JSON
Schema, read into the columns that schema gives (the `schema.source: registry` mapping).

Records are genuine wire bytes from confluent-kafka's `JSONSerializer` (its in-process `mock://`
registry); the schemas are served over HTTP by `tests/support/schema_registry.py`, a stand-in for a
Confluent registry (none installs here).
"""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.json_schema import JsonSchemaDecoder
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RegistrySettings
from tests.support.schema_registry import StandInRegistry

ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "string"},
        "total": {"type": "number"},
        "delivery": {
            "type": "object",
            "properties": {"at": {"type": "string", "format": "date-time"}, "floor": {"type": "integer"}},
        },
        "toppings": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id"],
}


def _values(registry: StandInRegistry, records: list[dict[str, Any]]) -> list[bytes]:
    client = SchemaRegistryClient.new_client({"url": "mock://json-schema-producer"})
    serializer = JSONSerializer(json.dumps(ORDER), client)
    encoded = [serializer(r, SerializationContext("orders", MessageField.VALUE)) for r in records]
    for version in client.get_versions("orders-value"):
        found = client.get_version("orders-value", version)
        registry.register(
            "orders-value", found.schema.schema_str, schema_type="JSON", schema_id=found.schema_id
        )
    return encoded


def _decoder(registry: StandInRegistry, columns: list[ColumnSpec] | None = None) -> JsonSchemaDecoder:
    registry_client = ConfluentSchemaRegistry(RegistrySettings(url=registry.url))
    return JsonSchemaDecoder(SchemaCache(registry_client), columns=columns or ())


def test_json_schema_records_land_in_the_columns_the_registry_mapping_gives(
    schema_registry: StandInRegistry,
) -> None:
    values = _values(
        schema_registry,
        [
            {
                "id": 1,
                "customer": "ada",
                "total": 12.5,
                "delivery": {"at": "2024-01-04T12:28:13Z", "floor": 3},
                "toppings": ["ham"],
            }
        ],
    )
    decoded = _decoder(schema_registry).decode(pa.array(values, pa.binary()))
    assert decoded.errors == {}
    columns = list(decoded.groups[0].columns)
    assert [(c.name, c.type, c.required) for c in columns] == [
        ("customer", ColumnType.STRING, False),
        ("id", ColumnType.LONG, False),
        ("total", ColumnType.DOUBLE, False),
        ("delivery", ColumnType.STRUCT, False),
        ("toppings", ColumnType.LIST, False),
    ]
    arrays = conform(decoded, columns).arrays
    row = pa.Table.from_arrays(arrays, names=[c.name for c in columns]).to_pylist()[0]
    assert row == {
        "customer": "ada",
        "id": 1,
        "total": 12.5,
        "delivery": {"at": datetime.datetime(2024, 1, 4, 12, 28, 13), "floor": 3},
        "toppings": ["ham"],
    }


def test_a_payload_that_does_not_validate_is_a_dead_letter_naming_the_schema_id_and_path(
    schema_registry: StandInRegistry,
) -> None:
    (good,) = _values(schema_registry, [{"id": 1}])
    bad = good[:5] + b'{"id": 2, "delivery": {"floor": "third"}}'
    decoded = _decoder(schema_registry).decode(
        pa.array([good, bad, good[:5] + b"{not json", b'{"id": 3}', b"\x00\x00\x00\x00\x63{}"], pa.binary())
    )
    kinds = {p: kind for p, (kind, _) in decoded.errors.items()}
    assert kinds == {1: "undecodable", 2: "undecodable", 3: "wire_format", 4: "unknown_schema"}
    assert "schema id 1" in decoded.errors[1][1]
    assert "at delivery/floor" in decoded.errors[1][1]
    assert "not JSON" in decoded.errors[2][1]
    assert decoded.groups[0].positions.tolist() == [0]


def test_columns_listed_by_the_mapping_take_the_properties_of_that_name(
    schema_registry: StandInRegistry,
) -> None:
    values = _values(schema_registry, [{"id": 2**40, "customer": "bo"}])
    decoded = _decoder(schema_registry).decode(pa.array(values, pa.binary()))
    columns = [
        ColumnSpec(name="customer", type=ColumnType.STRING),
        ColumnSpec(name="id", type=ColumnType.LONG),
    ]
    assert [a.to_pylist() for a in conform(decoded, columns).arrays] == [["bo"], [2**40]]


def test_numbers_land_exact_in_decimal_columns_and_what_a_column_cannot_hold_is_counted(
    schema_registry: StandInRegistry,
) -> None:
    (good,) = _values(schema_registry, [{"id": 1}])
    prefix = good[:5]  # the wire header of the registered ORDER schema
    payloads = [
        b'{"id": 1, "total": 12345678901234567890.123, "delivery": {"floor": 3}}',
        b'{"id": 2, "total": 0.1, "delivery": {"floor": 12345678901234567890123}}',
        b'{"id": 3, "total": 1.00000000001}',
    ]
    columns = [
        ColumnSpec(name="total", type=ColumnType.DECIMAL, precision=38, scale=10),
        ColumnSpec(
            name="delivery",
            type=ColumnType.STRUCT,
            fields=(ColumnSpec(name="floor", type=ColumnType.DECIMAL, precision=10, scale=0),),
        ),
    ]
    decoded = _decoder(schema_registry, columns).decode(pa.array([prefix + p for p in payloads], pa.binary()))
    assert decoded.errors == {}
    conformed = conform(decoded, columns)
    total, delivery = (a.to_pylist() for a in conformed.arrays)
    assert total == [Decimal("12345678901234567890.1230000000"), Decimal("0.1000000000"), None]
    assert delivery == [{"floor": Decimal(3)}, {"floor": None}, None]
    assert conformed.failed(0).tolist() == [False, False, True]  # 11 fraction digits: never rounded
    assert conformed.failed(1).tolist() == [False, True, False]  # 23 digits in a decimal(10,0)
