"""Debezium change events in Kafka Connect's JsonConverter envelope (`value_format: connect_json`,
Debezium's default output) and through the Avro converter (`value_format: avro`, the registry) into an
upsert mapping's task: the format's decoder reads the envelope, `after` is the key's new row with its
schema's types, `d` deletes by `before`, a tombstone by its record key in the same converter's form;
what is not a Debezium event is a dead letter with the reason.

Real parts: genuine Debezium-shaped records (`tests/support/debezium.py`: Connect JSON, and Avro wire
bytes from confluent-kafka's serializer); the schemas served over HTTP by the stand-in registry
(`tests/support/schema_registry.py`: no registry server installs here); the data plane's tasks in
this process (the Spark job runs the same `run_task`). The pipeline test on local Spark is in
`test_upsert_pipeline.py`.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.glue_registry import GlueSchemaRegistry
from kafscale_iceberg.dataplane.formats.glue_wire import glue_header
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.avro_schemas import avro_columns, parse_avro_schema
from kafscale_iceberg.domain.connect_schemas import connect_columns
from kafscale_iceberg.domain.runs import (
    CdcFormat,
    ColumnSpec,
    ColumnType,
    RegistrySettings,
    RunResult,
    RunTimings,
    UpsertSettings,
)
from kafscale_iceberg.domain.value_formats import ValueFormatSpec
from kafscale_iceberg.segments.decode import Record
from tests.support.debezium import ENVELOPE_SCHEMA, AvroDebezium, connect_event, connect_key, row
from tests.support.glue_registry import GlueRegistry
from tests.support.schema_registry import StandInRegistry
from tests.support.spark_job import BASE_TIME_MS, SegmentFolder, make_plan
from tests.test_config import load, problems_of
from tests.test_upsert_config import upsert_mapping
from tests.test_upsert_tasks import dead_letters, rows

COLUMNS = (
    ColumnSpec(name="id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="name", type=ColumnType.STRING),
    ColumnSpec(name="price", type=ColumnType.DECIMAL, precision=10, scale=2),
    ColumnSpec(name="updated_at", type=ColumnType.TIMESTAMP),
    ColumnSpec(name="opens_at", type=ColumnType.TIME),
)
UPDATED_MS = 1_700_000_000_123
UPDATED = datetime.datetime(2023, 11, 14, 22, 13, 20, 123000)
OPENS_MS = 8 * 3_600_000 + 30 * 60_000 + 5
OPENS = datetime.time(8, 30, 0, 5000)
Change = tuple[bytes | None, bytes | None]


def run(
    tmp_path: Path,
    changes: list[Change],
    value_format: ValueFormatSpec,
    registry: StandInRegistry | GlueRegistry | None = None,
    **upsert: Any,
) -> RunResult:
    """One task of an upsert mapping over `changes` (record key, value) at offsets 0, 1, …"""
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(
        0,
        [Record(offset=o, timestamp_ms=BASE_TIME_MS + o, key=k, value=v) for o, (k, v) in enumerate(changes)],
    )
    plan = make_plan(
        folder,
        str(tmp_path),
        ranges={0: (-1, len(changes) - 1)},
        columns=COLUMNS,
        value_format=value_format,
        upsert=UpsertSettings(key=("id",), **({"cdc": CdcFormat.DEBEZIUM} | upsert)),
    )
    client: ConfluentSchemaRegistry | GlueSchemaRegistry | None = None
    if isinstance(registry, GlueRegistry):
        plan = plan.model_copy(update={"schema_registry": registry.settings()})
        client = GlueSchemaRegistry(registry.settings())
    elif registry is not None:
        settings = RegistrySettings(url=registry.url)
        plan = plan.model_copy(update={"schema_registry": settings})
        client = ConfluentSchemaRegistry(settings)
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore(), registry=client)
        for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    return build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))


def price(text: str) -> decimal.Decimal:
    return decimal.Decimal(text)


def test_debezium_in_connects_envelope_writes_after_with_its_types_and_deletes_by_before_and_key(
    tmp_path: Path,
) -> None:
    result = run(
        tmp_path,
        [
            (connect_key(1), connect_event("c", None, row(1, "a", "19.99"))),
            (connect_key(2), connect_event("r", None, row(2, "b"))),
            (
                connect_key(1),
                connect_event("u", row(1, "a", "19.99"), row(1, "a2", "-0.05", UPDATED_MS, OPENS_MS)),
            ),
            (connect_key(2), connect_event("d", row(2, "b"), None)),
            (connect_key(2), None),  # the tombstone after the delete: its key in Connect's envelope
            (connect_key(3), None),
        ],
        value_formats.CONNECT_JSON,
    )
    assert dead_letters(result) == []
    assert rows(result.data_files, "offset", "id", "name", "price", "updated_at", "opens_at") == [
        (0, 1, "a", price("19.99"), None, None),
        (1, 2, "b", None, None, None),
        (2, 1, "a2", price("-0.05"), UPDATED, OPENS),  # Debezium's units: milliseconds, not micros
    ]
    assert rows(result.deleted_key_files, "offset", "id") == [(3, 2), (4, 2), (5, 3)]


def test_a_row_keeps_the_connect_envelope_it_arrived_in(tmp_path: Path) -> None:
    event = connect_event("c", None, row(7, "x", "1.00"))
    result = run(tmp_path, [(connect_key(7), event)], value_formats.CONNECT_JSON)
    [(value, record_id)] = rows(result.data_files, "value", "record_id")
    assert (value, record_id) == (event, "orders:0:0")


@pytest.mark.parametrize(
    ("value", "kind", "reason"),
    [
        (
            json.dumps({"schema": ENVELOPE_SCHEMA["fields"][1], "payload": {"id": 1, "name": "a"}}),
            "cdc_envelope",
            "not a Debezium event: its envelope schema mysql-server-1.inventory.customers.Value has no "
            "'op', 'before' and 'after' fields",
        ),
        (
            connect_event("t", None, None).decode(),
            "cdc_envelope",
            "not a Debezium event: 'op' is 't' (expected c, r, u or d)",
        ),
        (
            connect_event("u", None, None).decode(),
            "cdc_envelope",
            "Debezium op 'u' without an 'after' row",
        ),
        (json.dumps({"op": "c", "after": {"id": 1}}), "wire_format", "not a Kafka Connect envelope"),
        ("not json", "invalid_json", "not JSON"),
    ],
)
def test_what_is_not_a_debezium_event_in_connects_envelope_is_a_dead_letter_with_the_reason(
    tmp_path: Path, value: str, kind: str, reason: str
) -> None:
    result = run(tmp_path, [(connect_key(1), value.encode())], value_formats.CONNECT_JSON)
    [(offset, found_kind, error)] = dead_letters(result)
    assert (offset, found_kind) == (0, kind)
    assert str(error).startswith(reason)
    assert result.data_files == result.deleted_key_files == ()


def test_a_delete_whose_before_lacks_the_key_column_is_a_dead_letter_naming_it(tmp_path: Path) -> None:
    event = json.loads(connect_event("d", row(1, "a"), None))
    event["payload"]["before"]["id"] = None  # a connector emitting a `before` without its key
    event["schema"]["fields"][0]["fields"][0]["optional"] = True
    result = run(tmp_path, [(connect_key(1), json.dumps(event).encode())], value_formats.CONNECT_JSON)
    [(offset, kind, error)] = dead_letters(result)
    assert (offset, kind) == (0, "required_column")
    assert "'id'" in str(error)
    assert "(before)" in str(error)
    assert result.deleted_key_files == ()


def test_plain_connect_rows_upsert_with_cdc_none_and_a_connect_key_tombstone_deletes(tmp_path: Path) -> None:
    value_schema = ENVELOPE_SCHEMA["fields"][1] | {"optional": False}
    value = json.dumps({"schema": value_schema, "payload": {"id": 4, "name": "d", "price": None}})
    result = run(
        tmp_path,
        [(connect_key(4), value.encode()), (connect_key(5), None)],
        value_formats.CONNECT_JSON,
        cdc=CdcFormat.NONE,
    )
    assert rows(result.data_files, "offset", "id", "name") == [(0, 4, "d")]
    assert rows(result.deleted_key_files, "offset", "id") == [(1, 5)]


def test_a_json_mappings_tombstone_keyed_in_connects_envelope_deletes_its_key(tmp_path: Path) -> None:
    result = run(tmp_path, [(connect_key(9), None)], value_formats.JSON, cdc=CdcFormat.NONE)
    assert rows(result.deleted_key_files, "offset", "id") == [(0, 9)]
    assert dead_letters(result) == []


def test_debezium_through_the_avro_converter_upserts_and_deletes_by_before_and_by_its_avro_key(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    debezium = AvroDebezium(schema_registry, "orders")
    result = run(
        tmp_path,
        [
            (debezium.key(1), debezium.event("c", None, row(1, "a", "19.99"))),
            (debezium.key(2), debezium.event("c", None, row(2, "b"))),
            (
                debezium.key(1),
                debezium.event("u", row(1, "a", "19.99"), row(1, "a2", "20.01", UPDATED_MS, OPENS_MS)),
            ),
            (debezium.key(2), debezium.event("d", row(2, "b"), None)),
            (debezium.key(2), None),
            (debezium.key(3), None),
        ],
        value_formats.AVRO,
        schema_registry,
    )
    assert dead_letters(result) == []
    assert rows(result.data_files, "offset", "id", "name", "price", "updated_at", "opens_at") == [
        (0, 1, "a", price("19.99"), None, None),
        (1, 2, "b", None, None, None),
        (2, 1, "a2", price("20.01"), UPDATED, OPENS),
    ]
    assert rows(result.deleted_key_files, "offset", "id") == [(3, 2), (4, 2), (5, 3)]


def test_an_avro_tombstone_whose_key_schema_the_registry_lacks_is_a_dead_letter_naming_it(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    unknown_key = b"\x00\x00\x00\x03\xe7\x02"  # schema id 999
    result = run(tmp_path, [(unknown_key, None)], value_formats.AVRO, schema_registry)
    [(offset, kind, error)] = dead_letters(result)
    assert (offset, kind) == (0, "tombstone")
    assert str(error).startswith("a tombstone whose record key does not decode: schema id 999")
    assert result.deleted_key_files == ()


ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}],
}
ORDER_KEY = {
    "type": "record",
    "name": "OrderKey",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}],
}


def test_a_tombstone_whose_key_has_the_glue_header_deletes_the_key_its_avro_names(
    tmp_path: Path, glue_registry: GlueRegistry
) -> None:
    """Keys and values written by the Glue serializers (`schema_registry.type: glue`): a tombstone's
    key names the key deleted by its Avro fields, as with Confluent's wire format."""
    keys = glue_registry.avro("orders", ORDER_KEY, [{"id": 1}, {"id": 2}], is_key=True)
    values = glue_registry.avro("orders", ORDER, [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    unknown = glue_header(str(uuid.uuid4())) + keys[1][18:]
    result = run(
        tmp_path,
        [(keys[0], values[0]), (keys[1], values[1]), (keys[0], None), (unknown, None)],
        value_formats.AVRO,
        glue_registry,
        cdc=CdcFormat.NONE,
    )
    assert rows(result.data_files, "offset", "id", "name") == [(0, 1, "a"), (1, 2, "b")]
    assert rows(result.deleted_key_files, "offset", "id") == [(2, 1)]
    [(offset, kind, error)] = dead_letters(result)
    assert (offset, kind) == (3, "tombstone")
    assert str(error).startswith("a tombstone whose record key does not decode: schema version id")


def test_a_tombstone_whose_avro_key_is_a_primitive_deletes_the_one_column_key_it_holds(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    """The most common Kafka key, a bare Avro `"long"` (Confluent's Avro key serializer): a tombstone
    names the upsert key's one column by it, as a JSON scalar key does."""
    client = SchemaRegistryClient.new_client({"url": "mock://primitive-keys"})
    keys = AvroSerializer(client, json.dumps("long"))
    values = AvroSerializer(client, json.dumps(ORDER))

    def key(n: int) -> bytes:
        encoded = keys(n, SerializationContext("orders", MessageField.KEY))
        assert encoded is not None
        return encoded

    def value(n: int, name: str) -> bytes:
        encoded = values({"id": n, "name": name}, SerializationContext("orders", MessageField.VALUE))
        assert encoded is not None
        return encoded

    changes: list[Change] = [(key(1), value(1, "a")), (key(2), value(2, "b")), (key(1), None)]
    schema_registry.register_from(client, "orders-key")
    schema_registry.register_from(client, "orders-value")
    result = run(tmp_path, changes, value_formats.AVRO, schema_registry, cdc=CdcFormat.NONE)
    assert dead_letters(result) == []
    assert rows(result.data_files, "offset", "id", "name") == [(0, 1, "a"), (1, 2, "b")]
    assert rows(result.deleted_key_files, "offset", "id") == [(2, 1)]


def debezium_config(value_format: str) -> dict[str, Any]:
    data = upsert_mapping(value_format=value_format, upsert={"key": ["id"], "cdc": "debezium"})
    data["schema_registry"] = {"url": "http://registry:8081"}
    return data


@pytest.mark.parametrize("value_format", ["connect_json", "avro"])
def test_an_upsert_mapping_reads_debeziums_connect_json_and_avro_values(value_format: str) -> None:
    mapping = load(debezium_config(value_format)).mappings[0]
    assert (mapping.mode, mapping.value_format.name) == ("upsert", value_format)


def test_an_upsert_mapping_refuses_the_formats_it_does_not_read_naming_those_it_does() -> None:
    problems = problems_of(debezium_config("protobuf"))
    assert problems["mappings[0].upsert"] == (
        "is not supported with value_format protobuf yet (upsert reads avro, connect_json, json values)"
    )


def test_debeziums_temporal_types_are_timestamps_and_dates_in_both_formats_and_nanos_stay_long() -> None:
    names = {
        "io.debezium.time.Timestamp": ("int64", "long"),
        "io.debezium.time.MicroTimestamp": ("int64", "long"),
        "io.debezium.time.Date": ("int32", "int"),
        "io.debezium.time.NanoTimestamp": ("int64", "long"),
        "io.debezium.time.Time": ("int32", "int"),
        "io.debezium.time.MicroTime": ("int64", "long"),
    }
    connect = {
        "type": "struct",
        "fields": [
            {"type": physical, "optional": True, "name": name, "field": name.rsplit(".", 1)[1]}
            for name, (physical, _avro) in names.items()
        ],
    }
    avro = {
        "type": "record",
        "name": "Value",
        "fields": [
            {"name": name.rsplit(".", 1)[1], "type": {"type": avro_type, "connect.name": name}}
            for name, (_physical, avro_type) in names.items()
        ],
    }
    expected = {
        "Timestamp": "timestamp",
        "MicroTimestamp": "timestamp",
        "Date": "date",
        "NanoTimestamp": "long",
        "Time": "time",
        "MicroTime": "time",
    }
    from_connect = connect_columns(connect, schema_name="v")
    from_avro = avro_columns(parse_avro_schema(json.dumps(avro), schema_name="v"), schema_name="v")
    assert {c.name: c.type_name for c in from_connect} == expected
    assert {c.name: c.type_name for c in from_avro} == expected
