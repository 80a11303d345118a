"""`value_format: protobuf`: Protobuf records in Confluent wire format read into typed columns.

Records are genuine wire bytes from confluent-kafka's `ProtobufSerializer` (its in-process `mock://`
registry, which registers the compiled schema) or from the protobuf runtime behind a hand-built wire
header; schemas are served over HTTP by `tests/support/schema_registry.py`, a stand-in for a Confluent
registry (none installs here), as `.proto` text (what registries answer by default) or serialized.
"""

from __future__ import annotations

import base64
import datetime
import decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.protobuf import ProtobufDecoder
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.protobuf_schemas import protobuf_columns
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RegistrySettings
from kafscale_iceberg.exceptions import RecordSchemaError, RegistryUnavailableError
from tests.support.protobuf_messages import compile_proto, message
from tests.support.schema_registry import StandInRegistry

TOPIC = "pizzas"
PIZZA_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Sauce { SAUCE_UNSPECIFIED = 0; TOMATO = 1; CREAM = 2; }

message Pizza {
  message Oven { string name = 1; sfixed32 temperature = 2; }
  message Review { string text = 1; int32 stars = 2; }
  int32 id = 1;
  sint64 big = 2;
  uint32 slices = 3;
  uint64 serial = 4;
  bytes token = 5;
  Sauce sauce = 6;
  google.protobuf.Timestamp ordered = 7;
  google.protobuf.DoubleValue tip = 8;
  repeated string toppings = 9;
  map<string, int32> extras = 10;
  Oven oven = 11;
  oneof payment { string card = 12; int64 voucher = 13; }
  optional float rating = 14;
  sint32 delta = 15;
  fixed64 checksum = 16;
}
"""
POOL = compile_proto({"pizza.proto": PIZZA_PROTO})
Pizza = message(POOL, "shop.Pizza")
Review = message(POOL, "shop.Pizza.Review")
ORDERED = datetime.datetime(2024, 1, 4, 12, 28, 13, 123456, tzinfo=datetime.UTC)


def pizza(n: int, **more: Any) -> Any:
    made = Pizza(id=n, toppings=["ham", "olive"], **more)
    made.ordered.FromDatetime(ORDERED)
    return made


class Producer:
    """confluent-kafka's Protobuf serializer against its `mock://` registry, mirrored to the stand-in."""

    def __init__(self, registry: StandInRegistry) -> None:
        self.client = SchemaRegistryClient.new_client({"url": "mock://protobuf-producer"})
        self.registry = registry

    def values(self, message_type: Any, records: list[Any]) -> list[bytes]:
        serializer = ProtobufSerializer(message_type, self.client, {"use.deprecated.format": False})
        context = SerializationContext(TOPIC, MessageField.VALUE)
        encoded = [serializer(r, context) for r in records]
        self.registry.register_from(self.client, f"{TOPIC}-value")
        return encoded


def _cache(registry: StandInRegistry) -> SchemaCache:
    return SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=registry.url)))


def _values(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary())


def _rows(decoded: DecodedBatch, columns: list[ColumnSpec]) -> list[dict[str, Any]]:
    arrays = conform(decoded, columns).arrays
    return pa.Table.from_arrays(arrays, names=[c.name for c in columns]).to_pylist()


def _wire(schema_id: int, payload: bytes, indexes: bytes = b"\x00") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + payload


def test_every_protobuf_type_lands_in_the_column_the_mapping_table_gives(
    schema_registry: StandInRegistry,
) -> None:
    values = Producer(schema_registry).values(
        Pizza,
        [
            pizza(
                1,
                big=-(2**62),
                slices=2**32 - 1,
                serial=2**64 - 1,
                token=b"\x00\xff",
                sauce=2,
                extras={"cheese": 2},
                card="visa",
                rating=4.5,
                delta=-7,
                checksum=2**63 + 1,
            ),
            pizza(2, voucher=99),
        ],
    )
    decoded = ProtobufDecoder(_cache(schema_registry)).decode(_values(values))
    assert decoded.errors == {}
    (group,) = decoded.groups
    columns = list(group.columns)
    assert {c.name: (c.type, c.precision) for c in columns} == {
        "id": (ColumnType.INT, None),
        "big": (ColumnType.LONG, None),
        "slices": (ColumnType.LONG, None),
        "serial": (ColumnType.DECIMAL, 20),
        "token": (ColumnType.BINARY, None),
        "sauce": (ColumnType.STRING, None),
        "ordered": (ColumnType.TIMESTAMPTZ, None),
        "tip": (ColumnType.DOUBLE, None),
        "toppings": (ColumnType.LIST, None),
        "extras": (ColumnType.MAP, None),
        "oven": (ColumnType.STRUCT, None),
        "card": (ColumnType.STRING, None),
        "voucher": (ColumnType.LONG, None),
        "rating": (ColumnType.FLOAT, None),
        "delta": (ColumnType.INT, None),
        "checksum": (ColumnType.DECIMAL, 20),
    }
    first, second = _rows(decoded, columns)
    assert first == {
        "id": 1,
        "big": -(2**62),
        "slices": 2**32 - 1,
        "serial": decimal.Decimal(2**64 - 1),
        "token": b"\x00\xff",
        "sauce": "CREAM",
        "ordered": ORDERED,
        "tip": None,
        "toppings": ["ham", "olive"],
        "extras": [("cheese", 2)],
        "oven": None,
        "card": "visa",
        "voucher": None,
        "rating": 4.5,
        "delta": -7,
        "checksum": decimal.Decimal(2**63 + 1),
    }
    assert (second["sauce"], second["card"], second["voucher"], second["rating"], second["serial"]) == (
        "SAUCE_UNSPECIFIED",
        None,
        99,
        None,
        decimal.Decimal(0),
    )


