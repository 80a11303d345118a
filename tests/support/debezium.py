"""Debezium change events as its MySQL connector writes them, in the two converters' forms the upsert
tests read: Kafka Connect's JsonConverter with schemas (`{"schema", "payload"}`, Debezium's default)
and the Confluent Avro converter (genuine wire bytes from confluent-kafka's `AvroSerializer`).

The shapes follow Debezium's `io.debezium.data.Envelope`: a struct named `<server>.<db>.<table>.Envelope`
with optional `before` and `after` structs (`….Value`), a required `source` struct
(`io.debezium.connector.mysql.Source`), a required string `op`, an optional int64 `ts_ms` and an optional
`transaction` block (`event.block`); the record key is a struct `….Key` of the primary key columns. A
`DECIMAL(10,2)` column is Connect's `Decimal` (base64 of the unscaled big-endian value, Debezium's
default `decimal.handling.mode: precise`) and a `DATETIME(3)` column an `int64` named
`io.debezium.time.Timestamp` (epoch milliseconds), as in the connector's output.
"""

from __future__ import annotations

import base64
import decimal
import json
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.schema_registry import StandInRegistry

SERVER = "mysql-server-1"
PREFIX = f"{SERVER}.inventory.customers"
DECIMAL = "org.apache.kafka.connect.data.Decimal"

_ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": False, "field": "name"},
    {
        "type": "bytes",
        "optional": True,
        "name": DECIMAL,
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "price",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.Timestamp",
        "version": 1,
        "field": "updated_at",
    },
    {"type": "int32", "optional": True, "name": "io.debezium.time.Time", "version": 1, "field": "opens_at"},
]
_SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "table"},
    {"type": "int64", "optional": False, "field": "server_id"},
    {"type": "string", "optional": False, "field": "file"},
    {"type": "int64", "optional": False, "field": "pos"},
    {"type": "int32", "optional": False, "field": "row"},
]
ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"type": "struct", "fields": _ROW_FIELDS, "optional": True, "name": f"{PREFIX}.Value", "field": f}
        for f in ("before", "after")
    ]
    + [
        {
            "type": "struct",
            "fields": _SOURCE_FIELDS,
            "optional": False,
            "name": "io.debezium.connector.mysql.Source",
            "field": "source",
        },
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": False, "field": "id"},
                {"type": "int64", "optional": False, "field": "total_order"},
                {"type": "int64", "optional": False, "field": "data_collection_order"},
            ],
            "optional": True,
            "name": "event.block",
            "version": 1,
            "field": "transaction",
        },
    ],
    "optional": False,
    "name": f"{PREFIX}.Envelope",
    "version": 1,
}
KEY_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
    "optional": False,
    "name": f"{PREFIX}.Key",
}


def _avro_field(connect: dict[str, Any]) -> dict[str, Any]:
    """A Connect field of a primitive type as the Avro converter writes it."""
    kind = {"int64": "long", "int32": "int"}.get(connect["type"], connect["type"])
    if connect["optional"]:
        return {"name": connect["field"], "type": ["null", kind], "default": None}
    return {"name": connect["field"], "type": kind}


