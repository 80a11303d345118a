"""A process dying at a chosen step of a run, and the lease it leaves expiring: what the fault tests
(`tests/test_faults.py`, `tests/test_routing_faults.py`), the recovery tests and the crash harness
(`tests/support/recovery_world.py`) share.

A crash is injected by wrapping a real adapter (the table committer, the checkpoint store or the job
runner): at the named point it raises `ProcessDied`, which no product code catches, so the "process"
stops right there with whatever it had written. `expire_dead_lease` is what the store does once the
dead process's TTL passes, without a wall-clock wait a busy machine could make a step outlast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import KafscaleConfig
from kafscale_iceberg.domain.commits import TableCommit, TableState
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.runs import RunPlan


class ProcessDied(BaseException):
    """The process died at an injected point (nothing in the product catches a BaseException)."""


class Point:
    """Where a process dies."""

    BEFORE_JOB = "before the job starts"
    AFTER_JOB_START = "after the job started, before it is watched"
    BEFORE_TABLE_COMMIT = "before any table commit"
    AFTER_DEAD_LETTER_COMMIT = "after the dead-letter commit, before the table commit"
    AFTER_TABLE_COMMIT = "after the table commit, before the offset write"
    AFTER_OFFSETS = "after the offset write, before the lease release"
    AFTER_RELEASE = "after the lease release"

    COMMIT_STEPS = (
        BEFORE_TABLE_COMMIT,
        AFTER_DEAD_LETTER_COMMIT,
        AFTER_TABLE_COMMIT,
        AFTER_OFFSETS,
        AFTER_RELEASE,
    )
    """Every point of a run's commit: the crash harness kills at each."""


def die(point: str) -> None:
    """What happens at a point by default: the process dies there."""
    raise ProcessDied(point)


class DyingTables:
    """The real table committer; the process dies (or `act` is done, e.g. an outage starts) around a
    commit to `table` or `dead_letters`."""

    def __init__(
        self, inner: Any, point: str, *, table: str, dead_letters: str, act: Callable[[str], None] = die
    ) -> None:
        self._inner, self._point, self._act = inner, point, act
        self._table, self._dead_letters = table, dead_letters

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        if self._point == Point.BEFORE_TABLE_COMMIT:
            self._act(self._point)
        after = self._inner.commit(expected, commit)
        if self._point == Point.AFTER_DEAD_LETTER_COMMIT and expected.table == self._dead_letters:
            self._act(self._point)
        if self._point == Point.AFTER_TABLE_COMMIT and expected.table == self._table:
            self._act(self._point)
        return after


class DyingCheckpoints:
    """The real checkpoint store; the process dies (or `act` is done) after the offset write or the
    lease release."""

    def __init__(self, inner: Any, point: str, *, act: Callable[[str], None] = die) -> None:
        self._inner, self._point, self._act = inner, point, act

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit_offsets(self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]) -> Any:
        written = self._inner.commit_offsets(grant, updates)
        if self._point == Point.AFTER_OFFSETS:
            self._act(self._point)
        return written

    def release_lease(self, grant: LeaseGrant) -> bool:
        released: bool = self._inner.release_lease(grant)
        if self._point == Point.AFTER_RELEASE:
            self._act(self._point)
        return released


class DyingRunner:
    """A real job runner; the process dies before or right after starting the job."""

    def __init__(self, inner: Any, point: str) -> None:
        self._inner, self._point = inner, point

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def start(self, plan: RunPlan, plan_uri: str) -> str:
        if self._point == Point.BEFORE_JOB:
            raise ProcessDied(self._point)
        job_id: str = self._inner.start(plan, plan_uri)
        if self._point == Point.AFTER_JOB_START:
            raise ProcessDied(self._point)
        return job_id


def expire_dead_lease(config: KafscaleConfig, topic: str) -> bool:
    """The lease a dead process left on `topic` runs out now (released as its holder would, fenced by
    its token); whether there was one to expire."""
    store = Assembly(config, owner_id="the-ttl").checkpoints
    holder = store.read_lease_holder(topic)
    if holder is None or holder.run_id is None:
        return False
    grant = LeaseGrant(
        topic=topic,
        owner_id=holder.owner_id,
        run_id=holder.run_id,
        token=holder.token,
        lease_id=holder.lease_id,
        ttl_seconds=config.offsets.lease_ttl_seconds,
        claimed_at_ms=holder.claimed_at_ms or 0,
    )
    released: bool = store.release_lease(grant)
    assert released, f"the dead process's lease on {topic!r} could not be released"
    return True
