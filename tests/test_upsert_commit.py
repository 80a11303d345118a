"""An upsert run committed on a real SQLite catalog: each key's last change wins, deletes remove rows,
only files holding a changed key are rewritten, and the run is one Iceberg commit carrying the offsets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.iceberg_maintenance import IcebergTableMaintainer
from kafscale_iceberg.domain.commits import TableCommit, TableState
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import PartitionField, PartitionTransform
from kafscale_iceberg.domain.upsert import (
    SUMMARY_UPSERT_DELETED,
    SUMMARY_UPSERT_FILES_REWRITTEN,
    SUMMARY_UPSERT_INSERTED,
    SUMMARY_UPSERT_UPDATED,
)
from kafscale_iceberg.exceptions import RunSupersededError, UpsertLocateStaleError
from kafscale_iceberg.local.pipeline import RunEnd, RunReport
from kafscale_iceberg.local.wiring import MetricsObserver
from kafscale_iceberg.metrics import record_commit, record_commit_failure
from kafscale_iceberg.metrics.definitions import Sample
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from tests.support.upsert_world import TABLE, UpsertWorld

DEAD_LETTERS = "prod.orders_dead_letters"


def row(key: int, name: str) -> tuple[object, object]:
    return {"id": key}, {"id": key, "name": name}


def summary(world: UpsertWorld) -> dict[str, str]:
    snapshot = world.catalog.load_table(TABLE).current_snapshot()
    assert snapshot is not None
    return dict(snapshot.summary.additional_properties)


def test_the_last_change_of_a_key_within_a_run_wins(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(1, "a"), row(2, "b"), row(1, "a2"), ({"id": 2}, None), row(3, "c")])
    world.run()
    assert world.names() == {1: "a2", 3: "c"}
    assert summary(world)[SUMMARY_UPSERT_INSERTED] == "2"


def test_a_later_run_replaces_and_deletes_rows_of_earlier_runs(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(k, f"v{k}") for k in range(10)])
    world.run()
    world.write(0, [row(3, "new3"), ({"id": 5}, None), row(11, "v11"), ({"id": 42}, None)])
    world.run()
    assert world.names() == {**{k: f"v{k}" for k in range(10) if k not in (3, 5)}, 3: "new3", 11: "v11"}
    assert {k: summary(world)[k] for k in (SUMMARY_UPSERT_INSERTED, SUMMARY_UPSERT_UPDATED)} == {
        SUMMARY_UPSERT_INSERTED: "1",
        SUMMARY_UPSERT_UPDATED: "1",
    }
    assert summary(world)[SUMMARY_UPSERT_DELETED] == "1"  # key 42 was never in the table


def test_a_row_carries_the_base_fields_of_the_record_that_wrote_it(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(1, "a")])
    world.run()
    world.write(0, [row(1, "b")])
    world.run()
    [written] = world.rows().to_pylist()
    assert (written["offset"], written["record_id"], written["name"]) == (1, "orders:0:1", "b")


def test_the_run_is_one_snapshot_carrying_its_offsets(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(k, "x") for k in range(5)])
    world.run()
    before = len(world.catalog.load_table(TABLE).snapshots())
    world.write(0, [row(2, "y")])
    outcome = world.run()
    table = world.catalog.load_table(TABLE)
    assert len(table.snapshots()) == before + 1
    assert table.properties["kafscale.offsets.orders"] == '{"0":5}'
    assert outcome.offsets == {0: 5}


def test_only_files_holding_a_changed_key_are_rewritten(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    for first in (0, 100, 200):  # three runs: three files of disjoint key ranges
        world.write(0, [row(k, "old") for k in range(first, first + 50)])
        world.run()
    files_before = {t.file.file_path for t in world.catalog.load_table(TABLE).scan().plan_files()}
    world.write(0, [row(120, "new")])
    world.run()
    files_after = {t.file.file_path for t in world.catalog.load_table(TABLE).scan().plan_files()}
    assert summary(world)[SUMMARY_UPSERT_FILES_REWRITTEN] == "1"
    assert len(files_before - files_after) == 1
    assert world.names()[120] == "new"
    assert len(world.by_key()) == 150


def test_the_keys_are_the_tables_identifier_fields(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(1, "a")])
    world.run()
    assert world.catalog.load_table(TABLE).schema().identifier_field_names() == {"id"}


def test_a_replayed_commit_of_a_committed_run_changes_nothing(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(1, "a"), row(2, "b")])
    world.run()
    world.write(0, [row(1, "c")])
    plan = world.plan()
    result = world.execute(plan)
    world.commit(plan, result)
    snapshots = len(world.catalog.load_table(TABLE).snapshots())
    outcome = world.commit(plan, result)
    assert not outcome.table_committed
    assert len(world.catalog.load_table(TABLE).snapshots()) == snapshots
    assert world.names() == {1: "c", 2: "b"}


def test_a_compaction_landing_between_the_run_and_its_commit_refuses_the_run_and_the_next_plan_lands(
    tmp_path: Path,
) -> None:
    world = UpsertWorld(tmp_path)
    for first in (0, 10):
        world.write(0, [row(k, "old") for k in range(first, first + 10)])
        world.run()
    world.write(0, [row(3, "new"), ({"id": 12}, None)])
    plan = world.plan()
    result = world.execute(plan)
    assert world.compact()  # took the files the run rewrote
    compacted = world.catalog.load_table(TABLE).current_snapshot()
    with pytest.raises(UpsertLocateStaleError, match="left the table"):
        world.commit(plan, result)
    assert world.catalog.load_table(TABLE).current_snapshot() == compacted  # nothing written

    world.run()  # planned again: located in the compacted table
    expected = {k: "old" for k in range(20) if k != 12}
    assert world.names() == {**expected, 3: "new"}


def test_a_compaction_of_files_the_run_does_not_replace_lets_it_commit(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path, target_file_size_bytes=1 << 30)
    for first in (0, 10, 20):
        world.write(0, [row(k, "old") for k in range(first, first + 10)])
        world.run()
    world.write(0, [row(25, "new")])
    plan = world.plan()
    result = world.execute(plan)
    assert result.upsert is not None
    [replaced] = result.upsert.replaced
    maintainer = IcebergTableMaintainer(world.catalog, StagedFileStore())
    compaction = maintainer.plan_compaction(
        TABLE, small_file_bytes=1 << 30, min_small_files=2, max_bytes=1 << 30
    )
    # Only the two files without key 25 are compacted: the run's located version still stands.
    kept = replace(
        compaction,
        groups=tuple(
            replace(g, files=tuple(f for f in g.files if f.file_path != replaced.uri))
            for g in compaction.groups
        ),
    )
    written = maintainer.write_compaction(
        kept, data_prefix=str(tmp_path / "compacted"), target_file_size_bytes=1 << 30
    )
    assert maintainer.commit_compaction(written, now_ms=0).committed
    assert world.commit(plan, result).table_committed
    assert world.names() == {**dict.fromkeys(range(30), "old"), 25: "new"}


def test_a_commit_that_added_files_after_the_located_version_refuses_the_run(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(1, "a")])
    world.run()
    world.write(0, [row(2, "b")])
    stale = world.plan()  # located before the run below: it would not see key 1's second row
    stale = stale.model_copy(update={"table": stale.table.model_copy(update={"metadata_location": None})})  # type: ignore[union-attr]
    with pytest.raises(UpsertLocateStaleError, match="data file"):
        world.commit(stale, world.execute(stale))
    world.run()
    assert world.names() == {1: "a", 2: "b"}


class Samples:
    """A metrics sink keeping what it is given (a port: what Prometheus or EMF would receive)."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def emit(self, samples: Sequence[Sample]) -> None:
        self.samples.extend(samples)

    def value(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.samples if s.metric.name == name and s.labels == labels)


