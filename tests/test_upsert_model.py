"""Upsert against a model (a dict per key): random interleavings of inserts, updates, deletes and
tombstones across runs, written copy-on-write, merge-on-read (position deletes) or as `auto` chooses,
with the process dying at every step of a commit, a `maintain` compaction (folding deletes) landing
between a run and its commit, and committed runs replayed; the table, and DuckDB reading the files the
table lists (position deletes applied), always agree with the model.

Real parts: a pyiceberg SQLite catalog, the SQLite checkpoint store, the commit service, the real
maintainer; each run executed by the run driver in this process (its tasks write, locate and
rewrite, as the Spark job's do). A compaction that took a file the run replaces refuses the commit,
and the run is planned again, as the abort step and the next launch do. A death is a
`ProcessDied` (a BaseException nothing in the product catches) raised by a wrapped real adapter at
the named point; the next "process" retries the same plan and result, as the commit step's retry
(or the next runner) does. DuckDB has no Iceberg extension here (it downloads it): it reads the data
files of the table's current snapshot with its own Parquet reader and drops the rows the snapshot's
position delete files name (`tests/support/table_readers.py`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from kafscale_iceberg.domain.commits import TableCommit, TableState
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import RunPlan, RunResult, UpsertSettings, UpsertWrite
from kafscale_iceberg.exceptions import UpsertLocateStaleError
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from tests.support.table_readers import duckdb_rows
from tests.support.upsert_world import TABLE, UpsertWorld

duckdb = pytest.importorskip("duckdb")

KEYS = 8
PARTITIONS = 2


class ProcessDied(BaseException):
    """The process died at an injected point."""


class Point:
    BEFORE_COMMIT = "before the table commit"
    AFTER_COMMIT = "after the table commit, before the offset write"
    AFTER_OFFSETS = "after the offset write, before the lease release"


POINTS = [Point.BEFORE_COMMIT, Point.AFTER_COMMIT, Point.AFTER_OFFSETS]


class Dying:
    """The real table committer, upsert files and checkpoint store; the process dies once at `point`."""

    def __init__(self, world: UpsertWorld, point: str) -> None:
        self.world, self.point, self.died = world, point, False

    def die(self, point: str) -> None:
        if point == self.point and not self.died:
            self.died = True
            raise ProcessDied(point)

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        self.die(Point.BEFORE_COMMIT)
        after = self.world.tables.commit(expected, commit)
        if expected.table == TABLE:
            self.die(Point.AFTER_COMMIT)
        return after

    def __getattr__(self, name: str) -> Any:
        return getattr(self.world.tables, name)


class DyingStore:
    def __init__(self, dying: Dying) -> None:
        self._dying, self._inner = dying, dying.world.store

    def commit_offsets(self, grant: Any, updates: Any) -> Any:
        written = self._inner.commit_offsets(grant, updates)
        self._dying.die(Point.AFTER_OFFSETS)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def commit_dying(world: UpsertWorld, plan: RunPlan, result: RunResult, point: str) -> None:
    """The first process dies at `point`; the next one (a new lease once the dead one's is released
    by the test, as its expiry would) commits the same plan and result."""
    dying = Dying(world, point)
    service = CommitService(dying, DyingStore(dying), sleep=lambda _s: None)
    grant = world.store.claim_lease(plan.topic, owner_id="dying", run_id=plan.run_id)
    assert isinstance(grant, LeaseGrant)
    with contextlib.suppress(ProcessDied):
        service.commit_run(plan, result, grant, TablePolicy(create_table_if_missing=True))
    holder = world.store.read_lease_holder(plan.topic)
    if holder is not None:
        world.store.release_lease(grant)
    world.commit(plan, result)


# A change: (partition-local key index, kind); a key lives in partition key % PARTITIONS.
change = st.tuples(st.integers(0, KEYS - 1), st.sampled_from(["upsert", "upsert", "delete", "tombstone"]))
step = st.tuples(
    st.lists(change, min_size=1, max_size=8),
    st.sampled_from([None, *POINTS]),
    st.booleans(),  # a compaction lands between the run and its commit
    st.booleans(),  # replay an earlier run's commit afterwards
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a failing case is printed as generated
)
@given(steps=st.lists(step, min_size=2, max_size=4), write=st.sampled_from(list(UpsertWrite)))
# A compaction takes the file the third run replaces (key 0's), then the commit after it dies.
@example(
    steps=[
        ([(0, "upsert"), (1, "upsert")], None, False, False),
        ([(2, "upsert")], None, False, False),
        ([(0, "upsert"), (4, "tombstone")], Point.AFTER_COMMIT, True, True),
    ],
    write=UpsertWrite.MERGE_ON_READ,
)
@example(
    steps=[
        ([(0, "upsert"), (1, "upsert")], None, False, False),
        ([(2, "upsert")], None, False, False),
        ([(0, "upsert"), (4, "tombstone")], Point.AFTER_COMMIT, True, True),
    ],
    write=UpsertWrite.COPY_ON_WRITE,
)
def test_the_table_always_holds_each_keys_last_state(
    tmp_path_factory: pytest.TempPathFactory, steps: Any, write: UpsertWrite
) -> None:
    world = UpsertWorld(tmp_path_factory.mktemp("upsert"), upsert=UpsertSettings(key=("id",), write=write))
    model: dict[int, str] = {}
    done: list[tuple[RunPlan, RunResult]] = []
    version = 0
    for changes, point, compact, replay in steps:
        by_partition: dict[int, list[tuple[object, object]]] = {}
        for key, kind in changes:
            version += 1
            name = f"v{version}"
            if kind == "upsert":
                change_of: tuple[object, object] = ({"id": key}, {"id": key, "name": name})
                model[key] = name
            elif kind == "delete":  # a record key as the bare scalar
                change_of = (key, None)
                model.pop(key, None)
            else:  # a tombstone whose record key is an object
                change_of = ({"id": key}, None)
                model.pop(key, None)
            by_partition.setdefault(key % PARTITIONS, []).append(change_of)
        for partition, records in sorted(by_partition.items()):
            world.write(partition, records)
        plan = world.plan()
        result = world.execute(plan)
        if compact and world.compact() and located_gone(world, result):
            with pytest.raises(UpsertLocateStaleError):
                world.commit(plan, result)
            plan = world.plan()  # planned again: located in the compacted table
            result = world.execute(plan)
        if point is None:
            world.commit(plan, result)
        else:
            commit_dying(world, plan, result, point)
        done.append((plan, result))
        if replay:
            world.commit(*done[0])  # a committed range's commit again: nothing changes
        assert world.names() == model
        assert duckdb_names(world) == model
    assert {p: world.store.load_committed_offsets("orders").offset(p) for p in world.ends} == world.ends


def located_gone(world: UpsertWorld, result: RunResult) -> bool:
    """Whether the compaction took a file the run replaces (else the run still commits as it is)."""
    assert result.upsert is not None
    live = {task.file.file_path for task in world.catalog.load_table(TABLE).scan().plan_files()}
    targets = [
        *(f.uri for f in result.upsert.replaced),
        *(t for d in result.upsert.deletes for t in d.targets),
    ]
    return any(uri not in live for uri in targets)


def duckdb_names(world: UpsertWorld) -> dict[int, str | None]:
    """The table as DuckDB reads the files of its current snapshot, position deletes applied."""
    rows = duckdb_rows(world.catalog.load_table(TABLE), "id, name")
    assert len(rows) == len({key for key, _ in rows}), "a key has two rows"
    return dict(rows)
