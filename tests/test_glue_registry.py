"""`schema_registry.type: glue`: records behind the AWS Glue Schema Registry's header, their schemas
read from the registry by schema version id (`adapters/glue_registry.py`, `dataplane/formats/glue_wire.py`).

Real parts: the registry is moto's Glue (the session's server), read through boto3; Avro and JSON
Schema records are genuine, written by `aws-glue-schema-registry` (the Python port of the awslabs
serializers, registering its schemas on moto). Protobuf records are built per the awslabs
serializers' code (no Python serializer writes them: `tests/support/glue_registry.protobuf_record`)
around messages from protobuf's runtime.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafscale_iceberg.adapters.glue_registry import GlueSchemaRegistry
from kafscale_iceberg.adapters.glue_registry import registered_schema as glue_registry_answer
from kafscale_iceberg.dataplane.formats.avro import AvroDecoder
from kafscale_iceberg.dataplane.formats.choice import decoder_for
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.glue_protobuf import GlueProtobufDecoder, glue_message_names
from kafscale_iceberg.dataplane.formats.glue_wire import glue_header
from kafscale_iceberg.dataplane.formats.json_schema import JsonSchemaDecoder
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    FailureKind,
    RegistryType,
    RunStatus,
    SchemaMode,
)
from kafscale_iceberg.exceptions import RegistryUnavailableError, SchemaNotFoundError
from tests.support.glue_registry import GlueRegistry, compressed, protobuf_record
from tests.support.moto import free_port
from tests.support.protobuf_messages import compile_proto, message
from tests.test_avro_runs import avro_run
from tests.test_config import load, minimal, problems_of
from tests.test_record_decoders import PIZZA_V1, PIZZA_V2, pizza

TOPIC = "pizzas"


def _cache(registry: GlueRegistry, **settings: Any) -> SchemaCache:
    return SchemaCache(GlueSchemaRegistry(registry.settings(**settings)), RegistryType.GLUE)


def _values(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary())


def _rows(decoded: DecodedBatch, *specs: tuple[str, ColumnType]) -> list[dict[str, Any]]:
    columns = [ColumnSpec(name=n, type=t) for n, t in specs]
    got = conform(decoded, columns)
    return pa.Table.from_arrays(got.arrays, names=[c.name for c in columns]).to_pylist()


def test_avro_records_of_two_versions_land_in_their_columns(glue_registry: GlueRegistry) -> None:
    old = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    new = glue_registry.avro(TOPIC, PIZZA_V2, [pizza(2**40, tip=2.5)])
    decoded = AvroDecoder(_cache(glue_registry)).decode(_values([new[0], old[0], None]))
    assert decoded.errors == {}
    v1, v2 = (glue_registry.version_id(f"{TOPIC}-value", n) for n in (1, 2))
    assert sorted(g.label for g in decoded.groups) == sorted(
        [f"schema version id {v1} ({TOPIC}-value v1)", f"schema version id {v2} ({TOPIC}-value v2)"]
    )
    rows = _rows(decoded, ("id", ColumnType.LONG), ("tip", ColumnType.DOUBLE), ("sauce", ColumnType.STRING))
    assert rows == [
        {"id": 2**40, "tip": 2.5, "sauce": "tomato"},
        {"id": 1, "tip": None, "sauce": "tomato"},
        {"id": None, "tip": None, "sauce": None},
    ]


def test_a_zlib_compressed_record_reads_as_its_uncompressed_twin(glue_registry: GlueRegistry) -> None:
    (plain,) = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(3)])
    squeezed = compressed(plain)
    assert squeezed[:2] == b"\x03\x05"
    assert squeezed[2:18] == plain[2:18]
    assert squeezed[18:] != plain[18:]
    decoded = AvroDecoder(_cache(glue_registry)).decode(_values([squeezed, plain]))
    assert decoded.errors == {}
    rows = _rows(decoded, ("id", ColumnType.INT), ("sauce", ColumnType.STRING))
    assert [r["id"] for r in rows] == [3, 3]


def test_schemas_of_orders_a_schemas_versions_by_number(glue_registry: GlueRegistry) -> None:
    old = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    new = glue_registry.avro(TOPIC, PIZZA_V2, [pizza(2)])
    found = AvroDecoder(_cache(glue_registry)).schemas_of(
        _values([new[0], old[0]]), pa.array([0, 1]), partition=0
    )
    first, second = found.values()
    assert [c.name for c in first][-1] == "toppings"  # v1 first: evolution adds v2's fields after it
    assert [c.name for c in second][-2:] == ["tip", "order_key"]


def test_json_schema_records_are_validated_and_land_in_their_columns(glue_registry: GlueRegistry) -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "sauce": {"type": "string"}},
        "required": ["id"],
    }
    good = glue_registry.json(TOPIC, schema, [{"id": 1, "sauce": "tomato"}, {"id": 2}])
    version_id = glue_registry.version_id(f"{TOPIC}-value")
    invalid = glue_header(version_id) + b'{"sauce": "no id"}'
    decoded = JsonSchemaDecoder(_cache(glue_registry)).decode(_values([*good, invalid]))
    assert list(decoded.errors) == [2]
    kind, reason = decoded.errors[2]
    assert kind == "undecodable"
    assert f"schema version id {version_id}" in reason
    assert _rows(decoded, ("id", ColumnType.LONG), ("sauce", ColumnType.STRING))[:2] == [
        {"id": 1, "sauce": "tomato"},
        {"id": 2, "sauce": None},
    ]


PIZZA_PROTO = """
syntax = "proto3";
package shop;
message Pizza {
  int64 id = 1;
  string sauce = 2;
  message Topping { string name = 1; }
  repeated Topping toppings = 3;
}
message Oven { int32 degrees = 1; }
"""


def test_protobuf_messages_are_found_by_the_glue_message_index(glue_registry: GlueRegistry) -> None:
    pool = compile_proto({"pizza.proto": PIZZA_PROTO})
    version_id = glue_registry.register("pizzas-proto", "PROTOBUF", PIZZA_PROTO)
    # The awslabs serializers number every message, nested ones too, by full name.
    assert glue_message_names(pool.FindFileByName("pizza.proto")) == [
        "shop.Oven",
        "shop.Pizza",
        "shop.Pizza.Topping",
    ]
    pizza_type, oven_type = message(pool, "shop.Pizza"), message(pool, "shop.Oven")
    a_pizza = pizza_type(id=7, sauce="tomato", toppings=[{"name": "ham"}]).SerializeToString()
    values = [
        protobuf_record(version_id, 1, a_pizza),
        protobuf_record(version_id, 0, oven_type(degrees=450).SerializeToString(), compress=True),
        protobuf_record(version_id, 1, a_pizza, compress=True),
        protobuf_record(version_id, 9, a_pizza),  # no message 9
    ]
    decoded = GlueProtobufDecoder(_cache(glue_registry)).decode(_values(values))
    assert {p: kind for p, (kind, _) in decoded.errors.items()} == {3: "undecodable"}
    assert f"schema version id {version_id} has no message at index 9" in decoded.errors[3][1]
    by_label = {g.label.rsplit(" ", 1)[-1]: g for g in decoded.groups}
    assert by_label["shop.Pizza"].positions.tolist() == [0, 2]
    assert (
        by_label["shop.Pizza"].records.to_pylist()
        == [{"id": 7, "sauce": "tomato", "toppings": [{"name": "ham"}]}] * 2
    )
    assert by_label["shop.Oven"].records.to_pylist() == [{"degrees": 450}]


def test_a_mapping_reading_protobuf_from_glue_gets_the_glue_decoder(glue_registry: GlueRegistry) -> None:
    settings = ConversionSettings(value_format=value_formats.PROTOBUF)
    assert isinstance(decoder_for(settings, _cache(glue_registry)), GlueProtobufDecoder)


def test_values_without_the_header_are_read_with_the_latest_version_of_value_subject(
    glue_registry: GlueRegistry,
) -> None:
    glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    (latest,) = glue_registry.avro(TOPIC, PIZZA_V2, [pizza(5, tip=1.0)])
    bare = latest[18:]  # the Avro payload alone, as a producer without the serializer writes it
    decoded = AvroDecoder(_cache(glue_registry), subject=f"{TOPIC}-value").decode(_values([bare]))
    assert decoded.errors == {}
    assert _rows(decoded, ("id", ColumnType.LONG), ("tip", ColumnType.DOUBLE)) == [{"id": 5, "tip": 1.0}]


def test_bad_input_becomes_dead_letters_naming_the_schema_version_id_and_what_failed(
    glue_registry: GlueRegistry,
) -> None:
    (good,) = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    version_id = str(uuid.UUID(bytes=good[2:18]))
    unknown = str(uuid.uuid4())
    values = [
        good,
        glue_header(unknown) + good[18:],  # a version id the registry does not have
        b"\x00\x00\x00\x00\x01" + good[18:],  # a Confluent wire-format record: header version 0
        glue_header(version_id, compressed=True) + b"not zlib at all",
        bytes((3, 7)) + good[2:],  # compression byte 7
        good[:-3],  # cut short
    ]
    decoded = AvroDecoder(_cache(glue_registry)).decode(_values(values))
    kinds = {p: kind for p, (kind, _) in decoded.errors.items()}
    assert kinds == {
        1: "unknown_schema",
        2: "wire_format",
        3: "undecodable",
        4: "wire_format",
        5: "undecodable",
    }
    reasons = {p: reason for p, (_, reason) in decoded.errors.items()}
    assert f"schema version id {unknown}" in reasons[1]
    assert "EntityNotFoundException" in reasons[1]
    assert "no AWS Glue Schema Registry header (first byte 0x00, expected header version 0x03" in reasons[2]
    assert all(f"schema version id {version_id}" in reasons[p] for p in (3, 4, 5))
    assert "does not inflate" in reasons[3]
    assert "compression byte 0x07" in reasons[4]
    assert [r["id"] for r in _rows(decoded, ("id", ColumnType.INT))] == [1, None, None, None, None, None]


def test_each_schema_version_id_is_asked_of_glue_once_per_task(glue_registry: GlueRegistry) -> None:
    values = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(n) for n in range(20)])
    cache = _cache(glue_registry)
    decoder = AvroDecoder(cache)
    decoder.decode(_values(values[:10]))
    decoder.decode(_values(values[10:]))
    assert cache.lookups == 1


def test_an_unreachable_registry_raises_the_transient_error_and_dead_letters_nothing(
    glue_registry: GlueRegistry,
) -> None:
    values = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    nowhere = GlueRegistry(glue_registry.name, f"http://127.0.0.1:{free_port()}", glue_registry.glue)
    decoder = AvroDecoder(_cache(nowhere, timeout_seconds=0.5))
    with pytest.raises(RegistryUnavailableError, match=f"Glue schema registry '{glue_registry.name}'"):
        decoder.decode(_values(values))


def test_a_schema_name_the_registry_does_not_have_is_not_found(glue_registry: GlueRegistry) -> None:
    registry = GlueSchemaRegistry(glue_registry.settings())
    with pytest.raises(SchemaNotFoundError, match="schema 'no-such-schema'"):
        registry.latest_schema("no-such-schema")
    glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    assert registry.schema_version(f"{TOPIC}-value", 1).text.startswith("{")
    assert registry.latest_schema(f"{TOPIC}-value").schema_type == "AVRO"


def test_a_schemas_latest_version_is_asked_of_glue_again_after_cache_seconds(
    glue_registry: GlueRegistry,
) -> None:
    now = [0.0]
    registry = GlueSchemaRegistry(glue_registry.settings(cache_seconds=60), clock=lambda: now[0])
    first = glue_registry.register("orders", "JSON", '{"type": "object"}')
    assert registry.latest_schema("orders").schema_id == first
    second = glue_registry.register("orders", "JSON", '{"type": "object", "properties": {}}')
    now[0] = 59.0
    assert registry.latest_schema("orders").schema_id == first
    now[0] = 61.0
    assert registry.latest_schema("orders").schema_id == second


def test_a_version_glue_failed_to_check_makes_its_records_unknown_schema_dead_letters(
    glue_registry: GlueRegistry,
) -> None:
    (record,) = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    version_id = str(uuid.UUID(bytes=record[2:18]))
    glue_registry.set_status(version_id, "FAILURE")
    decoded = AvroDecoder(_cache(glue_registry)).decode(_values([record]))
    assert decoded.groups == ()
    ((kind, reason),) = decoded.errors.values()
    assert kind == "unknown_schema"
    assert f"schema version id {version_id} has status FAILURE" in reason
    assert "register a compatible version" in reason


def test_a_version_glue_is_still_checking_fails_the_run_transiently_and_dead_letters_nothing(
    tmp_path: Path, glue_registry: GlueRegistry
) -> None:
    (record,) = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    version_id = str(uuid.UUID(bytes=record[2:18]))
    glue_registry.set_status(version_id, "PENDING")
    _plan, result = avro_run(tmp_path / "pending", [record], None, glue_registry)
    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.REGISTRY_UNAVAILABLE
    assert f"schema version id {version_id} is PENDING" in result.failure.message
    assert result.dead_letter_files == ()
    glue_registry.set_status(version_id, "AVAILABLE")  # the retry, once Glue's check has passed
    _plan, result = avro_run(tmp_path / "retry", [record], None, glue_registry)
    assert result.status is RunStatus.SUCCEEDED
    assert result.counts.written == 1


def test_the_records_of_a_version_being_deleted_are_still_decoded() -> None:
    """moto hides a DELETING version (it answers EntityNotFoundException, as for a deleted one), so
    the answer is the one Glue's API reference documents for `GetSchemaVersion`."""
    answer = {
        "SchemaVersionId": str(uuid.uuid4()),
        "SchemaDefinition": json.dumps(PIZZA_V1),
        "DataFormat": "AVRO",
        "SchemaArn": "arn:aws:glue:eu-west-1:123456789012:schema/registry/pizzas-value",
        "VersionNumber": 3,
        "Status": "DELETING",
    }
    schema = glue_registry_answer(answer, "schema version id")
    assert (schema.subject, schema.version, schema.schema_type) == ("pizzas-value", 3, "AVRO")


