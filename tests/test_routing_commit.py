"""The commit step for a topic written to several tables, on a real SQLite catalog and checkpoint
store: tables before the anchor commit only with rows, the anchor always; a retried commit adds
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.runs import RoutePlan, RunPlan, RunResult, TableOutput, TableRole, TableTarget
from kafscale_iceberg.ports import CheckpointStore
from kafscale_iceberg.services.commit import CommitService, TablePolicy
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
