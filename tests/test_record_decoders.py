"""The decoder room (`dataplane/formats/`): Avro in Confluent wire format and Kafka Connect JSON, read
into the run's columns with per-record failures; the registry adapter and the task's schema cache.

Records are genuine wire bytes from confluent-kafka's `AvroSerializer` (its in-process `mock://`
registry); the schemas are served over HTTP by `tests/support/schema_registry.py`, a stand-in for a
Confluent registry (none installs here).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import struct
import uuid
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry, RegistryCredentials
from kafscale_iceberg.dataplane.formats.avro import AvroDecoder
from kafscale_iceberg.dataplane.formats.choice import decoder_for
from kafscale_iceberg.dataplane.formats.connect_json import ConnectJsonDecoder
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    RegistrySettings,
)
from kafscale_iceberg.exceptions import (
    ConfigError,
    RegistryAuthError,
    RegistryUnavailableError,
    SchemaNotFoundError,
)
from tests.support.schema_registry import StandInRegistry

TOPIC = "pizzas"
PIZZA_V1 = {
    "type": "record",
    "name": "Pizza",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "sauce", "type": "string"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
        {"name": "ordered", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "toppings", "type": {"type": "array", "items": "string"}},
    ],
}
PIZZA_V2 = {
    **PIZZA_V1,
    "fields": [
        {"name": "id", "type": "long"},
        *PIZZA_V1["fields"][1:],
        {"name": "tip", "type": ["null", "double"], "default": None},
        {"name": "order_key", "type": ["null", {"type": "string", "logicalType": "uuid"}], "default": None},
    ],
}
ORDERED = datetime.datetime(2024, 1, 4, 12, 28, 13, tzinfo=datetime.UTC)


def pizza(n: int, **more: Any) -> dict[str, Any]:
    return {
        "id": n,
        "sauce": "tomato",
        "price": decimal.Decimal("12.50"),
        "ordered": ORDERED,
        "toppings": ["ham"],
        **more,
    }


class Producer:
    """confluent-kafka's Avro serializer against its `mock://` registry, mirrored to the stand-in."""

    def __init__(self, registry: StandInRegistry) -> None:
        self.client = SchemaRegistryClient.new_client({"url": "mock://producer"})
        self.registry = registry

    def values(self, schema: dict[str, Any], records: list[dict[str, Any]]) -> list[bytes]:
        serializer = AvroSerializer(self.client, json.dumps(schema))
        context = SerializationContext(TOPIC, MessageField.VALUE)
        encoded = [serializer(r, context) for r in records]
        self.registry.register_from(self.client, f"{TOPIC}-value")
        return encoded


def _cache(registry: StandInRegistry, **settings: Any) -> SchemaCache:
    return SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=registry.url, **settings)))


def _columns(*specs: tuple[str, ColumnType]) -> list[ColumnSpec]:
    return [ColumnSpec(name=n, type=t) for n, t in specs]


def _values(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary())


def test_avro_records_land_in_their_columns_with_types_from_their_schema(
    schema_registry: StandInRegistry,
) -> None:
    values = Producer(schema_registry).values(PIZZA_V1, [pizza(1), pizza(2)])
    decoded = AvroDecoder(_cache(schema_registry)).decode(_values(values))
    columns = [
        ColumnSpec(name="id", type=ColumnType.INT),
        ColumnSpec(name="sauce", type=ColumnType.STRING),
        ColumnSpec(name="price", type=ColumnType.DECIMAL, precision=6, scale=2),
        ColumnSpec(name="ordered", type=ColumnType.TIMESTAMPTZ),
        ColumnSpec(
            name="toppings", type=ColumnType.LIST, element=ColumnSpec(name="element", type=ColumnType.STRING)
        ),
    ]
    assert decoded.errors == {}
    assert [g.label for g in decoded.groups] == ["schema id 1"]
    rows = pa.Table.from_arrays(conform(decoded, columns).arrays, names=[c.name for c in columns]).to_pylist()
    assert rows == [
        {
            "id": 1,
            "sauce": "tomato",
            "price": decimal.Decimal("12.50"),
            "ordered": ORDERED,
            "toppings": ["ham"],
        },
        {
            "id": 2,
            "sauce": "tomato",
            "price": decimal.Decimal("12.50"),
            "ordered": ORDERED,
            "toppings": ["ham"],
        },
    ]