def test_a_run_dead_letters_bad_glue_records_with_their_reason_and_lands_the_rest(
    tmp_path: Path, glue_registry: GlueRegistry
) -> None:
    (good,) = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    unknown = str(uuid.uuid4())
    values = [good, glue_header(unknown) + good[18:], b'{"id": 2}']
    _plan, result = avro_run(tmp_path, values, None, glue_registry, schema_mode=SchemaMode.LENIENT)
    assert result.status is RunStatus.SUCCEEDED
    assert (result.counts.written, result.counts.dead_lettered) == (1, 2)
    assert result.counts.dead_letter_reasons == {"unknown_schema": 1, "wire_format": 1}
    (dead_file,) = result.dead_letter_files
    dead = pq.read_table(dead_file.uri.removeprefix("file://")).to_pylist()
    assert [(d["offset"], d["error_kind"]) for d in dead] == [(1, "unknown_schema"), (2, "wire_format")]
    assert f"schema version id {unknown}" in dead[0]["error"]


def test_in_strict_mode_a_bad_glue_record_fails_the_run_naming_it_and_its_version_id(
    tmp_path: Path, glue_registry: GlueRegistry
) -> None:
    (good,) = glue_registry.avro(TOPIC, PIZZA_V1, [pizza(1)])
    version_id = str(uuid.UUID(bytes=good[2:18]))
    broken = glue_header(version_id, compressed=True) + b"not zlib"
    _plan, result = avro_run(tmp_path, [good, broken], None, glue_registry, schema_mode=SchemaMode.STRICT)
    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.STRICT_VALIDATION
    assert result.failure.record_id == "orders:0:1"  # topic:partition:offset
    assert f"schema version id {version_id}" in result.failure.message


