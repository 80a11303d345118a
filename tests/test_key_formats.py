"""`key_format`: record keys decoded into the mapping's `key_<field>` columns, as values of that format
are decoded; bad keys are dead letters (or fail a strict run) with reasons that say it was the key.

Real parts: genuine Avro wire bytes for the keys from confluent-kafka's `AvroSerializer` (its
in-process `mock://` registry, serializing `MessageField.KEY`); the schemas served over HTTP by
`tests/support/schema_registry.py` (a stand-in for a Confluent registry: none installs here); real
segments, and the data plane's task (`run_task`, what the Spark job and the Lambda runner run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    FailureKind,
    RegistrySettings,
    RunResult,
    RunStatus,
    RunTimings,
    SchemaMode,
)
from kafscale_iceberg.segments.decode import Record
from tests.support.iceberg_runs import sql_committer
from tests.support.protobuf_messages import compile_proto, message
from tests.support.schema_registry import StandInRegistry
from tests.support.spark_job import BASE_TIME_MS, SegmentFolder, make_plan
from tests.test_avro_runs import _table_rows, avro_run
from tests.test_record_decoders import PIZZA_V1, Producer, pizza
from tests.test_schema_inference import commit

ORDER_KEY = {
    "type": "record",
    "name": "OrderKey",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}],
}
COLUMNS = (
    ColumnSpec(name="key_id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="key_region", type=ColumnType.STRING),
    ColumnSpec(name="total", type=ColumnType.DOUBLE),
)


def _avro_keys(
    registry: StandInRegistry,
    keys: list[dict[str, Any]],
    *,
    client: SchemaRegistryClient | None = None,
    schema: object = ORDER_KEY,
) -> list[bytes]:
    """Keys serialized by confluent-kafka (`client`: the values' producer's, so ids do not clash)."""
    client = client or SchemaRegistryClient.new_client({"url": "mock://key-producer"})
    serializer = AvroSerializer(client, json.dumps(schema))
    context = SerializationContext("orders", MessageField.KEY)
    encoded = [serializer(k, context) for k in keys]
    registry.register_from(client, "orders-key")
    return encoded


def _run(
    root: Path, registry: StandInRegistry, pairs: list[tuple[bytes | None, bytes]], **conversion: Any
) -> RunResult:
    folder = SegmentFolder(root / "segments")
    records = [
        Record(offset=o, timestamp_ms=BASE_TIME_MS + o, key=key, value=value, headers=())
        for o, (key, value) in enumerate(pairs)
    ]
    folder.add(0, records)
    plan = make_plan(
        folder,
        str(root / "out"),
        ranges={0: (-1, len(pairs) - 1)},
        **{"columns": COLUMNS, "key_format": value_formats.AVRO, **conversion},
    )
    settings = RegistrySettings(url=registry.url)
    plan = plan.model_copy(update={"schema_registry": settings})
    client = ConfluentSchemaRegistry(settings)
    reports = [
        run_task(plan, t, reader=DocumentStore(), sink=StagedFileStore(), registry=client)
        for t in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    return build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))


def _rows(uri: str, *names: str) -> list[dict[str, Any]]:
    return pq.read_table(uri.removeprefix("file://")).select(list(names)).to_pylist()


def test_avro_keys_land_in_the_key_columns_beside_the_values_columns(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    keys = _avro_keys(schema_registry, [{"id": 7, "region": "eu"}, {"id": 2**40, "region": "us"}])
    result = _run(tmp_path, schema_registry, [(keys[0], b'{"total": 12.5}'), (keys[1], b'{"total": 1}')])
    assert result.status is RunStatus.SUCCEEDED
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key", "key_id", "key_region", "total") == [
        {"key": keys[0], "key_id": 7, "key_region": "eu", "total": 12.5},  # the binary key stays
        {"key": keys[1], "key_id": 2**40, "key_region": "us", "total": 1.0},
    ]


def test_a_bad_key_is_a_dead_letter_whose_reason_says_it_was_the_key(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    (good,) = _avro_keys(schema_registry, [{"id": 1, "region": "eu"}])
    pairs: list[tuple[bytes | None, bytes]] = [
        (good, b'{"total": 1}'),
        (b"order-2", b'{"total": 2}'),  # a plain string key: no wire prefix
        (good[:5] + b"\x02", b'{"total": 3}'),  # ends inside its long
        (None, b'{"total": 4}'),  # no key: key_id is required
    ]
    result = _run(tmp_path, schema_registry, pairs)
    assert result.status is RunStatus.SUCCEEDED
    assert result.counts.dead_letter_reasons == {"wire_format": 1, "undecodable": 1, "required_column": 1}
    (dead_file,) = result.dead_letter_files
    dead = {r["offset"]: r for r in _rows(dead_file.uri, "offset", "error_kind", "error")}
    assert dead[1]["error"].startswith("record key: no Confluent wire-format prefix")
    assert "key_subject" in dead[1]["error"]
    assert dead[2]["error"].startswith("record key: the payload does not decode with schema id 1")
    assert "required column 'key_id'" in dead[3]["error"]
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_id", "total") == [{"key_id": 1, "total": 1.0}]


def test_keys_without_the_prefix_are_read_with_the_key_subjects_latest_schema(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    (good,) = _avro_keys(schema_registry, [{"id": 5, "region": "ap"}])
    result = _run(tmp_path, schema_registry, [(good[5:], b"{}")], key_subject="orders-key")
    assert result.counts.dead_letter_reasons == {}
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_id", "key_region") == [{"key_id": 5, "key_region": "ap"}]


def test_in_strict_mode_a_bad_key_fails_the_run_naming_the_record(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    _avro_keys(schema_registry, [{"id": 1, "region": "eu"}])
    result = _run(
        tmp_path,
        schema_registry,
        [(b"\x00\x00\x00\x00\x63x", b"{}")],
        schema_mode=SchemaMode.STRICT,
        json_schema={"type": "object"},
    )
    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.STRICT_VALIDATION
    assert result.failure.record_id == "orders:0:0"
    assert "record key: schema id 99" in result.failure.message


def test_json_keys_fill_the_key_columns_with_the_json_rules(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    pairs: list[tuple[bytes | None, bytes]] = [
        (b'{"id": 3, "region": "eu"}', b'{"total": 1}'),
        (b'{"id": "three"}', b'{"total": 2}'),  # not a long: required, so a dead letter
    ]
    result = _run(tmp_path, schema_registry, pairs, key_format=value_formats.JSON)
    assert result.counts.dead_letter_reasons == {"required_column": 1}
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_id", "key_region", "total") == [
        {"key_id": 3, "key_region": "eu", "total": 1.0}
    ]


ORDER_KEY_PROTO = """
syntax = "proto3";
package shop;
message OrderKey { int64 id = 1; string region = 2; }
"""


def test_protobuf_keys_without_the_prefix_are_read_with_key_subject_and_key_message(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    schema_registry.register("orders-key", ORDER_KEY_PROTO, schema_type="PROTOBUF")
    key_class = message(compile_proto({"key.proto": ORDER_KEY_PROTO}), "shop.OrderKey")
    key = key_class(id=9, region="sa").SerializeToString()  # protobuf's runtime, no wire prefix
    pairs: list[tuple[bytes | None, bytes]] = [(key, b'{"total": 3}')]
    result = _run(
        tmp_path,
        schema_registry,
        pairs,
        key_format=value_formats.PROTOBUF,
        key_subject="orders-key",
        key_message="shop.OrderKey",
    )
    assert result.counts.dead_letter_reasons == {}
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_id", "key_region", "total") == [
        {"key_id": 9, "key_region": "sa", "total": 3.0}
    ]


def test_key_columns_come_from_the_key_schemas_and_evolve_like_the_values(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    """Avro values and keys, no columns listed: the table is created with the value's columns and the
    key's fields as `key_` columns, and a key schema's new field is added in the commit that brings it."""
    producer = Producer(schema_registry)
    values = producer.values(PIZZA_V1, [pizza(1), pizza(2)])
    keys = _avro_keys(
        schema_registry, [{"id": 1, "region": "eu"}, {"id": 2, "region": "us"}], client=producer.client
    )
    plan, result = avro_run(
        tmp_path / "r1", values, None, schema_registry, keys=keys, key_format=value_formats.AVRO
    )
    assert result.status is RunStatus.SUCCEEDED, result.failure
    commit(sql_committer(tmp_path), plan, result, -1, 1)
    columns, rows = _table_rows(tmp_path)
    assert (columns["key_id"], columns["key_region"], columns["id"]) == ("long", "string", "int")
    assert [(r["key_id"], r["key_region"], r["id"]) for r in rows] == [(1, "eu", 1), (2, "us", 2)]

    shard = {"name": "shard", "type": ["null", "int"], "default": None}
    wider = {**ORDER_KEY, "fields": [*ORDER_KEY["fields"], shard]}
    (new_key,) = _avro_keys(
        schema_registry, [{"id": 3, "region": "ap", "shard": 4}], client=producer.client, schema=wider
    )
    columns, rows = _second_run(tmp_path, producer, schema_registry, new_key)
    assert columns["key_shard"] == "int"
    assert [(r["key_id"], r["key_shard"]) for r in rows] == [(1, None), (2, None), (3, 4)]


def test_an_avro_key_that_is_not_a_record_lands_in_key_value_and_widens_with_its_schema(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    """The most common Kafka key, a primitive (`"int"`, later `"long"`), no columns listed: one
    column `key_value` typed by the key's schema, widened in the commit of the version that widens it."""
    producer = Producer(schema_registry)
    keys = _avro_keys(schema_registry, [7, 8], client=producer.client, schema="int")
    plan, result = avro_run(
        tmp_path / "r1",
        producer.values(PIZZA_V1, [pizza(1), pizza(2)]),
        None,
        schema_registry,
        keys=keys,
        key_format=value_formats.AVRO,
    )
    assert result.status is RunStatus.SUCCEEDED, result.failure
    assert result.counts.dead_letter_reasons == {}
    commit(sql_committer(tmp_path), plan, result, -1, 1)
    columns, rows = _table_rows(tmp_path)
    assert (columns["key_value"], columns["id"]) == ("int", "int")
    assert [(r["key_value"], r["id"]) for r in rows] == [(7, 1), (8, 2)]

    (wide,) = _avro_keys(schema_registry, [2**40], client=producer.client, schema="long")
    columns, rows = _second_run(tmp_path, producer, schema_registry, wide)
    assert columns["key_value"] == "long"
    assert [r["key_value"] for r in rows] == [7, 8, 2**40]