def test_wrappers_and_nested_messages_are_optional_values(schema_registry: StandInRegistry) -> None:
    made = pizza(3)
    made.tip.value = 0.0
    made.oven.name = "stone"
    made.oven.temperature = -40
    values = Producer(schema_registry).values(Pizza, [made])
    decoded = ProtobufDecoder(_cache(schema_registry)).decode(_values(values))
    columns = [c for c in decoded.groups[0].columns if c.name in ("tip", "oven")]
    assert _rows(decoded, columns) == [{"tip": 0.0, "oven": {"name": "stone", "temperature": -40}}]


def test_a_nested_message_is_found_by_its_message_index_path(schema_registry: StandInRegistry) -> None:
    producer = Producer(schema_registry)
    values = producer.values(Review, [Review(text="crisp", stars=5)]) + producer.values(Pizza, [pizza(4)])
    decoded = ProtobufDecoder(_cache(schema_registry)).decode(_values(values))
    assert decoded.errors == {}
    labels = sorted(g.label for g in decoded.groups)
    assert labels == ["schema id 1 message shop.Pizza", "schema id 1 message shop.Pizza.Review"]
    review = next(g for g in decoded.groups if g.label.endswith("Review"))
    assert review.records.to_pylist() == [{"text": "crisp", "stars": 5}]


OVEN_PROTO = """
syntax = "proto3";
package kitchen;
message Oven { string name = 1; int64 degrees = 2; }
"""
ORDER_PROTO = """
syntax = "proto3";
package shop;
import "kitchen/oven.proto";
import "google/protobuf/timestamp.proto";
message Order { kitchen.Oven oven = 1; google.protobuf.Timestamp at = 2; string customer = 3; }
"""
ORDER_POOL_MESSAGE = message(
    compile_proto({"kitchen/oven.proto": OVEN_PROTO, "order.proto": ORDER_PROTO}), "shop.Order"
)


def test_proto_text_with_references_and_well_known_imports_is_compiled(
    schema_registry: StandInRegistry,
) -> None:
    schema_registry.register("kitchen-oven", OVEN_PROTO, schema_type="PROTOBUF")
    order_id = schema_registry.register(
        "orders-value",
        ORDER_PROTO,
        schema_type="PROTOBUF",
        references=[{"name": "kitchen/oven.proto", "subject": "kitchen-oven", "version": 1}],
    )
    order = ORDER_POOL_MESSAGE(customer="ada")
    order.oven.name = "stone"
    order.oven.degrees = 2**40
    order.at.FromDatetime(ORDERED)
    decoded = ProtobufDecoder(_cache(schema_registry)).decode(
        _values([_wire(order_id, order.SerializeToString())])
    )
    assert decoded.errors == {}
    assert decoded.groups[0].records.to_pylist() == [
        {"oven": {"name": "stone", "degrees": 2**40}, "at": ORDERED, "customer": "ada"}
    ]
    assert "/subjects/kitchen-oven/versions/1" in schema_registry.requests


def test_the_registry_is_asked_for_the_serialized_form_and_uses_it(schema_registry: StandInRegistry) -> None:
    schema_id = schema_registry.register(
        "pizzas-value", "this text would not compile", schema_type="PROTOBUF"
    )
    compiled = descriptor_pb2.FileDescriptorProto()
    Pizza.DESCRIPTOR.file.CopyToProto(compiled)
    schema_registry.serialized[schema_id] = base64.b64encode(compiled.SerializeToString()).decode()
    decoded = ProtobufDecoder(_cache(schema_registry)).decode(
        _values([_wire(schema_id, pizza(5).SerializeToString())])
    )
    assert decoded.errors == {}
    assert decoded.groups[0].records.field("id").to_pylist() == [5]
    assert f"/schemas/ids/{schema_id}?format=serialized" in schema_registry.requests