def test_the_commit_outcome_and_the_metrics_say_what_the_run_did_to_the_table(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(k, "a") for k in range(6)])
    world.run()
    world.write(0, [row(1, "b"), row(2, "b"), ({"id": 3}, None), row(7, "new")])
    plan = world.plan()
    result = world.execute(plan)
    outcome = world.commit(plan, result)
    assert outcome.upsert is not None
    assert (outcome.upsert.inserted, outcome.upsert.updated, outcome.upsert.deleted) == (1, 2, 1)
    assert outcome.upsert.files_rewritten == 1
    assert outcome.upsert.bytes_rewritten > 0

    sink = Samples()
    record_commit(sink, plan, result, outcome, started_at=0.0, ended_at=1.0)
    labels = {"topic": plan.topic, "table": TABLE}
    changes = ("inserted", "updated", "deleted")
    assert [sink.value("upsert_rows_total", **labels, change=c) for c in changes] == [1, 2, 1]
    assert sink.value("upsert_files_rewritten_total", **labels) == 1
    assert sink.value("upsert_bytes_rewritten_total", **labels) == outcome.upsert.bytes_rewritten


def test_a_replayed_commit_counts_nothing_again(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(1, "a")])
    plan = world.plan()
    result = world.execute(plan)
    world.commit(plan, result)
    again = world.commit(plan, result)
    assert again.upsert is None
    sink = Samples()
    record_commit(sink, plan, result, again, started_at=0.0, ended_at=1.0)
    assert not [s for s in sink.samples if s.metric.name.startswith("upsert_")]