def test_records_of_two_schema_versions_in_one_batch_share_the_evolved_columns(
    schema_registry: StandInRegistry,
) -> None:
    producer = Producer(schema_registry)
    old = producer.values(PIZZA_V1, [pizza(1)])
    new = producer.values(PIZZA_V2, [pizza(2**40, tip=2.5, order_key="8c8e1f0a-3b6c-4f4e-9b1a-2f1d3c4b5a69")])
    decoded = AvroDecoder(_cache(schema_registry)).decode(_values([new[0], old[0]]))
    columns = _columns(("id", ColumnType.LONG), ("tip", ColumnType.DOUBLE), ("order_key", ColumnType.UUID))
    got = conform(decoded, columns)
    assert [a.to_pylist() for a in got.arrays] == [
        [2**40, 1],
        [2.5, None],
        [uuid.UUID("8c8e1f0a-3b6c-4f4e-9b1a-2f1d3c4b5a69"), None],
    ]
    assert not got.failed(0).any()


def test_each_schema_id_is_asked_of_the_registry_once_per_task(schema_registry: StandInRegistry) -> None:
    values = Producer(schema_registry).values(PIZZA_V1, [pizza(n) for n in range(50)])
    cache = _cache(schema_registry)
    decoder = AvroDecoder(cache)
    decoder.decode(_values(values[:25]))
    decoder.decode(_values(values[25:]))
    assert cache.lookups == 1
    assert schema_registry.requests == ["/schemas/ids/1"]