_NAMESPACE = "mysql_server_1.inventory.customers"
_AVRO_ROW = {
    "type": "record",
    "name": "Value",
    "namespace": _NAMESPACE,
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": "string"},
        {
            "name": "price",
            "type": [
                "null",
                {
                    "type": "bytes",
                    "scale": 2,
                    "precision": 10,
                    "connect.version": 1,
                    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                    "connect.name": DECIMAL,
                    "logicalType": "decimal",
                },
            ],
            "default": None,
        },
        {
            "name": "updated_at",
            "type": [
                "null",
                {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.Timestamp"},
            ],
            "default": None,
        },
        {
            "name": "opens_at",
            "type": ["null", {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Time"}],
            "default": None,
        },
    ],
    "connect.name": f"{PREFIX}.Value",
}
AVRO_ENVELOPE: dict[str, Any] = {
    "type": "record",
    "name": "Envelope",
    "namespace": _NAMESPACE,
    "fields": [
        {"name": "before", "type": ["null", _AVRO_ROW], "default": None},
        {"name": "after", "type": ["null", f"{_NAMESPACE}.Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.mysql",
                "fields": [_avro_field(f) for f in _SOURCE_FIELDS],
                "connect.name": "io.debezium.connector.mysql.Source",
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
    "connect.name": f"{PREFIX}.Envelope",
}
AVRO_KEY: dict[str, Any] = {
    "type": "record",
    "name": "Key",
    "namespace": _NAMESPACE,
    "fields": [{"name": "id", "type": "int"}],
    "connect.name": f"{PREFIX}.Key",
}


def row(
    key: int, name: str, price: str | None = None, updated_ms: int | None = None, opens_ms: int | None = None
) -> dict[str, Any]:
    """A row of the customers table (`price` as decimal text, e.g. "19.99"; `updated_ms` a `DATETIME(3)`
    as Debezium writes it: `io.debezium.time.Timestamp`, epoch milliseconds of the wall time; `opens_ms`
    a `TIME(3)`: `io.debezium.time.Time`, milliseconds since midnight)."""
    return {
        "id": key,
        "name": name,
        "price": None if price is None else decimal.Decimal(price),
        "updated_at": updated_ms,
        "opens_at": opens_ms,
    }


def _source(position: int) -> dict[str, Any]:
    return {
        "version": "2.7.0.Final",
        "connector": "mysql",
        "name": SERVER,
        "ts_ms": 1_700_000_000_000,
        "db": "inventory",
        "table": "customers",
        "server_id": 223344,
        "file": "mysql-bin.000003",
        "pos": 154 + position,
        "row": 0,
    }


def _payload(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "before": before,
        "after": after,
        "source": _source(0),
        "op": op,
        "ts_ms": 1_700_000_000_123,
        "transaction": None,
    }


def _connect_row(values: dict[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    price = values["price"]
    encoded = None
    if price is not None:
        unscaled = int(price.scaleb(2))
        encoded = base64.b64encode(unscaled.to_bytes(8, "big", signed=True).lstrip(b"\0") or b"\0").decode()
    return {**values, "price": encoded}


def connect_event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
    """The change event's value as JsonConverter writes it with `schemas.enable=true`."""
    payload = _payload(op, _connect_row(before), _connect_row(after))
    return json.dumps({"schema": ENVELOPE_SCHEMA, "payload": payload}).encode()


def connect_key(key: int) -> bytes:
    """The record key as JsonConverter writes it with `schemas.enable=true`."""
    return json.dumps({"schema": KEY_SCHEMA, "payload": {"id": key}}).encode()


class AvroDebezium:
    """Change events through the Avro converter: confluent-kafka's serializer against its `mock://`
    registry, the schemas copied to the stand-in registry the run reads."""

    def __init__(self, registry: StandInRegistry, topic: str) -> None:
        self._client = SchemaRegistryClient.new_client({"url": "mock://debezium"})
        self._registry = registry
        self._topic = topic
        self._values = AvroSerializer(self._client, json.dumps(AVRO_ENVELOPE))
        self._keys = AvroSerializer(self._client, json.dumps(AVRO_KEY))

    def event(self, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
        """The change event's value in Confluent wire format."""
        context = SerializationContext(self._topic, MessageField.VALUE)
        encoded: bytes = self._values(_payload(op, before, after), context)
        self._registry.register_from(self._client, f"{self._topic}-value")
        return encoded

    def key(self, key: int) -> bytes:
        """The record key in Confluent wire format."""
        context = SerializationContext(self._topic, MessageField.KEY)
        encoded: bytes = self._keys({"id": key}, context)
        self._registry.register_from(self._client, f"{self._topic}-key")
        return encoded
