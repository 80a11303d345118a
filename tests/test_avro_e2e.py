"""Avro pizza records (Confluent wire format) through `run --once`: the table is created from the
records' schema, and records of a new schema version evolve it in the same Iceberg commit as their
rows; the registry asks for basic auth, which the runner gets from the config.

Real parts: moto server (S3), a real etcd, a SQLite catalog with a file warehouse, the local Spark
runner (the session-wide SparkSession) as `run` wires it, genuine wire bytes from confluent-kafka's
`AvroSerializer`. The schema registry is `tests/support/schema_registry.py`, a stand-in serving the
Confluent REST API over HTTP (no registry server installs here).
"""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import table_columns
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.local.pipeline import Pipeline, RunEnd
from kafscale_iceberg.local.wiring import make_runner
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.schema_registry import StandInRegistry
from tests.support.segments import put_segment
from tests.test_record_decoders import PIZZA_V1, PIZZA_V2, Producer, pizza

NAMESPACE = "prod"
TOPIC = "pizzas"
TABLE = "rpc.pizzas"


class World:
    """A bucket, etcd, a SQLite catalog, a registry asking for basic auth, and `run`'s pipeline."""

    def __init__(
        self, moto_server: MotoEndpoint, etcd_server: EtcdServer, registry: StandInRegistry, tmp_path: Path
    ) -> None:
        self.s3: Any = moto_server.client("s3")
        self.bucket = bucket = moto_server.new_bucket()
        registry.basic = ("reader", "s3cret")
        document = local_document(
            tmp_path,
            moto_server,
            bucket=bucket,
            namespace=NAMESPACE,
            etcd_url=etcd_server.url,
            offsets={"lease_ttl_seconds": 30},
            runs={"retry_backoff_seconds": 0},
            mappings=[
                {"topic": TOPIC, "table": TABLE, "create_table_if_missing": True, "value_format": "avro"}
            ],
        )
        document["schema_registry"] = {"url": registry.url, "username": "reader", "password": "s3cret"}
        config = config_from_mapping(document, source="test")
        self.assembly = Assembly(config, owner_id="test-pipeline")
        self.pipeline = Pipeline(self.assembly, make_runner(self.assembly), watch_interval_s=0.1)
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(config))
        self.producer = Producer(registry)

    def put(self, base: int, values: list[bytes]) -> None:
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, 0, base, len(values), values=values)


@pytest.fixture
def world(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    schema_registry: StandInRegistry,
    tmp_path: Path,
    spark: SparkSession,
) -> World:
    return World(moto_server, etcd_server, schema_registry, tmp_path)


@pytest.mark.slow
def test_avro_records_create_a_table_that_evolves_with_their_schema(world: World) -> None:
    world.put(0, world.producer.values(PIZZA_V1, [pizza(n) for n in range(4)]))
    first = world.pipeline.run_once()
    assert first.ok, first.failed
    assert [r.end for r in first.runs] == [RunEnd.COMMITTED]
    table = world.catalog.load_table(TABLE)
    columns = {c.name: c.type_name for c in table_columns(table.schema())}
    assert list(columns)[-5:] == ["id", "sauce", "price", "ordered", "toppings"]
    assert columns["id"] == "int"
    versions = len(table.metadata.metadata_log)

    world.put(4, world.producer.values(PIZZA_V2, [pizza(2**40, tip=2.5), pizza(5)]))
    second = world.pipeline.run_once()
    assert second.ok, second.failed
    assert [r.records for r in second.runs] == [2]

    table = world.catalog.load_table(TABLE)
    columns = {c.name: c.type_name for c in table_columns(table.schema())}
    assert (columns["id"], columns["tip"], columns["order_key"]) == ("long", "double", "uuid")
    assert len(table.metadata.metadata_log) == versions + 1  # schema change and rows: one commit
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["id"], r["tip"]) for r in rows] == [
        (0, None),
        (1, None),
        (2, None),
        (3, None),
        (2**40, 2.5),
        (5, None),
    ]
    assert {r["price"] for r in rows} == {decimal.Decimal("12.50")}
