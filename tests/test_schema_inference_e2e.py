"""The seed article's pizza events through `run --once` with `schema.source: infer`: the table is
created from the first run's records, and a later event with new fields evolves it in the same
Iceberg commit as its data.

Real parts: moto server (S3), a real etcd, a SQLite catalog with a file warehouse and the local Spark
runner (the session-wide SparkSession), driven by the one-machine `Pipeline` as `run --once` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.types import StringType
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import table_columns
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.local.pipeline import Pipeline, RunEnd
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

NAMESPACE = "prod"
TOPIC = "completed-pizzas"
TABLE = "rpc.pizzas"


def pizza(offset: int, **more: Any) -> bytes:
    """The article's event, with the toppings as arrays (as the pizza services produce them)."""
    return json.dumps(
        {
            "order_id": f"af69865f-61a7-4e39-824e-{offset:012d}",
            "store_id": 42 + offset % 3,
            "sauce": "extra",
            "cheese": "three cheese",
            "meats": ["ham", "salami"][: 1 + offset % 2],
            "veggies": [] if offset % 2 else ["onions", "pineapple"],
            "date_ordered": "2024-01-04 12:28:13",
            "coupon": None,
            **more,
        }
    ).encode()


class World:
    """A bucket, etcd, a SQLite catalog, and the one-machine pipeline with a warm local runner."""

    def __init__(self, moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path) -> None:
        self.s3: Any = moto_server.client("s3")
        self.bucket = bucket = moto_server.new_bucket()
        config = config_from_mapping(
            local_document(
                tmp_path,
                moto_server,
                bucket=bucket,
                namespace=NAMESPACE,
                etcd_url=etcd_server.url,
                offsets={"lease_ttl_seconds": 30},
                runs={"retry_backoff_seconds": 0},
                mappings=[
                    {
                        "topic": TOPIC,
                        "table": TABLE,
                        "create_table_if_missing": True,
                        "schema": {"source": "infer", "allow_type_widening": True},
                    }
                ],
            ),
            source="test",
        )
        self.assembly = Assembly(config, owner_id="test-pipeline")
        runner = LocalSparkJobRunner(master="local[2]", s3=self.assembly.s3_settings)
        self.pipeline = Pipeline(self.assembly, runner, watch_interval_s=0.1)
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(config))

    def put(self, base: int, values: list[bytes]) -> None:
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, 0, base, len(values), values=values)


@pytest.fixture
def world(moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path, spark: SparkSession) -> World:
    return World(moto_server, etcd_server, tmp_path)


@pytest.mark.slow
def test_pizza_events_create_an_inferred_table_that_evolves_with_its_data(
    world: World, spark: SparkSession
) -> None:
    pipeline, catalog, assembly = world.pipeline, world.catalog, world.assembly
    world.put(0, [pizza(o) for o in range(6)])
    first = pipeline.run_once()
    assert first.ok, first.failed
    assert [r.end for r in first.runs] == [RunEnd.COMMITTED]

    table = catalog.load_table(TABLE)
    # Strings stay strings (`date_ordered` too); `coupon`, always null so far, waits.
    assert {c.name: c.type_name for c in table_columns(table.schema())} == {
        "order_id": "string",
        "store_id": "long",
        "sauce": "string",
        "cheese": "string",
        "meats": "list<string>",
        "veggies": "list<string>",
        "date_ordered": "string",
    }
    versions = len(table.metadata.metadata_log)

    later = [
        pizza(6, coupon="PIZZA10", delivery={"driver": "Sam", "minutes": 25}, tip=2),
        pizza(7, tip=3.5, store_id="forty-two"),
    ]
    world.put(6, later)
    second = pipeline.run_once()
    assert second.ok, second.failed
    assert [r.records for r in second.runs] == [2]
    committed = second.runs[0].commit
    assert committed is not None
    assert committed.result.timings.task_observe_s > 0  # the observation stage ran, and is timed

    table = catalog.load_table(TABLE)
    columns = {c.name: c.type_name for c in table_columns(table.schema())}
    assert list(columns)[-3:] == ["coupon", "delivery", "tip"]
    assert (columns["coupon"], columns["delivery"], columns["tip"]) == (
        "string",
        "struct<driver: string, minutes: long>",
        "double",  # integers and other numbers in a new field, with allow_type_widening
    )
    assert len(table.metadata.metadata_log) == versions + 1  # the new columns and the rows: one commit
    assert table.current_snapshot().schema_id == table.metadata.current_schema_id

    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert len(rows) == 8
    assert rows[0]["meats"] == ["ham"]
    assert rows[0]["veggies"] == ["onions", "pineapple"]
    assert rows[1]["veggies"] == []
    assert all(r["coupon"] is None and r["tip"] is None for r in rows[:6])
    assert (rows[6]["coupon"], rows[6]["delivery"], rows[6]["tip"]) == (
        "PIZZA10",
        {"driver": "Sam", "minutes": 25},
        2.0,
    )
    # A string in the long column: counted, the record kept, its bytes in `value`.
    assert rows[7]["store_id"] is None
    assert json.loads(rows[7]["value"])["store_id"] == "forty-two"
    failures = assembly.tables.conversion_failures(TABLE, TOPIC)
    assert failures == {"store_id": 1}
    # A field new inside the struct column: the struct gains it, again in the commit of its row.
    versions = len(table.metadata.metadata_log)
    world.put(8, [pizza(8, delivery={"driver": "Jo", "minutes": 12, "rating": 5})])
    assert [r.records for r in pipeline.run_once().runs] == [1]
    table = catalog.load_table(TABLE)
    assert len(table.metadata.metadata_log) == versions + 1
    delivery = {c.name: c.type_name for c in table_columns(table.schema())}["delivery"]
    assert delivery == "struct<driver: string, minutes: long, rating: long>"
    newest = max(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert newest["delivery"] == {"driver": "Jo", "minutes": 12, "rating": 5}

    # Spark reads the data files too (no Iceberg Spark runtime installs here: the Parquet files
    # themselves, the two runs' schemas merged).
    paths = [t.file.file_path for t in table.scan().plan_files()]
    frame = spark.read.option("mergeSchema", "true").parquet(*paths)
    tips = sorted((r["offset"], r["tip"], r["delivery"]) for r in frame.collect() if r["offset"] in (6, 7))
    assert [(o, t) for o, t, _ in tips] == [(6, 2.0), (7, 3.5)]
    assert tips[0][2].asDict() == {"driver": "Sam", "minutes": 25, "rating": None}


@pytest.mark.slow
def test_a_column_added_behind_the_launchers_back_costs_one_run_replanned_at_once(
    world: World,
) -> None:
    world.put(0, [pizza(0)])
    assert world.pipeline.run_once().ok
    # Another writer adds a column: the next plan's guess for a new field's id is the one it took.
    with world.catalog.load_table(TABLE).update_schema() as update:
        update.add_column("added_elsewhere", StringType())
    world.put(1, [pizza(1, tip=1.5)])
    summary = world.pipeline.run_once()
    assert summary.ok, summary.failed
    assert [r.end for r in summary.runs] == [RunEnd.ABORTED, RunEnd.COMMITTED]
    assert "field ids differ" in (summary.runs[0].reason or "")
    rows = sorted(world.catalog.load_table(TABLE).scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [r["tip"] for r in rows] == [None, 1.5]