def _wire(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def test_bad_input_becomes_dead_letters_naming_the_schema_id_and_what_failed(
    schema_registry: StandInRegistry,
) -> None:
    good = Producer(schema_registry).values(PIZZA_V1, [pizza(1), pizza(2)])
    values = [
        good[0],
        good[1] + b"\x02",  # a byte left over: must not shift the records after it
        good[0][:-4],  # cut short
        _wire(99, PIZZA_V1, pizza(3)),  # an id the registry does not have
        b'{"id": 4}',  # JSON, no wire prefix
        None,
        good[1],
    ]
    decoded = AvroDecoder(_cache(schema_registry)).decode(_values(values))
    kinds = {row: kind for row, (kind, _reason) in decoded.errors.items()}
    assert kinds == {1: "undecodable", 2: "undecodable", 3: "unknown_schema", 4: "wire_format"}
    assert "schema id 1" in decoded.errors[1][1]
    assert "left over" in decoded.errors[1][1]
    assert "schema id 99" in decoded.errors[3][1]
    assert "404" in decoded.errors[3][1]
    assert "first byte 0x7b" in decoded.errors[4][1]
    ids = conform(decoded, _columns(("id", ColumnType.INT))).arrays[0].to_pylist()
    assert ids == [1, None, None, None, None, None, 2]


def test_a_corrupt_record_in_a_large_batch_leaves_the_others_exact(schema_registry: StandInRegistry) -> None:
    good = Producer(schema_registry).values(PIZZA_V1, [pizza(n) for n in range(200)])
    values = list(good)
    values[57] = values[57] + b"\x00\x01"
    decoded = AvroDecoder(_cache(schema_registry)).decode(_values(values))
    assert set(decoded.errors) == {57}
    ids = conform(decoded, _columns(("id", ColumnType.INT))).arrays[0].to_pylist()
    assert ids == [None if n == 57 else n for n in range(200)]


def test_values_without_the_prefix_are_read_with_the_subjects_latest_schema(
    schema_registry: StandInRegistry,
) -> None:
    Producer(schema_registry).values(PIZZA_V1, [pizza(1)])
    bare = _wire(1, PIZZA_V1, pizza(5))[5:]
    decoded = AvroDecoder(_cache(schema_registry), subject=f"{TOPIC}-value").decode(_values([bare]))
    assert conform(decoded, _columns(("id", ColumnType.INT))).arrays[0].to_pylist() == [5]


def test_a_general_union_is_read_into_a_struct_with_one_field_per_branch(
    schema_registry: StandInRegistry,
) -> None:
    schema = {"type": "record", "name": "U", "fields": [{"name": "v", "type": ["null", "int", "string"]}]}
    values = Producer(schema_registry).values(schema, [{"v": 3}, {"v": "three"}, {"v": None}])
    decoded = AvroDecoder(_cache(schema_registry)).decode(_values(values))
    union = ColumnSpec(
        name="v",
        type=ColumnType.STRUCT,
        fields=(
            ColumnSpec(name="int", type=ColumnType.INT),
            ColumnSpec(name="string", type=ColumnType.STRING),
        ),
    )
    assert conform(decoded, [union]).arrays[0].to_pylist() == [
        {"int": 3, "string": None},
        {"int": None, "string": "three"},
        None,
    ]


def test_a_value_that_does_not_fit_the_runs_column_is_null_and_counted(
    schema_registry: StandInRegistry,
) -> None:
    values = Producer(schema_registry).values(PIZZA_V2, [pizza(2**40), pizza(7)])
    got = conform(
        AvroDecoder(_cache(schema_registry)).decode(_values(values)), _columns(("id", ColumnType.INT))
    )
    assert got.arrays[0].to_pylist() == [None, 7]
    assert got.failed(0).tolist() == [True, False]


def test_a_registry_outage_raises_the_transient_error_and_dead_letters_nothing(
    schema_registry: StandInRegistry,
) -> None:
    values = Producer(schema_registry).values(PIZZA_V1, [pizza(1)])
    schema_registry.failing = True
    with pytest.raises(RegistryUnavailableError, match="503"):
        AvroDecoder(_cache(schema_registry)).decode(_values(values))


def test_the_registry_adapter_sends_basic_or_bearer_credentials(schema_registry: StandInRegistry) -> None:
    schema_registry.register(f"{TOPIC}-value", json.dumps(PIZZA_V1))
    settings = RegistrySettings(url=schema_registry.url)
    schema_registry.basic = ("reader", "s3cret")
    with pytest.raises(RegistryAuthError, match="401"):
        ConfluentSchemaRegistry(settings).schema_by_id(1)
    basic = ConfluentSchemaRegistry(settings, RegistryCredentials(username="reader", password="s3cret"))
    assert basic.schema_by_id(1).schema_type == "AVRO"
    schema_registry.basic, schema_registry.token = None, "tok"
    assert (
        ConfluentSchemaRegistry(settings, RegistryCredentials(token="tok"))
        .latest_schema(f"{TOPIC}-value")
        .version
        == 1
    )


def test_the_registry_adapter_caches_latest_for_cache_seconds(schema_registry: StandInRegistry) -> None:
    subject = f"{TOPIC}-value"
    schema_registry.register(subject, json.dumps(PIZZA_V1))
    now = [0.0]
    adapter = ConfluentSchemaRegistry(
        RegistrySettings(url=schema_registry.url, cache_seconds=60), clock=lambda: now[0]
    )
    assert adapter.latest_schema(subject).schema_id == 1
    schema_registry.register(subject, json.dumps(PIZZA_V2))
    now[0] = 59.0
    assert adapter.latest_schema(subject).schema_id == 1
    now[0] = 61.0
    assert adapter.latest_schema(subject).schema_id == 2


def test_an_unknown_subject_is_schema_not_found(schema_registry: StandInRegistry) -> None:
    with pytest.raises(SchemaNotFoundError, match=r"subject .nope.*404"):
        ConfluentSchemaRegistry(RegistrySettings(url=schema_registry.url)).latest_schema("nope")


def test_an_unreachable_registry_is_unavailable() -> None:
    adapter = ConfluentSchemaRegistry(RegistrySettings(url="http://127.0.0.1:9", timeout_seconds=0.5))
    with pytest.raises(RegistryUnavailableError, match="unreachable"):
        adapter.schema_by_id(1)


# -- Kafka Connect JSON ---------------------------------------------------------------------------

CONNECT_SCHEMA = {
    "type": "struct",
    "name": "shop.Pizza",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int32", "optional": False},
        {
            "field": "price",
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "2", "connect.decimal.precision": "6"},
        },
        {"field": "day", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date"},
        {"field": "at", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp"},
        {"field": "ms", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Time"},
        {"field": "raw", "type": "bytes", "optional": True},
        {
            "field": "tags",
            "type": "map",
            "keys": {"type": "string"},
            "values": {"type": "int64"},
            "optional": True,
        },
    ],
}


def _envelope(payload: object, schema: dict[str, Any] = CONNECT_SCHEMA) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}).encode()


