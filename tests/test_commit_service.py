"""The commit step on a real SQLite catalog and real checkpoint stores (SQLite file, etcd server).

Crashes are injected by wrapping the real adapters: the wrapped call completes (or not, for "before"),
then the wrapper raises, as a process dying at that point would leave things.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.update import AddSnapshotUpdate

from kafscale_iceberg.adapters.iceberg_catalog import catalog_properties, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.commits import TableCommit, TableMarker, TableSpec, TableState
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.runs import FailureKind, RunFailure, RunResult, RunStatus, RunTimings
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.exceptions import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    LeaseLostError,
    OffsetMismatchError,
    RunNotCommittableError,
    TableChangedError,
)
from kafscale_iceberg.ports import CheckpointStore
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.offset_reset import OffsetReset
from tests.support.iceberg_runs import RunFactory, sql_settings

TOPIC, TABLE, DLQ = "orders", "lake.orders", "lake.orders__dlq"
CREATE = TablePolicy(create_table_if_missing=True)


class CrashError(Exception):
    """A process dying at an injected point."""


class CrashingTables:
    """The real table committer; dies once right after a commit to `table` landed."""

    def __init__(self, inner: IcebergTableCommitter, table: str) -> None:
        self._inner, self._table, self.crashed = inner, table, False

    def ensure_table(self, spec: Any, current: TableState | None = None) -> object:
        return self._inner.ensure_table(spec, current)

    def read_state(self, table: str, topic: str) -> TableState:
        return self._inner.read_state(table, topic)

    def missing_files(self, table: str, uris: Any) -> tuple[str, ...]:
        return self._inner.missing_files(table, uris)

    def check_commit(self, expected: TableState, commit: TableCommit) -> None:
        self._inner.check_commit(expected, commit)

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        after = self._inner.commit(expected, commit)
        if expected.table == self._table and not self.crashed:
            self.crashed = True
            raise CrashError(f"died after committing to {self._table}")
        return after


class CrashingCheckpoints:
    """The real checkpoint store; dies once after `commit_offsets`, or before `release_lease`."""

    def __init__(self, inner: CheckpointStore, point: str) -> None:
        self._inner, self._point, self.crashed = inner, point, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit_offsets(self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]) -> Any:
        written = self._inner.commit_offsets(grant, updates)
        self._crash_at("offsets written")
        return written

    def release_lease(self, grant: LeaseGrant) -> bool:
        self._crash_at("before lease release")
        return self._inner.release_lease(grant)

    def _crash_at(self, point: str) -> None:
        if point == self._point and not self.crashed:
            self.crashed = True
            raise CrashError(f"died at {point}")


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return load_iceberg_catalog(sql_settings(tmp_path))


@pytest.fixture
def tables(catalog: Catalog) -> IcebergTableCommitter:
    return IcebergTableCommitter(catalog)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> CheckpointStore:
    return SqliteCheckpointStore(tmp_path / "checkpoints.db")


@pytest.fixture
def runs(tmp_path: Path) -> RunFactory:
    return RunFactory(tmp_path)


def _claim(store: CheckpointStore, run_id: str, owner: str = "committer") -> LeaseGrant:
    grant = store.claim_lease(TOPIC, owner_id=owner, run_id=run_id)
    assert isinstance(grant, LeaseGrant), grant
    return grant


def _rows(catalog: Catalog, table: str) -> list[tuple[int, int]]:
    arrow = catalog.load_table(table).scan().to_arrow()
    return sorted(zip(arrow.column("partition").to_pylist(), arrow.column("offset").to_pylist(), strict=True))


def _snapshots(catalog: Catalog, table: str) -> int:
    return len(catalog.load_table(table).snapshots())


def _store_offsets(store: CheckpointStore) -> dict[int, int]:
    return {p: s.offset for p, s in store.load_committed_offsets(TOPIC).states.items()}


def _expected(
    ranges: Mapping[int, tuple[int, int]], excluded: Mapping[int, set[int]]
) -> list[tuple[int, int]]:
    return sorted(
        (p, o) for p, (s, e) in ranges.items() for o in range(s + 1, e + 1) if o not in excluded.get(p, set())
    )


RANGES = {0: (-1, 19), 1: (-1, 9)}
DEAD = {0: [4, 5]}


@pytest.mark.parametrize(
    "crash",
    ["dead-letter committed", "table committed", "offsets written", "before lease release"],
)
def test_a_commit_that_dies_after_any_step_and_is_retried_holds_every_record_once(
    crash: str, catalog: Catalog, tables: IcebergTableCommitter, store: CheckpointStore, runs: RunFactory
) -> None:
    plan = runs.plan(RANGES)
    result = runs.result(plan, files_per_partition=3, dead_letters=DEAD)
    lease = _claim(store, plan.run_id)
    crashing_tables = CrashingTables(
        tables, {"dead-letter committed": DLQ, "table committed": TABLE}.get(crash, "")
    )
    crashing_store = CrashingCheckpoints(store, crash)

    with pytest.raises(CrashError):
        CommitService(crashing_tables, crashing_store).commit_run(plan, result, lease, CREATE)  # type: ignore[arg-type]
    outcome = CommitService(tables, store).commit_run(plan, result, lease, CREATE)

    rows = _rows(catalog, TABLE)
    assert rows == _expected(RANGES, {0: {4, 5}})
    assert len({f"{p}:{o}" for p, o in rows}) == len(rows)  # record_id unique
    assert _rows(catalog, DLQ) == [(0, 4), (0, 5)]
    assert (_snapshots(catalog, TABLE), _snapshots(catalog, DLQ)) == (1, 1)
    assert (
        _store_offsets(store) == {0: 19, 1: 9} == dict(tables.read_state(TABLE, TOPIC).marker.offsets or {})
    )
    assert outcome.lease_released
    assert store.read_lease_holder(TOPIC) is None


def test_a_run_replayed_after_success_changes_nothing(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    plan = runs.plan(RANGES)
    result = runs.result(plan, dead_letters=DEAD)
    service = CommitService(tables, sqlite_store)
    service.commit_run(plan, result, _claim(sqlite_store, plan.run_id), CREATE)
    before = catalog.load_table(TABLE).metadata_location

    again = service.commit_run(plan, result, _claim(sqlite_store, plan.run_id), CREATE)

    assert not again.table_committed
    assert not again.dead_letter_committed
    assert catalog.load_table(TABLE).metadata_location == before
    assert (_snapshots(catalog, TABLE), _snapshots(catalog, DLQ)) == (1, 1)


def test_a_run_whose_start_is_not_the_committed_offset_is_refused_and_writes_nothing(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    service = CommitService(tables, sqlite_store)
    first = runs.plan({0: (-1, 9)})
    service.commit_run(first, runs.result(first), _claim(sqlite_store, first.run_id), CREATE)
    overlapping = runs.plan({0: (4, 14)})
    result = runs.result(overlapping)

    with pytest.raises(
        OffsetMismatchError, match="partition 0: run starts after 4, committed is 9"
    ) as raised:
        service.commit_run(overlapping, result, _claim(sqlite_store, overlapping.run_id), CREATE)

    assert raised.value.mismatches == ((0, 4, 9),)
    assert (raised.value.table, raised.value.topic) == (TABLE, TOPIC)
    assert _snapshots(catalog, TABLE) == 1
    assert _store_offsets(sqlite_store) == {0: 9}


def test_consecutive_runs_each_add_one_snapshot_and_move_the_offsets(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    service = CommitService(tables, sqlite_store)
    for ranges in ({0: (-1, 9)}, {0: (9, 19), 1: (-1, 4)}):
        plan = runs.plan(ranges)
        service.commit_run(
            plan, runs.result(plan, files_per_partition=4), _claim(sqlite_store, plan.run_id), CREATE
        )

    assert _snapshots(catalog, TABLE) == 2
    assert _rows(catalog, TABLE) == _expected({0: (-1, 19), 1: (-1, 4)}, {})
    assert _store_offsets(sqlite_store) == {0: 19, 1: 4}
    summaries = [s.summary for s in catalog.load_table(TABLE).snapshots()]
    assert [s["kafscale.start-offsets"] for s in summaries if s] == ['{"0":-1}', '{"0":9,"1":-1}']


def test_two_committers_race_and_only_the_lease_holder_commits(
    catalog: Catalog, tables: IcebergTableCommitter, tmp_path: Path, runs: RunFactory
) -> None:
    clock = [1_000_000]
    store = SqliteCheckpointStore(tmp_path / "race.db", lease_ttl_seconds=5, now_ms=lambda: clock[0])
    plan = runs.plan(RANGES)
    result = runs.result(plan, files_per_partition=2)
    stale = _claim(store, plan.run_id, owner="zombie")
    clock[0] += 6_000  # the zombie's lease expired; another committer claims the topic
    holder = _claim(store, plan.run_id, owner="holder")
    outcomes: dict[str, object] = {}

    def commit(name: str, grant: LeaseGrant) -> None:
        try:
            outcomes[name] = CommitService(tables, store).commit_run(plan, result, grant, CREATE)
        except Exception as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=commit, args=args) for args in (("zombie", stale), ("holder", holder))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert isinstance(outcomes["zombie"], LeaseLostError)
    assert not isinstance(outcomes["holder"], Exception)
    assert _rows(catalog, TABLE) == _expected(RANGES, {})
    assert _snapshots(catalog, TABLE) == 1


def test_a_committer_without_the_lease_writes_nothing(
    catalog: Catalog, tables: IcebergTableCommitter, tmp_path: Path, runs: RunFactory
) -> None:
    clock = [1_000_000]
    store = SqliteCheckpointStore(tmp_path / "lost.db", lease_ttl_seconds=5, now_ms=lambda: clock[0])
    plan = runs.plan(RANGES)
    stale = _claim(store, plan.run_id, owner="zombie")
    clock[0] += 6_000
    assert isinstance(store.claim_lease(TOPIC, owner_id="other", run_id="other-run"), LeaseGrant)

    with pytest.raises(LeaseLostError):
        CommitService(tables, store).commit_run(plan, runs.result(plan), stale, CREATE)

    assert not catalog.table_exists(TABLE)
    assert _store_offsets(store) == {}


def test_a_failed_run_is_never_committed(
    tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    plan = runs.plan(RANGES)
    failed = RunResult(
        run_id=plan.run_id,
        topic=TOPIC,
        status=RunStatus.FAILED,
        failure=RunFailure(kind=FailureKind.CORRUPT_SEGMENT, message="bad crc", segment_key="k"),
        timings=RunTimings(started_at_ms=1, ended_at_ms=2),
    )

    with pytest.raises(RunNotCommittableError, match="failed: bad crc"):
        CommitService(tables, sqlite_store).commit_run(
            plan, failed, _claim(sqlite_store, plan.run_id), CREATE
        )

    assert sqlite_store.read_lease_holder(TOPIC) is not None  # untouched: the abort step releases it


def test_a_result_with_files_outside_the_run_prefix_is_refused(
    tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    plan = runs.plan({0: (-1, 4)})
    other = runs.plan({0: (-1, 5)})
    foreign = runs.result(other).data_files
    result = runs.result(plan).model_copy(update={"data_files": foreign})

    with pytest.raises(RunNotCommittableError, match="outside the run's prefix"):
        CommitService(tables, sqlite_store).commit_run(
            plan, result, _claim(sqlite_store, plan.run_id), CREATE
        )


def test_a_run_without_rows_still_records_its_offsets_in_one_empty_snapshot(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    plan = runs.plan({0: (-1, 4)})
    result = runs.result(plan, skip={0: range(5)})
    assert result.data_files == ()

    outcome = CommitService(tables, sqlite_store).commit_run(
        plan, result, _claim(sqlite_store, plan.run_id), CREATE
    )

    assert outcome.table_committed
    assert _snapshots(catalog, TABLE) == 1
    assert catalog.load_table(TABLE).snapshots()[0].summary["added-data-files"] is None  # type: ignore[index]
    assert tables.read_state(TABLE, TOPIC).marker.offsets == {0: 4}
    assert _store_offsets(sqlite_store) == {0: 4}
    assert not catalog.table_exists(DLQ)


def test_a_go_processor_table_adopts_the_checkpoint_store_offsets_of_every_partition(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    # The Go processor committed partitions 0 and 7 to the store; the table records nothing of ours.
    handover = _claim(sqlite_store, "go-handover")
    sqlite_store.commit_offsets(handover, {0: OffsetUpdate(9, 1), 7: OffsetUpdate(99, 1)})
    sqlite_store.release_lease(handover)
    service = CommitService(tables, sqlite_store)
    assert service.reconciled_offsets(TOPIC, TABLE).offsets == {0: 9, 7: 99}
    plan = runs.plan({0: (9, 14)})

    service.commit_run(plan, runs.result(plan), _claim(sqlite_store, plan.run_id), CREATE)

    assert tables.read_state(TABLE, TOPIC).marker.offsets == {0: 14, 7: 99}
    assert _rows(catalog, TABLE) == _expected({0: (9, 14)}, {})


def test_offsets_left_behind_by_a_crash_are_repaired_by_the_next_lease_holder(
    tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    plan = runs.plan(RANGES)
    lease = _claim(sqlite_store, plan.run_id)
    with pytest.raises(CrashError):
        CommitService(CrashingTables(tables, TABLE), sqlite_store).commit_run(  # type: ignore[arg-type]
            plan, runs.result(plan), lease, CREATE
        )
    sqlite_store.release_lease(lease)
    service = CommitService(tables, sqlite_store)

    unrepaired = service.reconciled_offsets(TOPIC, TABLE)
    repaired = service.reconciled_offsets(TOPIC, TABLE, lease=_claim(sqlite_store, "next-run"))

    assert unrepaired.offsets == repaired.offsets == {0: 19, 1: 9}
    assert unrepaired.store_behind == {0: (-1, 19), 1: (-1, 9)}
    assert _store_offsets(sqlite_store) == {0: 19, 1: 9}


def test_a_store_ahead_of_the_table_is_reported_and_the_table_wins(
    tables: IcebergTableCommitter,
    sqlite_store: CheckpointStore,
    runs: RunFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = CommitService(tables, sqlite_store)
    plan = runs.plan({0: (-1, 9)})
    service.commit_run(plan, runs.result(plan), _claim(sqlite_store, plan.run_id), CREATE)
    rogue = _claim(sqlite_store, "rogue")
    sqlite_store.commit_offsets(rogue, {0: OffsetUpdate(50, 1)})  # moved without an Iceberg commit
    sqlite_store.release_lease(rogue)

    reconciliation = service.reconciled_offsets(TOPIC, TABLE, lease=_claim(sqlite_store, "next-run"))

    assert reconciliation.offsets == {0: 9}
    assert reconciliation.store_ahead == {0: (50, 9)}
    assert "ahead of the table" in caplog.text
    assert _store_offsets(sqlite_store) == {0: 9}


def test_dead_letters_of_an_abandoned_run_that_cannot_be_finished_are_written_again_by_a_different_range(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    """Issue 29: a run stranded after its dead-letter commit whose documents are gone (no loader here)
    never blocks the topic for good: its dead-letter table is set back to the anchor's offsets and the
    wider run, starting there, commits its own dead letters of the range - each row once."""
    abandoned = runs.plan({0: (-1, 9)})
    lease = _claim(sqlite_store, abandoned.run_id)
    with pytest.raises(CrashError):
        CommitService(CrashingTables(tables, DLQ), sqlite_store).commit_run(  # type: ignore[arg-type]
            abandoned, runs.result(abandoned, dead_letters={0: [3]}), lease, CREATE
        )
    sqlite_store.release_lease(lease)
    wider = runs.plan({0: (-1, 14)})

    outcome = CommitService(tables, sqlite_store).commit_run(
        wider, runs.result(wider, dead_letters={0: [3, 12]}), _claim(sqlite_store, wider.run_id), CREATE
    )

    assert outcome.table_committed
    assert outcome.dead_letter_committed
    assert _rows(catalog, DLQ) == [(0, 3), (0, 12)]
    assert _rows(catalog, TABLE) == _expected({0: (-1, 14)}, {0: {3, 12}})


def test_an_abandoned_run_committed_again_from_its_result_finishes_without_duplicates(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    abandoned = runs.plan({0: (-1, 9)})
    result = runs.result(abandoned, dead_letters={0: [3]})
    lease = _claim(sqlite_store, abandoned.run_id)
    with pytest.raises(CrashError):
        CommitService(CrashingTables(tables, DLQ), sqlite_store).commit_run(  # type: ignore[arg-type]
            abandoned, result, lease, CREATE
        )
    sqlite_store.release_lease(lease)

    outcome = CommitService(tables, sqlite_store).commit_run(
        abandoned, result, _claim(sqlite_store, "redrive"), CREATE
    )

    assert outcome.table_committed
    assert not outcome.dead_letter_committed
    assert _rows(catalog, DLQ) == [(0, 3)]
    assert _rows(catalog, TABLE) == _expected({0: (-1, 9)}, {0: {3}})


class LosingTables(CrashingTables):
    """Every commit loses a race to a concurrent writer (nothing lands)."""

    attempts = 0

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        self.attempts += 1
        raise TableChangedError(expected.table, "a concurrent commit won")


def test_a_table_that_keeps_changing_is_reverified_then_given_up_without_writing(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    plan = runs.plan({0: (-1, 4)})
    losing = LosingTables(tables, TABLE)
    sleeps: list[float] = []
    service = CommitService(losing, sqlite_store, attempts=3, sleep=sleeps.append)  # type: ignore[arg-type]

    with pytest.raises(CommitConflictError, match="3 commit attempts"):
        service.commit_run(plan, runs.result(plan), _claim(sqlite_store, plan.run_id), CREATE)

    assert losing.attempts == 3
    assert len(sleeps) == 2
    assert catalog.load_table(TABLE).snapshots() == []


class LandedButReportedLost(CrashingTables):
    """The commit lands, but the caller hears a conflict (a lost response)."""

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        self._inner.commit(expected, commit)
        raise TableChangedError(expected.table, "response lost")


def test_a_commit_whose_answer_was_lost_is_verified_not_repeated(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    plan = runs.plan(RANGES)
    service = CommitService(LandedButReportedLost(tables, TABLE), sqlite_store, sleep=lambda _: None)  # type: ignore[arg-type]

    outcome = service.commit_run(plan, runs.result(plan), _claim(sqlite_store, plan.run_id), CREATE)

    assert _rows(catalog, TABLE) == _expected(RANGES, {})
    assert _snapshots(catalog, TABLE) == 1
    assert outcome.offsets == {0: 19, 1: 9}


class LandedWithOutcomeUnknown(CrashingTables):
    """The commit lands, but the caller hears that its outcome is unknown (a timeout after the write)."""

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        self._inner.commit(expected, commit)
        raise CommitOutcomeUnknownError(expected.table, commit.run_id, "timed out after sending")


@pytest.mark.parametrize(
    "attempts", [1, 3], ids=["found after the last attempt", "found on the next attempt"]
)
def test_a_commit_found_landed_after_an_unknown_outcome_counts_as_committed_wherever_it_is_found(
    attempts: int,
    catalog: Catalog,
    tables: IcebergTableCommitter,
    sqlite_store: CheckpointStore,
    runs: RunFactory,
) -> None:
    """The verification that finds the run in decides the same way inside the retry loop (attempt 2)
    and after it (attempts=1): the unknown attempt landed, so this call committed (it used to say False
    inside the loop and True after it)."""
    plan = runs.plan(RANGES)
    unknown = LandedWithOutcomeUnknown(tables, TABLE)
    service = CommitService(unknown, sqlite_store, attempts=attempts, sleep=lambda _: None)  # type: ignore[arg-type]

    outcome = service.commit_run(plan, runs.result(plan), _claim(sqlite_store, plan.run_id), CREATE)

    assert outcome.table_committed
    assert _snapshots(catalog, TABLE) == 1
    assert _store_offsets(sqlite_store) == {0: 19, 1: 9}


def test_a_quarantined_segment_is_listed_in_both_tables_and_the_offsets_move_past_it(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    """Both tables list the range (the dead-letter table even without files), until an offset reset to
    before it drops it (tests/test_replay.py)."""
    plan = runs.plan({0: (-1, 19)})

    CommitService(tables, sqlite_store).commit_run(
        plan, runs.result(plan, quarantined={0: (10, 14)}), _claim(sqlite_store, plan.run_id), CREATE
    )

    for table in (TABLE, DLQ):
        assert [r.span for r in tables.read_state(table, TOPIC).marker.quarantined] == [(0, 10, 14)]
    assert tables.read_state(TABLE, TOPIC).marker.offsets == {0: 19}
    summary = catalog.load_table(TABLE).snapshots()[-1].summary
    assert summary is not None
    assert '"first":10' in summary["kafscale.quarantined"]


class InterferingCatalog(SqlCatalog):
    """A SQLite catalog where another writer commits just before our next snapshot commit lands."""

    interfere: Callable[[], None] | None = None

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        if self.interfere is not None and any(isinstance(u, AddSnapshotUpdate) for u in updates):
            interfere, self.interfere = self.interfere, None
            interfere()
        return super().commit_table(table, requirements, updates)


def test_a_commit_that_loses_a_race_is_reverified_never_reapplied_blindly(
    tmp_path: Path, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    settings = sql_settings(tmp_path)
    interfering = InterferingCatalog("kafscale", **catalog_properties(settings))
    ours = IcebergTableCommitter(interfering)
    zombie = IcebergTableCommitter(load_iceberg_catalog(settings))
    plan = runs.plan(RANGES)
    result = runs.result(plan, files_per_partition=2)
    lease = _claim(sqlite_store, plan.run_id)
    ours.ensure_table(TableSpec(TABLE, table_fields(plan.conversion.columns), create_if_missing=True))
    # A zombie committer of the same run lands first (it then fails on the lease: not ours to write).
    zombie_commit = TableCommit(
        topic=TOPIC,
        run_id=plan.run_id,
        file_uris=tuple(f.uri for f in result.data_files),
        start_offsets=plan.start_offsets(),
        end_offsets=plan.end_offsets(),
        marker_after=TableMarker(offsets=plan.end_offsets(), run_id=plan.run_id),
    )
    interfering.interfere = lambda: zombie.commit(zombie.read_state(TABLE, TOPIC), zombie_commit)

    outcome = CommitService(ours, sqlite_store).commit_run(plan, result, lease, CREATE)

    assert not outcome.table_committed  # verified: the run was in; our files were not added again
    assert _rows(interfering, TABLE) == _expected(RANGES, {})
    assert _snapshots(interfering, TABLE) == 1
    assert _store_offsets(sqlite_store) == {0: 19, 1: 9}


def test_an_explicit_offset_reset_moves_both_tables_and_the_store_so_the_range_commits_again(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    service = CommitService(tables, sqlite_store)
    first = runs.plan({0: (-1, 19)})
    service.commit_run(
        first, runs.result(first, dead_letters={0: [15]}), _claim(sqlite_store, first.run_id), CREATE
    )
    reset_lease = _claim(sqlite_store, "reset")

    resets = OffsetReset(tables, sqlite_store)
    resets.reset_offsets(TOPIC, (TABLE, DLQ), {0: 9}, reset_lease)
    resets.reset_offsets(TOPIC, (TABLE, DLQ), {0: 9}, reset_lease)  # idempotent: no second snapshot
    sqlite_store.release_lease(reset_lease)

    assert service.reconciled_offsets(TOPIC, TABLE).offsets == {0: 9}
    assert _store_offsets(sqlite_store) == {0: 9}
    assert (_snapshots(catalog, TABLE), _snapshots(catalog, DLQ)) == (2, 2)
    summary = catalog.load_table(TABLE).snapshots()[-1].summary
    assert summary is not None
    assert summary["kafscale.reset"] == "true"
    again = runs.plan({0: (9, 19)})
    outcome = service.commit_run(
        again, runs.result(again, dead_letters={0: [15]}), _claim(sqlite_store, again.run_id), CREATE
    )
    assert outcome.table_committed
    assert outcome.dead_letter_committed
    assert _store_offsets(sqlite_store) == {0: 19}