def test_values_without_the_prefix_are_read_with_value_subject_and_value_message(
    schema_registry: StandInRegistry,
) -> None:
    schema_registry.register("pizzas-value", PIZZA_PROTO, schema_type="PROTOBUF")
    review = Review(text="late", stars=2).SerializeToString()
    decoder = ProtobufDecoder(_cache(schema_registry), subject="pizzas-value", message="shop.Pizza.Review")
    decoded = decoder.decode(_values([review]))
    assert decoded.errors == {}
    assert decoded.groups[0].records.to_pylist() == [{"text": "late", "stars": 2}]


def test_bad_input_becomes_dead_letters_naming_the_schema_id_and_what_failed(
    schema_registry: StandInRegistry,
) -> None:
    schema_id = schema_registry.register("pizzas-value", PIZZA_PROTO, schema_type="PROTOBUF")
    good = pizza(6).SerializeToString()
    decoded = ProtobufDecoder(_cache(schema_registry)).decode(
        _values(
            [
                _wire(schema_id, good),
                _wire(404, good),
                _wire(schema_id, b"\x0a\xff\xff"),
                _wire(schema_id, good, indexes=b"\x02\x0e"),
                _wire(schema_id, good, indexes=b"\x81"),
                b"{}",
                None,
            ]
        )
    )
    kinds = {position: kind for position, (kind, _) in decoded.errors.items()}
    assert kinds == {
        1: "unknown_schema",
        2: "undecodable",
        3: "undecodable",
        4: "wire_format",
        5: "wire_format",
    }
    reasons = {position: reason for position, (_, reason) in decoded.errors.items()}
    assert "schema id 404" in reasons[1]
    assert f"schema id {schema_id}" in reasons[2]
    assert "message shop.Pizza" in reasons[2]
    assert "index path [7]" in reasons[3]
    assert "message-index path" in reasons[4]
    assert "first byte 0x7b" in reasons[5]
    assert decoded.groups[0].positions.tolist() == [0]


RECURSIVE_PROTO = """
syntax = "proto3";
package tree;
message Node { string name = 1; repeated Node children = 2; }
"""


def test_a_recursive_message_is_refused_naming_the_field() -> None:
    node = message(compile_proto({"tree.proto": RECURSIVE_PROTO}), "tree.Node")
    with pytest.raises(
        RecordSchemaError, match=r"field children\.element uses the message 'tree.Node' inside itself"
    ):
        protobuf_columns(node.DESCRIPTOR, schema_name="schema id 9")


def test_records_of_a_recursive_message_are_dead_letters_not_lost(schema_registry: StandInRegistry) -> None:
    schema_id = schema_registry.register("tree-value", RECURSIVE_PROTO, schema_type="PROTOBUF")
    decoded = ProtobufDecoder(_cache(schema_registry)).decode(_values([_wire(schema_id, b"")]))
    ((kind, reason),) = decoded.errors.values()
    assert kind == "undecodable"
    assert "recursive schemas are refused" in reason


def test_each_schema_id_is_asked_of_the_registry_once_per_task(schema_registry: StandInRegistry) -> None:
    values = Producer(schema_registry).values(Pizza, [pizza(n) for n in range(40)])
    cache = _cache(schema_registry)
    decoder = ProtobufDecoder(cache)
    decoder.decode(_values(values[:20]))
    decoder.decode(_values(values[20:]))
    assert cache.lookups == 1


def test_a_registry_outage_raises_the_transient_error_and_dead_letters_nothing(
    schema_registry: StandInRegistry,
) -> None:
    schema_id = schema_registry.register("pizzas-value", PIZZA_PROTO, schema_type="PROTOBUF")
    schema_registry.failing = True
    with pytest.raises(RegistryUnavailableError, match="503"):
        ProtobufDecoder(_cache(schema_registry)).decode(
            _values([_wire(schema_id, pizza(1).SerializeToString())])
        )


def test_a_uint64_beyond_the_long_range_lands_exact_not_wrapped(schema_registry: StandInRegistry) -> None:
    values = Producer(schema_registry).values(Pizza, [pizza(7, serial=2**63), pizza(8, serial=2**64 - 1)])
    decoded = ProtobufDecoder(_cache(schema_registry)).decode(_values(values))
    column = ColumnSpec(name="serial", type=ColumnType.DECIMAL, precision=20, scale=0)
    assert conform(decoded, [column]).arrays[0].to_pylist() == [
        decimal.Decimal(2**63),
        decimal.Decimal(2**64 - 1),
    ]
