"""A Debezium topic into an upsert table on the one-machine pipeline (`run --once`), end to end: the
table holds each key's last state after every run, deletes applied, dead letters with their reason,
and a crash after the table commit heals into the same state.

Debezium's default output (the envelope inside Kafka Connect's JsonConverter `{"schema", "payload"}`,
`value_format: connect_json`) lands the same way, its decimals exact.

Real parts: moto S3, the SQLite checkpoint store, a pyiceberg SQLite catalog, local Spark.
"""

from __future__ import annotations

import decimal
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.commands.status import render_status
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.execution.job_runner import InProcessJobRunner
from kafscale_iceberg.local.pipeline import Pipeline, RunEnd
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from kafscale_iceberg.ports import JobRunner
from kafscale_iceberg.services.status import StatusService
from tests.support.config_documents import local_document
from tests.support.debezium import connect_event, connect_key, row
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment
from tests.test_faults import DyingTables, Point, ProcessDied

pytestmark = pytest.mark.slow

NAMESPACE, TOPIC, TABLE, DLQ = "prod", "orders", "shop.orders", "shop.orders__dlq"


def event(op: str, key: int, name: str | None = None) -> tuple[bytes, bytes]:
    """A Debezium change event of row `key` (and its record key, as Debezium writes it)."""
    row = {"id": key, "name": name}
    before, after = (row, None) if op == "d" else (None, row)
    value = {"op": op, "before": before, "after": after, "source": {"table": "customers"}, "ts_ms": 1}
    return json.dumps({"id": key}).encode(), json.dumps(value).encode()


def tombstone(key: int) -> tuple[bytes, None]:
    return json.dumps({"id": key}).encode(), None


class World:
    def __init__(
        self, moto: MotoEndpoint, tmp_path: Path, runner: dict[str, Any] | None = None, **mapping: Any
    ) -> None:
        self.s3: Any = moto.client("s3")
        self.bucket = moto.new_bucket()
        self.config = config_from_mapping(
            local_document(
                tmp_path,
                moto,
                bucket=self.bucket,
                namespace=NAMESPACE,
                runs={"retry_backoff_seconds": 0},
                **({} if runner is None else {"runner": runner}),
                offsets={"lease_ttl_seconds": 30},
                mappings=[
                    {
                        "topic": TOPIC,
                        "table": TABLE,
                        "mode": "upsert",
                        "upsert": {"key": ["id"], "cdc": "debezium"},
                        "create_table_if_missing": True,
                        "schema": {
                            "columns": [
                                {"name": "id", "type": "long", "required": True},
                                {"name": "name", "type": "string"},
                                {"name": "price", "type": "decimal(10,2)"},
                            ]
                        },
                        **mapping,
                    }
                ],
            ),
            source="test",
        )
        self.next: dict[int, int] = {}
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        self.runner: JobRunner | None = None

    def put(self, partition: int, records: list[tuple[bytes | None, bytes | None]]) -> None:
        base = self.next.get(partition, 0)
        put_segment(
            self.s3,
            self.bucket,
            NAMESPACE,
            TOPIC,
            partition,
            base,
            len(records),
            keys=[k for k, _ in records],
            values=[v for _, v in records],
            batch_size=3,
        )
        self.next[partition] = base + len(records)

    def pipeline(self, point: str | None = None) -> Pipeline:
        assembly = Assembly(self.config, owner_id="test")
        if self.runner is None and self.config.runner.type == "inline":
            self.runner = InProcessJobRunner(workers=2, s3=assembly.s3_settings)
        if self.runner is None:
            self.runner = LocalSparkJobRunner(master="local[2]", s3=assembly.s3_settings)
        if point is not None:
            assembly.__dict__["tables"] = DyingTables(assembly.tables, point, table=TABLE, dead_letters=DLQ)
        return Pipeline(assembly, self.runner, watch_interval_s=0.1)

    def run_once(self) -> None:
        summary = self.pipeline().run_once()
        assert summary.ok, summary.failed

    def names(self) -> dict[int, str]:
        return {key: row["name"] for key, row in self.rows().items()}

    def rows(self) -> dict[int, dict[str, Any]]:
        rows = self.catalog.load_table(TABLE).scan().to_arrow().to_pylist()
        assert len(rows) == len({r["id"] for r in rows}), "a key has two rows"
        return {r["id"]: r for r in rows}

    def dead_letters(self) -> list[tuple[int, int, str]]:
        rows = self.catalog.load_table(DLQ).scan().to_arrow().to_pylist()
        return sorted((r["partition"], r["offset"], r["error_kind"]) for r in rows)


