"""The commit step for a topic written to several tables, on a real SQLite catalog and checkpoint
store: tables before the anchor commit only with rows, the anchor always; a retried commit adds
nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog

from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.commits import TableCommit, TableState
from kafscale_iceberg.domain.runs import RoutePlan, RunPlan, RunResult, TableOutput, TableRole, TableTarget
from kafscale_iceberg.exceptions import CatalogUnavailableError, OffsetMismatchError
from kafscale_iceberg.ports import CheckpointStore
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from tests.support.iceberg_runs import RunFactory, sql_settings
from tests.test_commit_service import DLQ, TABLE, _claim, _rows, _snapshots, _store_offsets

ROUTED = "lake.orders_eu"


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


CREATE = TablePolicy(create_table_if_missing=True)


def routed(plan: RunPlan, result: RunResult, *, to_routed: bool) -> tuple[RunPlan, RunResult]:
    """`plan` and `result` of `RunFactory` as a routed run: every row to `lake.orders_eu`
    (`to_routed`) or to the default table `lake.orders`, the anchor."""
    assert plan.table is not None
    eu = TableTarget(identifier=ROUTED, data_uri=plan.table.data_uri)
    default = TableTarget(identifier=TABLE, data_uri=plan.table.data_uri)
    routed_plan = plan.model_copy(
        update={"table": None, "route": RoutePlan(field="region", tables={"eu": eu}, default_table=default)}
    )
    target = ROUTED if to_routed else TABLE
    outputs = [TableOutput(identifier=target, role=TableRole.DATA, files=result.data_files)]
    if result.dead_letter_files:
        outputs.append(
            TableOutput(identifier=DLQ, role=TableRole.DEAD_LETTER, files=result.dead_letter_files)
        )
    routed_result = result.model_copy(
        update={"data_files": (), "dead_letter_files": (), "tables": tuple(outputs)}
    )
    return RunPlan.model_validate(routed_plan.model_dump()), RunResult.model_validate(
        routed_result.model_dump()
    )


def test_only_tables_with_rows_commit_and_the_anchor_always_does(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    service = CommitService(tables, sqlite_store)
    first = runs.plan({0: (-1, 9)})
    plan, result = routed(first, runs.result(first, dead_letters={0: [3]}), to_routed=True)
    outcome = service.commit_run(plan, result, _claim(sqlite_store, plan.run_id), CREATE)
    assert outcome.table_committed
    assert outcome.dead_letter_committed
    assert _rows(catalog, ROUTED) == [(0, o) for o in range(10) if o != 3]
    assert _rows(catalog, TABLE) == []  # the anchor: an empty append carrying the offsets
    assert _rows(catalog, DLQ) == [(0, 3)]
    assert _store_offsets(sqlite_store) == {0: 9}

    second = runs.plan({0: (9, 19)})
    plan2, result2 = routed(second, runs.result(second), to_routed=False)
    service.commit_run(plan2, result2, _claim(sqlite_store, plan2.run_id), CREATE)
    assert _rows(catalog, TABLE) == [(0, o) for o in range(10, 20)]
    assert _snapshots(catalog, ROUTED) == 1  # no rows this run: no commit, its offsets lag
    assert _snapshots(catalog, DLQ) == 1
    assert tables.read_state(ROUTED, "orders").marker.offsets == {0: 9}
    assert tables.read_state(TABLE, "orders").marker.offsets == {0: 19}

    third = runs.plan({0: (19, 24)})
    plan3, result3 = routed(third, runs.result(third), to_routed=True)
    grant = _claim(sqlite_store, plan3.run_id)
    service.commit_run(plan3, result3, grant, CREATE)
    assert _rows(catalog, ROUTED) == [(0, o) for o in [*range(10), *range(20, 25)] if o != 3]
    # The same commit again (a retried step): every table verifies COMMITTED, nothing is added.
    again = service.commit_run(plan3, result3, _claim(sqlite_store, plan3.run_id), CREATE)
    assert not again.table_committed
    assert _snapshots(catalog, ROUTED) == 2
    assert _store_offsets(sqlite_store) == {0: 24}


class FailingAfter:
    """The real table committer; fails (as `error` says) once, right after a commit to `table`."""

    def __init__(self, inner: IcebergTableCommitter, table: str, error: Exception) -> None:
        self._inner, self._table, self._error = inner, table, error
        self.armed = True

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        after = self._inner.commit(expected, commit)
        if self.armed and expected.table == self._table:
            self.armed = False
            raise self._error
        return after


def test_a_stranded_run_is_finished_by_the_next_run_and_a_transient_failure_meanwhile_stays_transient(
    catalog: Catalog, tables: IcebergTableCommitter, sqlite_store: CheckpointStore, runs: RunFactory
) -> None:
    """Run 1 dies after its routed table's commit, before the anchor's; run 2 (a longer range) meets it.
    Finishing run 1 first fails on a catalog outage: run 2's commit raises that transient error (not
    the terminal refusal); retried, it finishes run 1, then refuses run 2 as stale (its plan predates
    run 1's offsets), and a re-planned run lands every record once."""
    first = runs.plan({0: (-1, 9)})
    plan1, result1 = routed(first, runs.result(first), to_routed=True)
    dying: Any = FailingAfter(tables, ROUTED, KeyboardInterrupt())  # the process dies there
    first_grant = _claim(sqlite_store, plan1.run_id)
    with pytest.raises(KeyboardInterrupt):
        CommitService(dying, sqlite_store).commit_run(plan1, result1, first_grant, CREATE)
    sqlite_store.release_lease(first_grant)  # (its lease lapsed; the next run claims the topic)

    second = runs.plan({0: (-1, 19)})
    plan2, result2 = routed(second, runs.result(second), to_routed=True)
    calls = {"n": 0}

    def stranded(topic: str, run_id: str) -> tuple[RunPlan, RunResult] | None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise CatalogUnavailableError("sql", "load table 'lake.orders'", "connection refused (fault)")
        return (plan1, result1) if run_id == plan1.run_id else None

    service = CommitService(tables, sqlite_store, stranded_runs=stranded)
    grant = _claim(sqlite_store, plan2.run_id)
    with pytest.raises(CatalogUnavailableError):
        service.commit_run(plan2, result2, grant, CREATE)
    with pytest.raises(OffsetMismatchError):  # run 1 finished; run 2's plan is stale now
        service.commit_run(plan2, result2, grant, CREATE)
    assert _rows(catalog, ROUTED) == [(0, o) for o in range(10)]
    assert _store_offsets(sqlite_store) == {0: 9}
    sqlite_store.release_lease(grant)
    third = runs.plan({0: (9, 19)})
    plan3, result3 = routed(third, runs.result(third), to_routed=True)
    service.commit_run(plan3, result3, _claim(sqlite_store, plan3.run_id), CREATE)
    assert _rows(catalog, ROUTED) == [(0, o) for o in range(20)]
    assert tables.read_state(TABLE, "orders").marker.offsets == {0: 19}
