"""One topic into several tables on the one-machine pipeline (`run --once`), end to end: fixed routes
with a default table, a template route creating tables as values appear, both mappings of one topic;
`status` per table; an offset reset deleting the rows after the new offsets in every table (the
template's found in the catalog) and the re-ingestion landing every record once.

Real parts: moto S3, the SQLite checkpoint store, a pyiceberg SQLite catalog, local Spark.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.commands.status import render_status
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.field_ids import TopicFieldIds, field_ids_uri
from kafscale_iceberg.domain.replay import ReplayRequest
from kafscale_iceberg.local.pipeline import Pipeline
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from kafscale_iceberg.services.status import StatusService
from tests.support.config_documents import local_document
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

pytestmark = pytest.mark.slow

NAMESPACE, TOPIC = "prod", "orders"
ANCHOR, EU, DLQ = "shop.orders", "shop.orders_eu", "shop.orders__dlq"
REGIONS = ("eu", "us", "apac", "EU")  # "EU": no key matches (case matters), no valid template name
REGION_DLQ = "shop.region__dlq"


def value(offset: int) -> bytes:
    if offset == 4:
        return b"not json"
    return json.dumps({"order_id": offset, "region": REGIONS[offset % len(REGIONS)]}).encode()


class World:
    def __init__(self, moto: MotoEndpoint, tmp_path: Path, *, create: bool = True) -> None:
        self.s3: Any = moto.client("s3")
        self.bucket = moto.new_bucket()
        columns = [{"name": "order_id", "type": "long"}, {"name": "region", "type": "string"}]
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
                        "route": {"field": "region", "tables": {"eu": EU}, "default_table": ANCHOR},
                        "create_table_if_missing": create,
                        "schema": {"columns": columns},
                    },
                    {
                        "topic": TOPIC,
                        "route": {"field": "region", "table_template": "shop.region_{value}"},
                        "dead_letter_table": REGION_DLQ,
                        "schema": {"columns": columns},
                    },
                ],
            ),
            source="test",
        )
        self.produced: dict[int, int] = {}
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        self.runner: LocalSparkJobRunner | None = None

    def put(self, partition: int, count: int) -> None:
        base = self.produced.get(partition, 0)
        values = [value(o) for o in range(base, base + count)]
        put_segment(
            self.s3, self.bucket, NAMESPACE, TOPIC, partition, base, count, values=values, batch_size=4
        )
        self.produced[partition] = base + count

    def assembly(self) -> Assembly:
        return Assembly(self.config, owner_id="test")

    def run_once(self, *, ok: bool = True) -> dict[str, str]:
        assembly = self.assembly()
        if self.runner is None:
            self.runner = LocalSparkJobRunner(master="local[2]", s3=assembly.s3_settings)
        summary = Pipeline(assembly, self.runner, watch_interval_s=0.1).run_once()
        assert summary.ok == ok, summary.failed
        return dict(summary.failed)

    def rows(self, table: str) -> list[tuple[int, int]]:
        scanned = self.catalog.load_table(table).scan().to_arrow().to_pylist()
        return sorted((r["partition"], r["offset"]) for r in scanned)

    def check_exactly_once(self) -> None:
        records = [(p, o) for p, n in self.produced.items() for o in range(n)]

        def where(region: str | None) -> list[tuple[int, int]]:
            return sorted((p, o) for p, o in records if o != 4 and REGIONS[o % len(REGIONS)] == region)

        assert self.rows(EU) == where("eu")
        assert self.rows(ANCHOR) == sorted([*where("us"), *where("apac"), *where("EU")])
        assert self.rows(DLQ) == [(p, 4) for p, n in self.produced.items() if n > 4]
        assert self.rows("shop.region_eu") == where("eu")
        assert self.rows("shop.region_us") == where("us")
        assert self.rows("shop.region_apac") == where("apac")
        dead = self.catalog.load_table(REGION_DLQ).scan().to_arrow().to_pylist()
        assert Counter(r["error_kind"] for r in dead) == Counter(
            {"invalid_json": sum(n > 4 for n in self.produced.values()), "route_invalid": len(where("EU"))}
        )
        assert not self.catalog.table_exists("shop.region_EU")


@pytest.fixture
def world(moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession) -> World:
    return World(moto_server, tmp_path)


def test_routed_topic_end_to_end_with_status_and_a_reset_of_every_table(world: World) -> None:
    world.put(0, 14)
    world.put(1, 9)
    world.run_once()
    world.check_exactly_once()

    assembly = world.assembly()
    recorded = TopicFieldIds.model_validate_json(
        assembly.documents.read_text(field_ids_uri(world.config.runs.location, TOPIC))
    )
    # Every table's ids, a template's tables included: the next run writes them with these ids.
    assert {t.identifier for t in recorded.tables} == {
        ANCHOR,
        EU,
        DLQ,
        REGION_DLQ,
        "shop.region_eu",
        "shop.region_us",
        "shop.region_apac",
    }
    status = StatusService(
        world.config,
        assembly.checkpoints,
        assembly.segments,
        assembly.tables,
        assembly.documents,
        tables_of=assembly.tables_of,
    ).report()
    (topic,) = status.topics
    assert topic.table == ANCHOR
    lines = {line.identifier: line for line in topic.tables}
    assert set(lines) == {EU, DLQ, REGION_DLQ, "shop.region_eu", "shop.region_us", "shop.region_apac"}
    assert lines["shop.region_us"].offsets == {0: 13, 1: 8}
    assert lines[EU].last_run_id == topic.last_run_id
    text = render_status(status)
    assert f"orders -> {ANCHOR}" in text
    assert "also -> shop.region_us: offsets 0:13, 1:8" in text
    assert status.to_json()["topics"][0]["tables"]  # type: ignore[index]

    maintained = assembly.make_maintenance(None).maintain(topics=[TOPIC], dry_run=True)
    assert sorted(t.table for t in maintained.tables) == sorted(
        [ANCHOR, EU, DLQ, REGION_DLQ, "shop.region_eu", "shop.region_us", "shop.region_apac"]
    )  # every table once, a template's included

    outcome = assembly.replay.replay(
        ReplayRequest(topic=TOPIC, partitions=(0,), from_offset=6, reset_offsets=True)
    )
    assert outcome.reset_done
    assert "shop.region_us" in outcome.plan.tables
    assert world.rows("shop.region_us") == [(0, 1), (0, 5), (1, 1), (1, 5)]  # p0's 9 and 13 deleted
    assert max(o for p, o in world.rows(EU) if p == 0) <= 5

    world.put(0, 3)
    world.run_once()
    world.check_exactly_once()


def test_a_table_that_may_not_be_created_stops_the_run_before_any_table_is_written(
    moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession
) -> None:
    """The routed mapping's tables may not be created (`create_table_if_missing: false`); the template
    mapping's may. The commit refuses before its first commit, naming the table: no table gets a row
    (a partial commit would leave the topic to the stranded-run path with a confusing refusal)."""
    world = World(moto_server, tmp_path, create=False)
    world.put(0, 6)
    failed = world.run_once(ok=False)
    assert "shop.orders' does not exist" in failed[TOPIC]
    for table in (EU, ANCHOR, DLQ, REGION_DLQ, "shop.region_eu", "shop.region_us"):
        assert not world.catalog.table_exists(table)
