"""Fault injection for a topic written to several tables: a crash after each table's commit, before
the anchor's, after the anchor's, after the offsets - every record lands once in its table.

The topic `orders` has two mappings: one routed by `store_id` (`store-0` -> `shop.orders_s0`,
`store-1` -> `shop.orders_s1`, anything else -> `shop.orders`, the default table and the topic's
anchor) and a raw one (`shop.orders_raw`, no columns). A run commits, in order: the dead-letter table
(when it has rows), `shop.orders_s0`, `shop.orders_s1`, `shop.orders_raw`, then the anchor
`shop.orders`, then the offsets. Same real parts and crash mechanism as `tests/test_faults.py`
(moto S3, SQLite catalog, local Spark, both checkpoint stores).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.commands.run import print_summary
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.commits import TableCommit, TableState
from kafscale_iceberg.local.pipeline import Pipeline
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from kafscale_iceberg.services.status import StatusService
from tests.support.dying import DyingCheckpoints, DyingRunner, Point, ProcessDied
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.test_faults import BAD, TOPIC, World

pytestmark = pytest.mark.slow

ANCHOR, S0, S1, RAW, DLQ = (
    "shop.orders",
    "shop.orders_s0",
    "shop.orders_s1",
    "shop.orders_raw",
    "shop.orders__dlq",
)
ROUTES = {"store-0": S0, "store-1": S1}


def after(table: str) -> str:
    return f"after the commit to {table}"


class DyingAt:
    """The real table committer; the process dies before any commit, or right after one to a table."""

    def __init__(self, inner: Any, point: str) -> None:
        self._inner, self._point = inner, point

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        if self._point == Point.BEFORE_TABLE_COMMIT:
            raise ProcessDied(self._point)
        done = self._inner.commit(expected, commit)
        if self._point == after(expected.table):
            raise ProcessDied(self._point)
        return done


class RoutedWorld(World):
    """`tests/test_faults.World` with the topic routed to three tables and a raw mapping beside it."""

    def __init__(self, moto: MotoEndpoint, tmp_path: Path, *, etcd_url: str | None = None) -> None:
        super().__init__(moto, tmp_path, etcd_url=etcd_url)
        document = self.config.model_dump(by_alias=True, exclude_unset=True)
        mapping = document["mappings"][0]
        del mapping["table"]
        mapping["route"] = {"field": "store_id", "tables": ROUTES, "default_table": ANCHOR}
        document["mappings"] = [
            mapping,
            {"topic": TOPIC, "table": RAW, "create_table_if_missing": True},
        ]
        self.config = config_from_mapping(document, source="test")

    def process(self, point: str | None = None, **options: Any) -> Pipeline:
        assembly = Assembly(self.config, owner_id=f"process-{uuid4().hex[:6]}")
        if self.runner is None:
            self.runner = LocalSparkJobRunner(master="local[2]", s3=assembly.s3_settings)
        runner: Any = self.runner
        if point is not None:
            assembly.__dict__["tables"] = DyingAt(assembly.tables, point)
            assembly.__dict__["checkpoints"] = DyingCheckpoints(assembly.checkpoints, point)
            runner = DyingRunner(self.runner, point)
        return Pipeline(assembly, runner, watch_interval_s=0.1, **options)

    def check_exactly_once(self) -> None:
        """Every table holds exactly its records once; the anchor and the store hold the offsets."""
        assembly = Assembly(self.config, owner_id="checker")
        catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))

        def rows(table: str) -> list[tuple[int, int]]:
            return sorted(
                (r["partition"], r["offset"]) for r in catalog.load_table(table).scan().to_arrow().to_pylist()
            )

        produced = [(p, o, v) for p, vs in self.produced.items() for o, v in enumerate(vs)]
        good = [(p, o, json.loads(v)["store_id"]) for p, o, v in produced if v != BAD]
        assert rows(S0) == sorted((p, o) for p, o, s in good if s == "store-0")
        assert rows(S1) == sorted((p, o) for p, o, s in good if s == "store-1")
        assert rows(ANCHOR) == sorted((p, o) for p, o, s in good if s not in ROUTES)
        assert rows(RAW) == sorted((p, o) for p, o, _ in produced)  # every record, invalid JSON too
        bad = sorted((p, o) for p, o, v in produced if v == BAD)
        if bad:
            assert rows(DLQ) == bad
        self.check_offsets_and_lease(assembly, ANCHOR)


@pytest.fixture(params=["etcd", "sqlite"])
def world(
    request: pytest.FixtureRequest, moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession
) -> RoutedWorld:
    if request.param == "etcd":
        etcd: EtcdServer = request.getfixturevalue("etcd_server")
        return RoutedWorld(moto_server, tmp_path, etcd_url=etcd.url)
    return RoutedWorld(moto_server, tmp_path)


@pytest.mark.parametrize(
    "point",
    [
        Point.BEFORE_TABLE_COMMIT,
        after(DLQ),
        after(S0),
        after(S1),
        after(RAW),
        after(ANCHOR),
        Point.AFTER_OFFSETS,
    ],
)
@pytest.mark.parametrize("new_segments", [False, True], ids=["retry", "abandoned"])
def test_a_crash_between_table_commits_loses_and_duplicates_nothing(
    world: RoutedWorld, point: str, new_segments: bool
) -> None:
    """`retry`: the same segments are planned again (the committed tables verify COMMITTED and are
    skipped); `abandoned`: new segments make a different run, which meets the first run's commits and
    finishes it from its own plan and result first (the stranded-run path)."""
    world.put(0, 12, bad_at=3)
    world.put(1, 8)
    with pytest.raises(ProcessDied):
        world.process(point).run_once()
    world.expire_dead_lease()  # as etcd would once the dead process's TTL passed
    stopped_at = next((t for t in (DLQ, S0, S1, RAW) if point == after(t)), None)
    if stopped_at is not None:  # `status` shows the table ahead of the anchor, and why
        look = Assembly(world.config, owner_id="look")
        report = StatusService(world.config, look.checkpoints, look.segments, look.tables, look.documents)
        (topic,) = report.report().topics
        assert {line.identifier: line.ahead_of_anchor for line in topic.tables}[stopped_at] == (0, 1)
    if new_segments:
        world.put(0, 6, bad_at=15)
    summary = world.process().run_once()
    assert summary.ok, summary.failed
    world.check_exactly_once()


def test_a_finished_stranded_run_is_told_as_a_recovery_naming_its_run_tables_and_records(
    world: RoutedWorld, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24, "Recovery an operator can read": the run that died after `shop.orders_s0`'s commit is
    finished by the next process (new segments make a different run); the log and `--once` say which
    run, which tables, how many records - and nothing of it reads as an error."""
    world.put(0, 12, bad_at=3)
    world.put(1, 8)
    with pytest.raises(ProcessDied):
        world.process(after(S0)).run_once()
    world.expire_dead_lease()
    catalog = load_iceberg_catalog(CatalogSettings.from_config(world.config))
    stranded = catalog.load_table(S0).properties[f"kafscale.run-id.{TOPIC}"]
    world.put(0, 6, bad_at=15)
    with caplog.at_level(logging.INFO, logger="kafscale_iceberg"):
        summary = world.process().run_once()
    assert summary.ok, summary.failed
    (finished,) = summary.finished
    # 19 valid records routed, 20 kept raw (a record counts once per mapping); DLQ and S0 were in.
    assert (finished.run_id, finished.tables, finished.records, finished.dead_letters) == (
        stranded,
        (S1, RAW, ANCHOR),
        39,
        1,
    )
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(stranded in m and f"{S1}, {RAW}, {ANCHOR}: 39 records" in m for m in told), told
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    alarming = ("error", "fail", "refus", "abort", "abandon")
    assert [m for m in told if any(word in m.lower() for word in alarming)] == []
    print_summary(summary)
    printed = capsys.readouterr().err
    assert "(1 of them left by an earlier crash and finished)" in printed
    assert f"{TOPIC}: finished run {stranded} (tables {S1}, {RAW}, {ANCHOR}: 39 records" in printed
    world.check_exactly_once()
