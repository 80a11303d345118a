"""One topic of mixed events routed by a field into template tables, each with its own inferred
schema (`route` + `schema.source: infer`), beside a raw table of the same topic, through `run --once`:
each table is created from its own records, a later event adds a field to one table only (that table
evolves in the commit of its files, the other not), and a column added to one table behind the
launcher's back costs one run, refused before any table is written, then re-planned.

Real parts: moto S3, the SQLite checkpoint store, a pyiceberg SQLite catalog, the local Spark runner
(the session-wide SparkSession), driven by the one-machine `Pipeline` as `run --once` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.types import StringType
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import table_columns
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.field_ids import TopicFieldIds, field_ids_uri
from kafscale_iceberg.local.pipeline import OnceSummary, Pipeline, RunEnd
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from tests.support.config_documents import local_document
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

pytestmark = pytest.mark.slow

NAMESPACE, TOPIC = "prod", "events"
CLICKS, ORDERS, RAW, DLQ = "shop.events_click", "shop.events_order", "shop.events_raw", "shop.events__dlq"


def click(offset: int, **more: Any) -> bytes:
    return json.dumps({"type": "click", "page": f"/p/{offset}", "ms": 10 + offset, **more}).encode()


def order(offset: int, **more: Any) -> bytes:
    return json.dumps({"type": "order", "order_id": offset, "total": 9.5, "items": ["a"], **more}).encode()


class World:
    def __init__(self, moto: MotoEndpoint, tmp_path: Path) -> None:
        self.s3: Any = moto.client("s3")
        self.bucket = moto.new_bucket()
        self.config = config_from_mapping(
            local_document(
                tmp_path,
                moto,
                bucket=self.bucket,
                namespace=NAMESPACE,
                runs={"retry_backoff_seconds": 0},
                mappings=[
                    {
                        "topic": TOPIC,
                        "route": {"field": "type", "table_template": "shop.events_{value}"},
                        "dead_letter_table": DLQ,
                        "create_table_if_missing": True,
                        "schema": {"source": "infer"},
                    },
                    {"topic": TOPIC, "table": RAW, "create_table_if_missing": True},
                ],
            ),
            source="test",
        )
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        self.runner: LocalSparkJobRunner | None = None
        self.next_offset = 0

    def put(self, values: list[bytes]) -> None:
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, 0, self.next_offset, len(values), values=values)
        self.next_offset += len(values)

    def run_once(self) -> OnceSummary:
        assembly = Assembly(self.config, owner_id="test")
        if self.runner is None:
            self.runner = LocalSparkJobRunner(master="local[2]", s3=assembly.s3_settings)
        summary = Pipeline(assembly, self.runner, watch_interval_s=0.1).run_once()
        assert summary.ok, summary.failed
        return summary

    def columns(self, table: str) -> dict[str, str]:
        return {c.name: c.type_name for c in table_columns(self.catalog.load_table(table).schema())}

    def rows(self, table: str) -> list[dict[str, Any]]:
        return sorted(self.catalog.load_table(table).scan().to_arrow().to_pylist(), key=lambda r: r["offset"])

    def versions(self, table: str) -> int:
        return len(self.catalog.load_table(table).metadata.metadata_log)

    def recorded(self) -> TopicFieldIds:
        uri = field_ids_uri(self.config.runs.location, TOPIC)
        return TopicFieldIds.model_validate_json(DocumentStore().read_text(uri))


@pytest.fixture
def world(moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession) -> World:
    return World(moto_server, tmp_path)


def test_mixed_events_get_a_table_per_type_each_with_its_own_evolving_inferred_schema(world: World) -> None:
    world.put([click(0), order(1), click(2), b'{"page": "/no-type"}', order(4)])
    first = world.run_once()
    assert [r.end for r in first.runs] == [RunEnd.COMMITTED]

    assert world.columns(CLICKS) == {"type": "string", "page": "string", "ms": "long"}
    assert world.columns(ORDERS) == {
        "type": "string",
        "order_id": "long",
        "total": "double",
        "items": "list<string>",
    }
    assert [r["offset"] for r in world.rows(CLICKS)] == [0, 2]
    assert [(r["order_id"], r["items"]) for r in world.rows(ORDERS)] == [(1, ["a"]), (4, ["a"])]
    assert [r["offset"] for r in world.rows(RAW)] == [0, 1, 2, 3, 4]  # the raw table of the same topic
    assert world.columns(RAW) == {}
    assert [(r["offset"], r["error_kind"]) for r in world.rows(DLQ)] == [(3, "unrouted")]
    # Each template table's columns are recorded for the next plan.
    recorded = world.recorded()
    for table in (CLICKS, ORDERS):
        known = recorded.table(table)
        assert known is not None
        assert [c.name for c in known.columns or ()] == list(world.columns(table))

    # A later order adds a field: the orders table evolves in the commit of its files; clicks, which
    # gets rows in the same run, keeps its schema.
    clicks_schema = world.catalog.load_table(CLICKS).metadata.current_schema_id
    orders_versions = world.versions(ORDERS)
    world.put([order(5, coupon="PIZZA10"), click(6), order(7, total="free")])
    second = world.run_once()
    assert [r.records for r in second.runs] == [6]  # 3 routed rows and 3 raw ones
    assert list(world.columns(ORDERS))[-1] == "coupon"
    assert world.versions(ORDERS) == orders_versions + 1  # new column and rows: one commit
    orders = world.catalog.load_table(ORDERS)
    assert orders.current_snapshot().schema_id == orders.metadata.current_schema_id
    assert world.columns(CLICKS) == {"type": "string", "page": "string", "ms": "long"}
    assert world.catalog.load_table(CLICKS).metadata.current_schema_id == clicks_schema
    assert [r["offset"] for r in world.rows(CLICKS)] == [0, 2, 6]
    rows = world.rows(ORDERS)
    assert [(r["offset"], r["coupon"], r["total"]) for r in rows] == [
        (1, None, 9.5),
        (4, None, 9.5),
        (5, "PIZZA10", 9.5),
        (7, None, None),  # a string in the double column: counted for its table, the record kept
    ]
    assembly = Assembly(world.config, owner_id="test")
    assert assembly.tables.conversion_failures(ORDERS, TOPIC) == {"total": 1}
    assert not assembly.tables.conversion_failures(CLICKS, TOPIC)


def test_a_column_added_to_one_routed_table_behind_the_launchers_back_costs_one_run_replanned(
    world: World,
) -> None:
    world.put([click(0), order(1)])
    world.run_once()
    with world.catalog.load_table(ORDERS).update_schema() as update:
        update.add_column("added_elsewhere", StringType())
    snapshots = {t: len(world.catalog.load_table(t).metadata.snapshots) for t in (CLICKS, ORDERS, RAW)}

    world.put([click(2, ref="ad"), order(3, tip=1.5)])
    summary = world.run_once()
    assert [r.end for r in summary.runs] == [RunEnd.ABORTED, RunEnd.COMMITTED]
    assert "field ids differ" in (summary.runs[0].reason or "")
    # Refused before any table was written: every table got exactly one commit, the re-planned run's
    # (the clicks table, committed before the orders table, was not written by the refused run).
    assert {t: len(world.catalog.load_table(t).metadata.snapshots) for t in snapshots} == {
        t: n + 1 for t, n in snapshots.items()
    }
    tables = Assembly(world.config, owner_id="test").tables
    assert {tables.read_state(t, TOPIC).marker.run_id for t in snapshots} == {summary.runs[1].run_id}
    assert [(r["offset"], r.get("tip")) for r in world.rows(ORDERS)] == [(1, None), (3, 1.5)]
    assert [(r["offset"], r["ref"]) for r in world.rows(CLICKS)] == [(0, None), (2, "ad")]
    assert list(world.columns(ORDERS))[-2:] == ["added_elsewhere", "tip"]
    assert [r["offset"] for r in world.rows(RAW)] == [0, 1, 2, 3]