@pytest.fixture
def world(moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession) -> World:
    return World(moto_server, tmp_path)


def test_a_debezium_topic_lands_each_keys_last_state_once(world: World) -> None:
    world.put(0, [event("c", 1, "a"), event("c", 2, "b"), event("u", 1, "a2"), event("d", 2), tombstone(2)])
    world.put(1, [event("r", 3, "c"), (b"{}", b"not an event")])
    world.run_once()
    assert world.names() == {1: "a2", 3: "c"}
    assert world.dead_letters() == [(1, 1, "cdc_envelope")]

    world.put(0, [event("c", 2, "b2"), event("u", 3, "c2")])  # key 3 moved partitions: the later run wins
    world.put(1, [event("d", 1)])
    world.run_once()
    assert world.names() == {2: "b2", 3: "c2"}

    assembly = Assembly(world.config, owner_id="status")
    status = StatusService(
        world.config, assembly.checkpoints, assembly.segments, assembly.tables, assembly.documents
    ).report()
    (topic,) = status.topics
    assert topic.upsert is not None
    # Run 1: keys 1 and 3 inserted (2 inserted then deleted counts nowhere); run 2: 2 inserted, 3
    # updated, 1 deleted.
    assert (topic.upsert.inserted, topic.upsert.updated, topic.upsert.deleted) == (3, 1, 1)
    assert "upsert: 3 inserted, 1 updated, 1 deleted" in render_status(status)


def test_debezium_in_connects_json_envelope_lands_each_keys_last_state_with_its_types(
    moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession
) -> None:
    world = World(moto_server, tmp_path, value_format="connect_json")
    world.put(
        0,
        [
            (connect_key(1), connect_event("c", None, row(1, "a", "19.99"))),
            (connect_key(2), connect_event("c", None, row(2, "b", "5.00"))),
            (connect_key(1), connect_event("u", row(1, "a", "19.99"), row(1, "a2", "20.01"))),
            (connect_key(2), connect_event("d", row(2, "b", "5.00"), None)),
            (connect_key(2), None),
        ],
    )
    world.put(1, [(connect_key(3), connect_event("r", None, row(3, "c"))), (connect_key(9), b"{}")])
    world.run_once()
    assert {k: (r["name"], r["price"]) for k, r in world.rows().items()} == {
        1: ("a2", decimal.Decimal("20.01")),
        3: ("c", None),
    }
    assert world.dead_letters() == [(1, 1, "wire_format")]

    world.put(1, [(connect_key(3), None), (connect_key(1), connect_event("d", row(1, "a2"), None))])
    world.run_once()
    assert world.rows() == {}


def test_a_crash_after_the_table_commit_heals_into_the_same_state(world: World) -> None:
    world.put(0, [event("c", 1, "a"), event("c", 2, "b")])
    world.run_once()
    world.put(0, [event("u", 1, "a2"), event("d", 2), tombstone(2), event("c", 4, "d")])
    with pytest.raises(ProcessDied):
        world.pipeline(Point.AFTER_TABLE_COMMIT).run_once()
    world.run_once()
    assert world.names() == {1: "a2", 4: "d"}


def test_an_upsert_run_after_a_compaction_commits_at_its_first_attempt(
    moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    # The in-process runner (no JVM): the launcher plans from `field-ids.json`, as on AWS.
    world = World(moto_server, tmp_path, runner={"type": "inline", "inline": {"workers": 2}})
    world.put(0, [event("c", 1, "a"), event("c", 2, "b")])
    world.run_once()
    world.put(0, [event("c", 3, "c")])
    world.run_once()
    report = Assembly(world.config, owner_id="maintain").maintenance.maintain(force_compaction=True)
    (compacted,) = [t for t in report.tables if t.table == TABLE]
    assert compacted.compaction is not None
    assert compacted.compaction.committed

    world.put(0, [event("u", 1, "a2")])  # a key of a compacted file: the run rewrites that file
    summary = world.pipeline().run_once()
    assert summary.ok, summary.failed
    # Located in the compacted table at once: not refused for the files the compaction replaced.
    assert [r.end for r in summary.runs] == [RunEnd.COMMITTED]
    assert world.names() == {1: "a2", 2: "b", 3: "c"}