def test_a_string_avro_key_fills_a_listed_key_value_column_and_a_bad_one_is_a_dead_letter(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    good, other = _avro_keys(schema_registry, ["order-1", "order-2"], schema="string")
    pairs: list[tuple[bytes | None, bytes]] = [
        (good, b'{"total": 1}'),
        (other[:5] + b"\x14ab", b'{"total": 2}'),  # a string of 10 bytes that has 2
        (other, b'{"total": 3}'),
    ]
    columns = (
        ColumnSpec(name="key_value", type=ColumnType.STRING, required=True),
        ColumnSpec(name="total", type=ColumnType.DOUBLE),
    )
    result = _run(tmp_path, schema_registry, pairs, columns=columns)
    assert result.counts.dead_letter_reasons == {"undecodable": 1}
    (dead_file,) = result.dead_letter_files
    (dead,) = _rows(dead_file.uri, "offset", "error")
    assert dead["offset"] == 1
    assert dead["error"].startswith("record key: the payload does not decode with schema id 1")
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_value", "total") == [
        {"key_value": "order-1", "total": 1.0},
        {"key_value": "order-2", "total": 3.0},
    ]


KEY_VALUE_COLUMNS = (
    ColumnSpec(name="key_value", type=ColumnType.STRING, required=True),
    ColumnSpec(name="total", type=ColumnType.DOUBLE),
)