def _config(registry: dict[str, Any]) -> dict[str, Any]:
    data = minimal()
    data["schema_registry"] = registry
    data["mappings"] = [{"topic": TOPIC, "table": "shop.pizzas", "value_format": "avro"}]
    return data


def test_the_config_reads_a_glue_registry_into_the_plan_settings() -> None:
    config = load(
        _config({"type": "GLUE", "registry_name": "orders", "region": "eu-central-1", "timeout_seconds": 2})
    )
    assert config.schema_registry is not None
    settings = config.schema_registry.settings()
    assert (settings.type, settings.registry_name, settings.region, settings.endpoint_url) == (
        RegistryType.GLUE,
        "orders",
        "eu-central-1",
        None,
    )
    assert settings.timeout_seconds == 2


@pytest.mark.parametrize(
    ("registry", "key", "says"),
    [
        ({"type": "glue"}, "registry_name", "is required with type glue"),
        ({"type": "glue", "registry_name": "r", "url": "http://x"}, "url", "type confluent only"),
        ({"type": "glue", "registry_name": "r", "username": "u"}, "username", "type confluent only"),
        ({"url": "http://x", "registry_name": "r"}, "registry_name", "type glue only"),
        ({"type": "glue", "registry_name": "r", "endpoint": "glue.local"}, "endpoint", "URL"),
    ],
)
def test_a_glue_registry_config_is_checked_naming_the_key(
    registry: dict[str, Any], key: str, says: str
) -> None:
    problems = problems_of(_config(registry))
    assert says in problems[f"schema_registry.{key}"]
