"""The whole flow on one machine: router → launcher → run steps → commit, with local Spark.

Real parts throughout: moto server (S3 with a bucket notification to SQS), a real etcd (leases and
offsets), a pyiceberg SQL catalog on SQLite with a file warehouse, and the local Spark runner (the
session-wide SparkSession, kept warm). Tables are checked row by row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import NoSuchTableError
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.domain.field_ids import TopicFieldIds, field_ids_uri
from kafscale_iceberg.local.embedded import notified_bucket
from kafscale_iceberg.local.pipeline import Pipeline, RunEnd
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key
from kafscale_iceberg.segments.layout import Codec
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import order_value, put_segment

NAMESPACE = "prod"
TOPIC = "orders"


class World:
    """A bucket (optionally notifying a queue), etcd, a SQLite catalog and a warm local runner."""

    def __init__(
        self,
        moto: MotoEndpoint,
        etcd: EtcdServer,
        tmp_path: Path,
        *,
        notifications: bool = False,
        **runs: Any,
    ) -> None:
        self.moto = moto
        self.s3: Any = moto.client("s3")
        notify: dict[str, str] = {}
        if notifications:
            self.bucket = f"test-{uuid4().hex[:12]}"
            notify["queue_url"] = notified_bucket(moto.url, moto.region, self.bucket, f"events-{self.bucket}")
        else:
            self.bucket = moto.new_bucket()
        self.config: KafscaleConfig = config_from_mapping(
            local_document(
                tmp_path,
                moto,
                bucket=self.bucket,
                namespace=NAMESPACE,
                etcd_url=etcd.url,
                offsets={"lease_ttl_seconds": 30},
                notifications=notify,
                processor={"poll_interval_seconds": 1},
                runs={"retry_backoff_seconds": 0, **runs},
                mappings=[
                    {
                        "topic": TOPIC,
                        "table": "shop.orders",
                        "create_table_if_missing": True,
                        "schema": {
                            "columns": [
                                {"name": "order_id", "type": "long", "required": True},
                                {"name": "store_id", "type": "string"},
                                {"name": "total", "type": "double"},
                            ]
                        },
                    }
                ],
            ),
            source="test",
        )
        self.assembly = Assembly(self.config, owner_id="test-pipeline")
        self.runner = LocalSparkJobRunner(master="local[2]", s3=self.assembly.s3_settings)
        self.pipeline = Pipeline(self.assembly, self.runner, watch_interval_s=0.1)

    def put(self, partition: int, base: int, count: int, **options: Any) -> None:
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, partition, base, count, **options)

    def rows(self, table: str = "shop.orders") -> list[dict[str, Any]]:
        loaded = load_iceberg_catalog(CatalogSettings.from_config(self.config)).load_table(table)
        return sorted(loaded.scan().to_arrow().to_pylist(), key=lambda r: (r["partition"], r["offset"]))


@pytest.fixture
def world(moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path, spark: SparkSession) -> World:
    return World(moto_server, etcd_server, tmp_path)


def _expected(partition: int, offsets: range) -> list[tuple[int, int, int, str, float]]:
    rows = []
    for offset in offsets:
        value = json.loads(order_value(offset, partition))
        rows.append((partition, offset, value["order_id"], value["store_id"], value["total"]))
    return rows


def _actual(rows: list[dict[str, Any]]) -> list[tuple[int, int, int, str, float]]:
    return [(r["partition"], r["offset"], r["order_id"], r["store_id"], r["total"]) for r in rows]


def test_run_once_commits_every_record_exactly_once(world: World) -> None:
    world.put(0, 0, 30, codec=Codec.GZIP)
    world.put(0, 30, 20, codec=Codec.ZSTD)
    world.put(1, 0, 25, codec=Codec.SNAPPY)
    summary = world.pipeline.run_once()
    assert summary.ok, summary.failed
    assert [r.end for r in summary.runs] == [RunEnd.COMMITTED]
    assert _actual(world.rows()) == _expected(0, range(50)) + _expected(1, range(25))
    offsets = world.assembly.checkpoints.load_committed_offsets(TOPIC)
    assert (offsets.offset(0), offsets.offset(1)) == (49, 24)
    assert world.assembly.checkpoints.read_lease_holder(TOPIC) is None

    again = world.pipeline.run_once()
    assert again.ok
    assert again.runs == []
    world.put(0, 50, 10, codec=Codec.LZ4)
    third = world.pipeline.run_once()
    assert [r.records for r in third.runs] == [10]
    assert _actual(world.rows()) == _expected(0, range(60)) + _expected(1, range(25))
    # Every data file carries the table's field ids; the commit step recorded them for the launcher.
    table = load_iceberg_catalog(CatalogSettings.from_config(world.config)).load_table("shop.orders")
    ids = {f.name: f.field_id for f in table.schema().fields}
    for task in table.scan().plan_files():
        schema = pq.read_schema(task.file.file_path.removeprefix("file://"))
        assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in schema} == ids
    recorded = TopicFieldIds.model_validate_json(
        world.assembly.documents.read_text(field_ids_uri(world.config.runs.location, TOPIC))
    )
    assert recorded.table("shop.orders") is not None


def test_a_corrupt_segment_fails_the_topic_and_loses_nothing_after_it(world: World) -> None:
    world.put(0, 0, 10)
    world.put(0, 10, 10)
    world.put(0, 20, 10)
    key = format_segment_key(NAMESPACE, TOPIC, 0, 10)
    body = bytearray(world.s3.get_object(Bucket=world.bucket, Key=key)["Body"].read())
    body[100] ^= 0xFF  # inside the first batch: its CRC no longer matches
    world.s3.put_object(Bucket=world.bucket, Key=key, Body=bytes(body))

    summary = world.pipeline.run_once()
    assert not summary.ok
    assert "segment-00000000000000000010.kfs" in summary.failed[TOPIC]
    with pytest.raises(NoSuchTableError):
        world.rows()  # the run failed as a whole: nothing committed, nothing skipped
    assert world.assembly.checkpoints.load_committed_offsets(TOPIC).offset(0) == -1

    # Repaired (the broker's copy re-uploaded): the next pass takes every record, once.
    world.put(0, 10, 10)
    assert world.pipeline.run_once().ok
    assert _actual(world.rows()) == _expected(0, range(30))


def test_quarantine_policy_skips_the_segment_and_records_the_range(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path, spark: SparkSession
) -> None:
    world = World(moto_server, etcd_server, tmp_path, corrupt_segment_policy="quarantine")
    world.put(0, 0, 10)
    world.put(0, 10, 10)
    key = format_segment_key(NAMESPACE, TOPIC, 0, 0)
    body = bytearray(world.s3.get_object(Bucket=world.bucket, Key=key)["Body"].read())
    body[100] ^= 0xFF
    world.s3.put_object(Bucket=world.bucket, Key=key, Body=bytes(body))
    summary = world.pipeline.run_once()
    assert summary.ok, summary.failed
    assert summary.runs[0].quarantined == 1
    assert _actual(world.rows()) == _expected(0, range(10, 20))
    quarantined = world.assembly.tables.read_state("shop.orders", TOPIC).marker.quarantined
    assert [(q.first_offset, q.last_offset, q.segment_key) for q in quarantined] == [(0, 9, key)]


def test_notifications_drive_ingestion_with_duplicates_and_a_missing_index(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path, spark: SparkSession
) -> None:
    world = World(moto_server, etcd_server, tmp_path, notifications=True)
    world.put(0, 0, 10)
    world.put(0, 10, 10)
    world.put(0, 10, 10)  # the same segment written twice: two notifications, one segment
    index_key = format_segment_key(NAMESPACE, TOPIC, 0, 20, SegmentObjectKind.INDEX)
    world.put(0, 20, 10)
    world.s3.delete_object(Bucket=world.bucket, Key=index_key)  # its .index hasn't landed yet

    def until_committed(offset: int) -> None:
        pipeline = world.pipeline
        import threading

        thread = threading.Thread(target=pipeline.run_forever)
        thread.start()
        try:
            for _ in range(600):
                if world.assembly.checkpoints.load_committed_offsets(TOPIC).offset(0) >= offset:
                    return
                pipeline.stopping.wait(0.1)
            raise AssertionError(f"offset {offset} not committed in time")
        finally:
            pipeline.stop()
            thread.join(timeout=60)

    until_committed(19)
    assert _actual(world.rows()) == _expected(0, range(20))
    world.pipeline.stopping.clear()
    world.put(0, 20, 10)  # the .index arrives (with the .kfs again)
    until_committed(29)
    assert _actual(world.rows()) == _expected(0, range(30))


def test_the_spark_submit_runner_runs_the_same_entry_point(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path, spark: SparkSession
) -> None:
    world = World(moto_server, etcd_server, tmp_path)
    world.runner = LocalSparkJobRunner(
        master="local[1]", keep_session_warm=False, s3=world.assembly.s3_settings
    )
    world.pipeline = Pipeline(world.assembly, world.runner, watch_interval_s=0.2)
    command = world.runner.submit_command("file:///p.json")
    assert command[0].endswith("spark-submit")
    assert command[command.index("--plan") - 1].endswith("spark_app/main.py")
    world.put(0, 0, 20, codec=Codec.GZIP)
    summary = world.pipeline.run_once()
    assert summary.ok, summary.failed
    assert _actual(world.rows()) == _expected(0, range(20))