def _connect(values: list[bytes | None]) -> DecodedBatch:
    return ConnectJsonDecoder().decode(_values(values))


def test_connect_logical_types_land_as_their_columns() -> None:
    price = base64.b64encode((1250).to_bytes(2, "big", signed=True)).decode()
    payload = {
        "id": 1,
        "price": price,
        "day": 19726,
        "at": 1704371293000,
        "ms": 3_723_456,
        "raw": base64.b64encode(b"\x00\xff").decode(),
        "tags": {"a": 1},
    }
    decoded = _connect([_envelope(payload)])
    (group,) = decoded.groups
    assert [c.type_name for c in group.columns] == [
        "int",
        "decimal(6,2)",
        "date",
        "timestamptz",
        "time",
        "binary",
        "map<string, long>",
    ]
    (row,) = pa.Table.from_arrays(
        conform(decoded, group.columns).arrays, names=[c.name for c in group.columns]
    ).to_pylist()
    assert row == {
        "id": 1,
        "price": decimal.Decimal("12.50"),
        "day": datetime.date(2024, 1, 4),
        "at": ORDERED,
        "ms": datetime.time(1, 2, 3, 456_000),
        "raw": b"\x00\xff",
        "tags": [("a", 1)],
    }


def test_a_numeric_connect_decimal_is_read_exactly_not_through_float64() -> None:
    schema = {**CONNECT_SCHEMA, "fields": [{**CONNECT_SCHEMA["fields"][1], "parameters": {"scale": "3"}}]}
    value = (
        b'{"schema": ' + json.dumps(schema).encode() + b', "payload": {"price": 12345678901234567890.123}}'
    )
    decoded = _connect([value])
    column = ColumnSpec(name="price", type=ColumnType.DECIMAL, precision=38, scale=3)
    assert conform(decoded, [column]).arrays[0].to_pylist() == [decimal.Decimal("12345678901234567890.123")]


def test_connect_envelopes_that_do_not_fit_become_dead_letters_with_the_field_named() -> None:
    decoded = _connect(
        [
            b"not json",
            b'{"id": 1}',
            _envelope({"id": "one"}),
            _envelope({"id": None}),
            _envelope({"id": 2, "price": "%%%"}),
            _envelope(None),  # a tombstone
            None,
        ]
    )
    assert {row: kind for row, (kind, _) in decoded.errors.items()} == {
        0: "invalid_json",
        1: "wire_format",
        2: "undecodable",
        3: "undecodable",
        4: "undecodable",
    }
    assert "field id" in decoded.errors[2][1]
    assert "int32" in decoded.errors[2][1]
    assert "not optional" in decoded.errors[3][1]
    assert "field price" in decoded.errors[4][1]


def test_a_plan_is_checked_without_a_registry_and_decoding_without_one_names_the_key() -> None:
    decoder = decoder_for(ConversionSettings(value_format=value_formats.AVRO), None)
    assert decoder is not None
    with pytest.raises(ConfigError, match="schema_registry"):
        decoder.decode(_values([b"\x00\x00\x00\x00\x01\x02"]))
