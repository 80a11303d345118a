"""Fault injection on the one-machine pipeline: a process dying between every pair of steps of a run.

Real parts throughout: moto server (S3), a pyiceberg SQLite catalog, local Spark, and both checkpoint
stores (a real etcd server, and the SQLite store). A crash is injected by wrapping a real adapter
(the table committer, the checkpoint store or the job runner, `tests/support/dying.py`): at the
named point it raises `ProcessDied`, which no product code catches, so the "process" stops right
there with whatever it had written. A fresh process (a new `Assembly` with another owner id) then
starts, with or without new segments, and every test ends by comparing the table, the dead-letter
table, the checkpoint store and the produced records exactly. (The real-SIGKILL counterparts are in
`tests/test_faults_sigkill.py`.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.local.pipeline import Pipeline, RunEnd
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from kafscale_iceberg.segments.keys import format_segment_key
from tests.support.config_documents import local_document
from tests.support.dying import (
    DyingCheckpoints,
    DyingRunner,
    DyingTables,
    Point,
    ProcessDied,
    expire_dead_lease,
)
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import order_value, put_segment

pytestmark = pytest.mark.slow

NAMESPACE, TOPIC, TABLE, DLQ = "prod", "orders", "shop.orders", "shop.orders__dlq"
BAD = b"not json"


class World:
    """A bucket, a checkpoint store (etcd or SQLite), a SQLite catalog, a local runner; what was produced."""

    def __init__(
        self,
        moto: MotoEndpoint,
        tmp_path: Path,
        *,
        etcd_url: str | None = None,
        endpoint: str | None = None,
        lease_ttl_seconds: int = 60,
        **sections: Mapping[str, Any],
    ) -> None:
        """`etcd_url`: the checkpoint store's etcd (None: the SQLite store); `endpoint`: S3 as the
        product sees it (a proxy in front of moto for outages), moto itself by default;
        `lease_ttl_seconds`: long, so every step between two renewals (planning, a commit) fits in
        it on a loaded machine; a lease a dead process left is expired by `expire_dead_lease`, not
        waited for; `sections`: config sections merged over the world's."""
        self.s3: Any = moto.client("s3")
        self.bucket = moto.new_bucket()
        self.config: KafscaleConfig = config_from_mapping(
            local_document(
                tmp_path,
                moto,
                bucket=self.bucket,
                namespace=NAMESPACE,
                etcd_url=etcd_url,
                endpoint=endpoint,
                offsets={"lease_ttl_seconds": lease_ttl_seconds},
                runs={"retry_backoff_seconds": 0},
                processor={"poll_interval_seconds": 1},
                mappings=[
                    {
                        "topic": TOPIC,
                        "table": TABLE,
                        "create_table_if_missing": True,
                        "schema": {
                            "columns": [
                                {"name": "order_id", "type": "long", "required": True},
                                {"name": "store_id", "type": "string"},
                            ]
                        },
                    }
                ],
                **sections,
            ),
            source="test",
        )
        self.produced: dict[int, list[bytes]] = {}
        self.runner: LocalSparkJobRunner | None = None

    def put(self, partition: int, count: int, *, bad_at: int | None = None) -> None:
        """Produce `count` records after the partition's last; the one at `bad_at` is invalid JSON."""
        values = self.produced.setdefault(partition, [])
        base = len(values)
        new = [
            BAD if offset == bad_at else order_value(offset, partition)
            for offset in range(base, base + count)
        ]
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, partition, base, count, values=new, batch_size=5)
        values.extend(new)

    def process(self, point: str | None = None, **options: Any) -> Pipeline:
        """A fresh process (its own owner id and adapters), dying at `point` if given."""
        assembly = Assembly(self.config, owner_id=f"process-{uuid4().hex[:6]}")
        if self.runner is None:
            self.runner = LocalSparkJobRunner(master="local[2]", s3=assembly.s3_settings)
        runner: Any = self.runner
        if point is not None:
            # cached_property: the instance's dict wins, so every service gets the dying adapter.
            assembly.__dict__["tables"] = DyingTables(assembly.tables, point, table=TABLE, dead_letters=DLQ)
            assembly.__dict__["checkpoints"] = DyingCheckpoints(assembly.checkpoints, point)
            runner = DyingRunner(self.runner, point)
        return Pipeline(
            assembly, runner, **{"watch_interval_s": 0.1, "outage_backoff_s": (0.2, 1.0), **options}
        )

    def expire_dead_lease(self) -> None:
        """The lease a dead process left runs out now (`tests/support/dying.py`)."""
        expire_dead_lease(self.config, TOPIC)

    def check_exactly_once(self) -> None:
        """Table, dead-letter table, checkpoint store and lease: exactly what was produced, once."""
        assembly = Assembly(self.config, owner_id="checker")
        catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        rows = catalog.load_table(TABLE).scan().to_arrow().to_pylist()
        got = sorted((r["partition"], r["offset"], r["order_id"]) for r in rows)
        want = sorted(
            (p, o, json.loads(v)["order_id"])
            for p, vs in self.produced.items()
            for o, v in enumerate(vs)
            if v != BAD
        )
        assert got == want
        bad = sorted((p, o) for p, vs in self.produced.items() for o, v in enumerate(vs) if v == BAD)
        if bad:
            dead = catalog.load_table(DLQ).scan().to_arrow().to_pylist()
            assert sorted((r["partition"], r["offset"]) for r in dead) == bad
        self.check_offsets_and_lease(assembly, TABLE)

    def check_offsets_and_lease(self, assembly: Assembly, anchor: str) -> None:
        """The checkpoint store and `anchor`'s marker both at the last produced offsets, agreeing; no
        lease held."""
        last = {p: len(vs) - 1 for p, vs in self.produced.items()}
        stored = assembly.checkpoints.load_committed_offsets(TOPIC)
        assert {p: stored.offset(p) for p in last} == last
        table = assembly.commits.reconciled_offsets(TOPIC, anchor)
        assert table.from_table
        assert {p: table.offset(p) for p in last} == last
        assert (dict(table.store_behind), dict(table.store_ahead)) == ({}, {})
        assert assembly.checkpoints.read_lease_holder(TOPIC) is None