def _dead_errors(result: RunResult) -> dict[int, str]:
    (dead_file,) = result.dead_letter_files
    return {r["offset"]: r["error"] for r in _rows(dead_file.uri, "offset", "error")}


def test_a_json_schema_string_key_fills_key_value_and_one_that_does_not_validate_is_a_dead_letter(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    client = SchemaRegistryClient.new_client({"url": "mock://json-key-producer"})
    serializer = JSONSerializer(json.dumps({"type": "string"}), client)
    context = SerializationContext("orders", MessageField.KEY)
    good = serializer("order-1", context)
    schema_registry.register_from(client, "orders-key")
    pairs: list[tuple[bytes | None, bytes]] = [
        (good, b'{"total": 1}'),
        (good[:5] + b"42", b'{"total": 2}'),  # a number: not the schema's string
    ]
    result = _run(
        tmp_path, schema_registry, pairs, columns=KEY_VALUE_COLUMNS, key_format=value_formats.JSON_SCHEMA
    )
    assert result.counts.dead_letter_reasons == {"undecodable": 1}
    assert _dead_errors(result)[1].startswith("record key: the payload does not validate against schema id")
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_value", "total") == [{"key_value": "order-1", "total": 1.0}]


def _second_run(
    tmp_path: Path, producer: Producer, schema_registry: StandInRegistry, key: bytes
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """A second run (offset 2: one pizza keyed by `key`) committed over the first; the table's
    columns and rows after it."""
    plan, result = avro_run(
        tmp_path / "r2",
        producer.values(PIZZA_V1, [pizza(3)]),
        sql_committer(tmp_path),
        schema_registry,
        first_offset=2,
        keys=[key],
        key_format=value_formats.AVRO,
    )
    assert result.status is RunStatus.SUCCEEDED, result.failure
    commit(sql_committer(tmp_path), plan, result, 1, 2)
    return _table_rows(tmp_path)


def _connect_key(schema: dict[str, Any], payload: object) -> bytes:
    """A record key as Kafka Connect's JsonConverter writes it with `schemas.enable=true`."""
    return json.dumps({"schema": schema, "payload": payload}).encode()


def test_a_connect_key_with_a_primitive_schema_fills_key_value_and_a_misfit_is_a_dead_letter(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    string = {"type": "string", "optional": False}
    pairs: list[tuple[bytes | None, bytes]] = [
        (_connect_key(string, "order-1"), b'{"total": 1}'),
        (_connect_key(string, 7), b'{"total": 2}'),  # the payload does not fit its own schema
    ]
    result = _run(
        tmp_path, schema_registry, pairs, columns=KEY_VALUE_COLUMNS, key_format=value_formats.CONNECT_JSON
    )
    assert result.counts.dead_letter_reasons == {"undecodable": 1}
    assert _dead_errors(result)[1] == (
        "record key: the payload does not fit its envelope schema: field value: a number is not a string"
    )
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_value", "total") == [{"key_value": "order-1", "total": 1.0}]


def test_connect_keys_give_their_columns_from_their_own_schemas_a_primitive_one_key_value(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    """Connect values and keys, no columns listed: a primitive key schema gives `key_value`, typed by
    it (`int64` -> long), and a struct key's field named like a base field (`offset`) is a column."""
    value_schema = {"type": "struct", "fields": [{"field": "total", "type": "float64"}]}
    values = [_connect_key(value_schema, {"total": t}) for t in (1.5, 2.5)]
    keys: list[bytes | None] = [
        _connect_key({"type": "int64"}, 2**40),
        _connect_key({"type": "struct", "fields": [{"field": "offset", "type": "int32"}]}, {"offset": 3}),
    ]
    plan, result = avro_run(
        tmp_path,
        values,
        None,
        schema_registry,
        value_format=value_formats.CONNECT_JSON,
        keys=keys,
        key_format=value_formats.CONNECT_JSON,
    )
    assert result.status is RunStatus.SUCCEEDED, result.failure
    assert result.counts.dead_letter_reasons == {}
    commit(sql_committer(tmp_path), plan, result, -1, 1)
    columns, rows = _table_rows(tmp_path)
    assert (columns["key_value"], columns["key_offset"], columns["total"]) == ("long", "int", "double")
    assert [(r["key_value"], r["key_offset"], r["total"]) for r in rows] == [
        (2**40, None, 1.5),
        (None, 3, 2.5),
    ]


def test_json_keys_that_are_scalars_fill_a_listed_key_value_column(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    pairs: list[tuple[bytes | None, bytes]] = [
        (b'"order-1"', b'{"total": 1}'),
        (b'{"value": "order-2"}', b'{"total": 2}'),  # an object's field `value`: the same column
        (b"order-3", b'{"total": 3}'),  # not JSON: a dead letter naming it
    ]
    result = _run(tmp_path, schema_registry, pairs, columns=KEY_VALUE_COLUMNS, key_format=value_formats.JSON)
    assert result.counts.dead_letter_reasons == {"invalid_json": 1}
    assert _dead_errors(result)[2].startswith("record key: value is not JSON")
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_value", "total") == [
        {"key_value": "order-1", "total": 1.0},
        {"key_value": "order-2", "total": 2.0},
    ]


def test_a_protobuf_key_message_whose_field_is_named_value_fills_key_value(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    """Key fields named like base fields (`value`, `offset`) are `key_` columns: only a value's are
    reserved. A one-field message (as `google.protobuf.StringValue` is) thus lands in `key_value`."""
    proto = 'syntax = "proto3";\npackage shop;\nmessage OrderKey { string value = 1; int64 offset = 2; }\n'
    schema_registry.register("orders-key", proto, schema_type="PROTOBUF")
    key_class = message(compile_proto({"key.proto": proto}), "shop.OrderKey")
    key = key_class(value="order-1", offset=4).SerializeToString()
    columns = (*KEY_VALUE_COLUMNS, ColumnSpec(name="key_offset", type=ColumnType.LONG))
    result = _run(
        tmp_path,
        schema_registry,
        [(key, b'{"total": 3}')],
        columns=columns,
        key_format=value_formats.PROTOBUF,
        key_subject="orders-key",
        key_message="shop.OrderKey",
    )
    assert result.counts.dead_letter_reasons == {}
    (data_file,) = result.data_files
    assert _rows(data_file.uri, "key_value", "key_offset", "total") == [
        {"key_value": "order-1", "key_offset": 4, "total": 3.0}
    ]
