"""Protobuf values (Confluent wire format) through whole runs: the table is created from the message's
schema and evolves with its next version in the same Iceberg commit as the rows that bring it; bad
input lands in the dead-letter table with its reason.

Real parts: genuine wire bytes from confluent-kafka's `ProtobufSerializer` (its `mock://` registry);
the schemas served over HTTP by `tests/support/schema_registry.py` (a stand-in for a Confluent
registry: none installs here); the data plane's tasks in this process (the same `observe_task` and
`run_task` the Spark job's stages call, `tests/test_avro_runs.avro_run`); a real SQLite Iceberg
catalog for the commit.
"""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import table_columns
from kafscale_iceberg.domain import value_formats
from kafscale_iceberg.domain.runs import RunStatus, SchemaMode
from tests.support.iceberg_runs import sql_committer, sql_settings
from tests.support.protobuf_messages import compile_proto, message
from tests.support.schema_registry import StandInRegistry
from tests.test_avro_runs import avro_run
from tests.test_protobuf_values import Producer
from tests.test_schema_inference import TABLE, commit

ORDER_V1 = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order { int32 id = 1; string sauce = 2; google.protobuf.Timestamp at = 3; uint64 serial = 4; }
"""
ORDER_V2 = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1; string sauce = 2; google.protobuf.Timestamp at = 3; uint64 serial = 4;
  repeated string toppings = 5;
}
"""
V1 = message(compile_proto({"order.proto": ORDER_V1}), "shop.Order")
V2 = message(compile_proto({"order.proto": ORDER_V2}), "shop.Order")
AT = datetime.datetime(2024, 1, 4, 12, 28, 13, tzinfo=datetime.UTC)


def order(kind: type, n: int, **more: object) -> object:
    made = kind(id=n, sauce="tomato", serial=2**64 - 1, **more)
    made.at.FromDatetime(AT)  # type: ignore[attr-defined]
    return made


def test_the_table_is_created_from_the_message_and_evolves_with_its_next_version_in_one_commit(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    producer = Producer(schema_registry)
    values = producer.values(V1, [order(V1, 1), order(V1, 2)])
    plan, result = avro_run(
        tmp_path / "r1", values, None, schema_registry, value_format=value_formats.PROTOBUF
    )
    assert result.status is RunStatus.SUCCEEDED
    commit(sql_committer(tmp_path), plan, result, -1, 1)
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    columns = {c.name: c.type_name for c in table_columns(table.schema())}
    assert {n: columns[n] for n in ("id", "sauce", "at", "serial")} == {
        "id": "int",
        "sauce": "string",
        "at": "timestamptz",
        "serial": "decimal(20,0)",
    }
    versions = len(table.metadata.metadata_log)

    values = producer.values(V2, [order(V2, 2**40, toppings=["ham"])])
    plan, result = avro_run(
        tmp_path / "r2",
        values,
        sql_committer(tmp_path),
        schema_registry,
        first_offset=2,
        value_format=value_formats.PROTOBUF,
    )
    assert result.status is RunStatus.SUCCEEDED
    commit(sql_committer(tmp_path), plan, result, 1, 2)
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert len(table.metadata.metadata_log) == versions + 1  # the schema change rode with the append
    columns = {c.name: c.type_name for c in table_columns(table.schema())}
    assert (columns["id"], columns["toppings"]) == ("long", "list<string>")
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["id"], r["at"], r["serial"], r["toppings"]) for r in rows] == [
        (1, AT, decimal.Decimal(2**64 - 1), None),
        (2, AT, decimal.Decimal(2**64 - 1), None),
        (2**40, AT, decimal.Decimal(2**64 - 1), ["ham"]),
    ]


def test_bad_protobuf_input_lands_in_the_dead_letter_table_with_its_reason(
    tmp_path: Path, schema_registry: StandInRegistry
) -> None:
    (good,) = Producer(schema_registry).values(V1, [order(V1, 1)])
    values = [good, b'{"id": 2}', b"\x00\x00\x00\x00\x63" + good[5:], good[:6] + b"\x0a\xff\xff"]
    _plan, result = avro_run(
        tmp_path,
        values,
        None,
        schema_registry,
        value_format=value_formats.PROTOBUF,
        schema_mode=SchemaMode.LENIENT,
    )
    assert result.status is RunStatus.SUCCEEDED
    assert (result.counts.written, result.counts.dead_lettered) == (1, 3)
    assert result.counts.dead_letter_reasons == {"wire_format": 1, "unknown_schema": 1, "undecodable": 1}