@pytest.fixture(params=["etcd", "sqlite"])
def world(
    request: pytest.FixtureRequest, moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession
) -> World:
    """Each test runs on both checkpoint stores: a real etcd server, then the SQLite store."""
    if request.param == "etcd":
        etcd: EtcdServer = request.getfixturevalue("etcd_server")
        return World(moto_server, tmp_path, etcd_url=etcd.url)
    return World(moto_server, tmp_path)


def _die(world: World, point: str) -> None:
    """A process dies at `point`; whatever lease it held then expires."""
    with pytest.raises(ProcessDied):
        world.process(point).run_once()
    world.expire_dead_lease()


@pytest.mark.parametrize("new_segments", [False, True], ids=["same-segments", "new-segments"])
def test_a_crash_between_the_table_commit_and_the_offset_write_heals_without_a_person(
    world: World, new_segments: bool
) -> None:
    """Issue 12 §1: the table has the run, the store does not; later plans start from the store's
    older offsets. The refusal (or the launcher) repairs the store from the table and the topic flows."""
    world.put(0, 20)
    world.put(1, 10)
    _die(world, Point.AFTER_TABLE_COMMIT)
    behind = Assembly(world.config, owner_id="look").checkpoints.load_committed_offsets(TOPIC)
    assert behind.offset(0) == -1  # the store never got the run's offsets
    if new_segments:
        world.put(0, 15)
        world.put(1, 5)
    summary = world.process().run_once()
    assert summary.ok, summary.failed
    # The launcher repaired the store from the table under the lease: no wasted run at all.
    assert [(r.end, r.records) for r in summary.runs] == ([(RunEnd.COMMITTED, 20)] if new_segments else [])
    world.check_exactly_once()
    world.put(0, 5)  # and it keeps flowing
    assert world.process().run_once().ok
    world.check_exactly_once()


def test_a_stale_plan_refused_at_commit_repairs_the_store_and_is_replanned_at_once(world: World) -> None:
    """The commit-step path (the AWS launcher cannot read the table): a plan made from a store behind
    the table is refused once, the store is repaired under the run's lease, and the re-plan commits."""
    world.put(0, 20)
    _die(world, Point.AFTER_TABLE_COMMIT)
    world.put(0, 10)
    pipeline = world.process()
    pipeline.launcher._repair_from_table = None  # as on AWS: plans come from the store alone
    summary = pipeline.run_once()
    assert summary.ok, summary.failed
    refused, committed = summary.runs
    assert refused.replan
    assert "repaired to the table's offsets" in refused.reason
    assert (committed.end, committed.records) == (RunEnd.COMMITTED, 10)
    world.check_exactly_once()


@pytest.mark.parametrize(
    "point",
    [
        Point.BEFORE_JOB,
        Point.AFTER_JOB_START,
        Point.BEFORE_TABLE_COMMIT,
        Point.AFTER_DEAD_LETTER_COMMIT,
        Point.AFTER_TABLE_COMMIT,
        Point.AFTER_OFFSETS,
        Point.AFTER_RELEASE,
    ],
)
def test_a_crash_between_any_two_steps_loses_and_duplicates_nothing(world: World, point: str) -> None:
    world.put(0, 12, bad_at=3)
    world.put(1, 8)
    _die(world, point)
    world.put(0, 6, bad_at=15)
    summary = world.process().run_once()
    assert summary.ok, summary.failed
    world.check_exactly_once()


def test_a_corrupt_segment_with_policy_fail_holds_back_only_its_partition(world: World) -> None:
    """Issue 12 §4: with `fail`, one corrupt segment held back the topic's healthy partitions (the docs
    say "the partition waits"). The failed run holds its partition; the next run takes the others."""
    runs = world.config.runs.model_copy(update={"retry_backoff_seconds": 60})
    world.config = world.config.model_copy(update={"runs": runs})
    world.put(0, 10)
    world.put(1, 8)
    files = put_segment(world.s3, world.bucket, NAMESPACE, TOPIC, 0, 10, 5)
    damaged = bytearray(files.kfs)
    damaged[len(damaged) // 2] ^= 0xFF
    key = format_segment_key(NAMESPACE, TOPIC, 0, 10)
    world.s3.put_object(Bucket=world.bucket, Key=key, Body=bytes(damaged))
    summary = world.process().run_once()
    assert not summary.ok
    assert key in summary.failed[TOPIC]
    assert [r.end for r in summary.runs] == [RunEnd.ABORTED, RunEnd.COMMITTED]
    assert summary.runs[1].offsets == {1: 7}
    stored = Assembly(world.config, owner_id="look").checkpoints.load_committed_offsets(TOPIC)
    assert (stored.offset(0), stored.offset(1)) == (-1, 7)
    catalog = load_iceberg_catalog(CatalogSettings.from_config(world.config))
    rows = catalog.load_table(TABLE).scan().to_arrow().to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(1, o) for o in range(8)]