def test_a_bucket_partitioned_table_rewrites_only_the_buckets_of_the_changed_keys(tmp_path: Path) -> None:
    world = UpsertWorld(
        tmp_path,
        partition_by=(PartitionField(column="id", transform=PartitionTransform.BUCKET, parameter=4),),
    )
    world.write(0, [row(k, "old") for k in range(40)])
    world.run()
    files = len(list(world.catalog.load_table(TABLE).scan().plan_files()))
    world.write(0, [row(7, "new"), ({"id": 9}, None)])
    world.run()
    names = {k: "old" for k in range(40) if k != 9}
    assert world.names() == {**names, 7: "new"}
    assert 1 <= int(summary(world)[SUMMARY_UPSERT_FILES_REWRITTEN]) <= 2 < files
    scan = world.catalog.load_table(TABLE).scan(row_filter="id == 7")
    assert [row["name"] for row in scan.to_arrow().to_pylist()] == ["new"]


class DyingAfter:
    """The real table committer; the process dies right after its commit to `table`."""

    def __init__(self, inner: Any, table: str) -> None:
        self._inner, self._table = inner, table

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        after = self._inner.commit(expected, commit)
        if expected.table == self._table:
            raise KeyboardInterrupt  # the process dies here
        return after


def stranded_then_superseded(world: UpsertWorld) -> RunSupersededError:
    """Run 1 dies between its dead-letter table's commit and its table's; run 2 (planned before run 1
    is in, a longer range) finishes run 1 first, which supersedes it."""
    world.write(0, [row(1, "a"), row(2, "b"), (None, None)])  # a tombstone naming no key: a dead letter
    first = world.plan()
    first_result = world.execute(first)
    grant = world.store.claim_lease(first.topic, owner_id="test", run_id=first.run_id)
    assert isinstance(grant, LeaseGrant)
    dying = DyingAfter(world.tables, DEAD_LETTERS)
    with pytest.raises(KeyboardInterrupt):
        world.service(dying).commit_run(first, first_result, grant, TablePolicy(create_table_if_missing=True))
    world.store.release_lease(grant)  # (its lease lapsed)

    world.write(0, [row(3, "c")])
    second = world.plan()
    service = CommitService(
        world.tables,
        world.store,
        stranded_runs=lambda _topic, run_id: (first, first_result) if run_id == first.run_id else None,
    )
    grant = world.store.claim_lease(second.topic, owner_id="test", run_id=second.run_id)
    assert isinstance(grant, LeaseGrant)
    with pytest.raises(RunSupersededError) as superseded:
        service.commit_run(second, world.execute(second), grant, TablePolicy(create_table_if_missing=True))
    assert world.names() == {1: "a", 2: "b"}
    return superseded.value


def test_a_stranded_run_finished_by_a_later_commit_is_counted_once_where_aws_reports_the_commit(
    tmp_path: Path,
) -> None:
    superseded = stranded_then_superseded(UpsertWorld(tmp_path))
    sink = Samples()
    record_commit_failure(sink, superseded)  # what the commit function does with the step's error
    topic = superseded.topic
    assert sink.value("records_total", topic=topic, result="written") == 2
    assert sink.value("records_total", topic=topic, result="invalid") == 1
    assert sink.value("runs_total", topic=topic, outcome="committed") == 1
    labels = {"topic": topic, "table": TABLE}
    assert [sink.value("upsert_rows_total", **labels, change=c) for c in ("inserted", "updated")] == [2, 0]
    assert sink.value("errors_total", stage="sink") == 0  # a recovery, not an error


def test_a_stranded_run_finished_by_a_later_commit_is_counted_once_by_the_one_machine_loop(
    tmp_path: Path,
) -> None:
    superseded = stranded_then_superseded(UpsertWorld(tmp_path))
    sink = Samples()
    report = RunReport(
        topic=superseded.topic,
        run_id=superseded.run_id,
        end=RunEnd.SUPERSEDED,
        seconds=1.0,
        finished=superseded.finished,
    )
    MetricsObserver(sink).run_ended(report, superseded.finished.plan)  # type: ignore[arg-type]
    labels = {"topic": superseded.topic, "table": TABLE}
    assert sink.value("records_total", topic=superseded.topic, result="written") == 2
    assert sink.value("upsert_rows_total", **labels, change="inserted") == 2
