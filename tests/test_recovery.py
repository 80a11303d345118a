"""Recovery that never sticks and cleanup that never corrupts (issue 29), on the one-machine pipeline:
the two reproductions of the issue, append mode through the orphan case, and a cheap slice of the crash
harness (`tests/test_chaos.py`; all of it: `make chaos`).

Real parts: moto S3, the SQLite checkpoint store and catalog, the in-process runner, the real
maintenance service (`tests/support/recovery_world.py`).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest

from kafscale_iceberg.commands.run import print_summary
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.exceptions import CheckpointUnavailableError
from kafscale_iceberg.local.wiring import ProgressPrinter
from kafscale_iceberg.services.run_steps import CommittedRun
from tests.support.dying import Point
from tests.support.moto import MotoEndpoint
from tests.support.recovery_world import BAD, DLQ, TABLE, TOPIC, RecoveryWorld

pytestmark = pytest.mark.slow  # end to end, a few seconds a run: `make test`, not the fast loop


def _settle(world: RecoveryWorld) -> None:
    """`run --once` as an operator would after a crash: each ends ok and committed (exit 0)."""
    for _ in range(3):
        summary = world.run_once()
        assert summary is not None
        assert summary.ok, summary.failed
        if not summary.runs:
            return


def test_a_stranded_upsert_run_located_in_a_compacted_version_is_written_again_not_stuck(
    moto_server: MotoEndpoint, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect 1 (kill after the lag table, `maintain --compact`, restart with more records): the
    stranded run's located version no longer stands, so it is never re-committed as it was; its
    dead-letter table is set back to the anchor and the next run writes the range again. Before, every
    later run re-committed the stranded result, was refused as stale, and the topic was stuck."""
    world = RecoveryWorld(moto_server, tmp_path)
    world.put([(1, "a"), (2, "b")])
    _settle(world)
    world.put([(5, "e")])
    _settle(world)  # two files: a compaction has something to merge
    world.put([(1, "a2"), BAD, (3, "c"), BAD])
    assert world.run_once(Point.AFTER_DEAD_LETTER_COMMIT) is None
    world.expire_lease()
    compacted = {t.table: t for t in world.maintain(compact=True).tables}[TABLE]
    assert compacted.compaction is not None
    assert compacted.compaction.committed
    world.put([(4, "d"), (2, None)])
    with caplog.at_level(logging.INFO):
        _settle(world)
    assert world.problems() == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors  # an automatic recovery that commits is no error


@pytest.mark.parametrize("mode", ["upsert", "append"])
def test_orphan_cleanup_spares_a_stranded_run_and_a_deleted_file_is_never_committed(
    moto_server: MotoEndpoint, tmp_path: Path, mode: str
) -> None:
    """Defect 2 (kill after the lag table, lease expired, `maintain` past the orphan grace, new records,
    `run --once`): the stranded run's files are not orphans while it is unfinished; and when they are
    deleted anyway (an operator's `aws s3 rm`), the next commit sees them missing and writes the range
    again instead of committing a table no reader can open (append mode: silently, before)."""
    world = RecoveryWorld(moto_server, tmp_path, mode=mode)
    world.put([(1, "a"), (2, "b")])
    _settle(world)
    world.put([(1, "a2"), BAD, (3, "c")])
    assert world.run_once(Point.AFTER_DEAD_LETTER_COMMIT) is None
    world.expire_lease()
    stranded = world.catalog.load_table(DLQ).properties[f"kafscale.run-id.{TOPIC}"]
    deleted = [o.uri for t in world.maintain().tables for o in t.orphans]
    assert not [uri for uri in deleted if f"/{stranded}/" in uri]  # the stranded run's files are spared
    assert world.delete_unreferenced_files()  # and deleted by hand all the same
    world.put([(4, "d")])
    _settle(world)
    assert world.problems() == []


def test_what_an_operator_reads_after_an_automatic_recovery(
    moto_server: MotoEndpoint,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's "what an operator reads during recovery", line by line: a run stranded between its
    tables' commits, finished by the next `run --once`, whose own run was planned before it (so
    superseded, then planned again and committed)."""
    world = RecoveryWorld(moto_server, tmp_path)
    world.put([(1, "a"), (2, "b")])
    _settle(world)
    world.put([(1, "a2"), BAD, (3, "c")])
    assert world.run_once(Point.AFTER_DEAD_LETTER_COMMIT) is None
    stranded = world.catalog.load_table(DLQ).properties[f"kafscale.run-id.{TOPIC}"]
    world.expire_lease()
    world.put([(4, "d")])
    progress = io.StringIO()
    with caplog.at_level(logging.INFO):
        summary = world.run_once(observer=ProgressPrinter(progress))
    assert summary is not None
    print_summary(summary)
    printed = progress.getvalue() + capsys.readouterr().err
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert world.problems() == []
    # Ends committed: exit 0 (`run --once` exits 1 when `summary.ok` is false), and no ERROR line.
    assert summary.ok, summary.failed
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    # Each line of the recovery names the run, the tables and the rows it finished.
    finished = [line for line in printed.splitlines() if stranded in line]
    assert finished, printed
    assert all(TABLE in line and "records" in line for line in finished), finished
    # The summary counts what was committed once: the finished run, and the range after it.
    assert "1 of them left by an earlier crash and finished" in printed
    assert ", 0 topics failed" in printed
    # No routine refusal reads as a data problem, a compaction that never ran, or another runner.
    for wrong in ("fix the Spark output", "(a compaction?)", "already committed by another runner"):
        assert wrong not in printed + logged


class _ReleaseFailsOnce:
    """The real checkpoint store, whose first lease release meets an etcd outage (nothing released)."""

    def __init__(self, inner: Any) -> None:
        self._inner, self.failed = inner, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def release_lease(self, grant: LeaseGrant) -> bool:
        if not self.failed:
            self.failed = True
            raise CheckpointUnavailableError(f"release the lease of topic {grant.topic!r}", ("etcd",), "down")
        released: bool = self._inner.release_lease(grant)
        return released


def test_a_commit_retried_after_an_outage_at_the_lease_release_is_this_process_commit(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store fails during the lease release (rows and offsets in): the commit's next attempt finds
    the run in; that is this process's own commit, not "already committed by another runner"."""
    world = RecoveryWorld(moto_server, tmp_path)
    world.put([(1, "a"), BAD, (2, "b")])
    progress = io.StringIO()
    stores: list[_ReleaseFailsOnce] = []

    def wrap(inner: Any) -> _ReleaseFailsOnce:
        stores.append(_ReleaseFailsOnce(inner))
        return stores[-1]

    summary = world.pipeline(observer=ProgressPrinter(progress), checkpoints=wrap).run_once(busy_wait_s=0)
    print_summary(summary)
    printed = progress.getvalue() + capsys.readouterr().err
    assert stores[0].failed
    assert summary.ok, summary.failed
    assert world.problems() == []
    assert "already committed by another runner" not in printed
    assert "committed 2 records" in printed
    assert "(commit attempt 2: an earlier one failed for now)" in printed
    assert "run --once: 1 run committed, 2 records, 0 topics failed" in printed


def test_a_process_whose_run_another_committed_meanwhile_does_not_count_it(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process stalls past its lease between its job and its commit; another claims the topic, plans
    the same range (the same run id) and commits it. The stalled one's commit finds the run in: it
    says so and does not report the other's run as its own ("1 runs committed, 20 records")."""
    world = RecoveryWorld(moto_server, tmp_path)
    world.put([(1, "a"), BAD, (2, "b")])
    stalled = world.pipeline(owner="stalled")
    commit_run = stalled.steps.commit_run

    def after_a_stall(ticket: RunTicket) -> CommittedRun:
        world.expire_lease()  # its TTL passed while it stalled
        other = world.run_once()
        assert other is not None
        assert [r.run_id for r in other.runs] == [ticket.run_id]
        return commit_run(ticket)

    stalled.steps.commit_run = after_a_stall  # type: ignore[method-assign]
    summary = stalled.run_once(busy_wait_s=0)
    print_summary(summary)
    printed = capsys.readouterr().err
    assert summary.ok, summary.failed
    assert world.problems() == []
    assert "run --once: 0 runs committed, 0 records, 1 run already committed by another runner" in printed


class _StallsBeforeTheOffsets:
    """The real checkpoint store of a process that stalls past its lease right before its offset
    write (its table commit landed): meanwhile `meanwhile` runs (the TTL passing, another process)."""

    def __init__(self, inner: Any, meanwhile: Any) -> None:
        self._inner, self._meanwhile, self.stalled = inner, meanwhile, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit_offsets(self, grant: LeaseGrant, updates: Any) -> Any:
        if not self.stalled:
            self.stalled = True
            self._meanwhile()
        return self._inner.commit_offsets(grant, updates)


def test_a_process_fenced_after_its_table_commit_says_its_rows_are_in(
    moto_server: MotoEndpoint,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: "aborted ... nothing was written" although the table commit landed."""
    world = RecoveryWorld(moto_server, tmp_path)
    world.put([(1, "a"), BAD, (2, "b")])

    def meanwhile() -> None:
        world.expire_lease()
        assert world.run_once() is not None  # another process: repairs the offsets from the table

    stores: list[_StallsBeforeTheOffsets] = []

    def wrap(inner: Any) -> _StallsBeforeTheOffsets:
        stores.append(_StallsBeforeTheOffsets(inner, meanwhile))
        return stores[-1]

    progress = io.StringIO()
    with caplog.at_level(logging.INFO):
        summary = world.pipeline(observer=ProgressPrinter(progress), checkpoints=wrap).run_once(busy_wait_s=0)
    printed = progress.getvalue()
    assert stores[0].stalled
    assert summary.ok, summary.failed
    assert world.problems() == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert "is committed to its tables (offsets p0=2), but its lease was lost before" in printed
    assert "nothing was written" not in printed


def test_without_the_launchers_repair_as_on_aws_a_superseded_commit_records_the_tables_version(
    moto_server: MotoEndpoint, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The AWS launcher carries no pyiceberg: it plans from `field-ids.json` alone. A commit that
    finishes a stranded upsert run first moves the table; the commit step records its version then
    (as for a stale refusal), so the re-plan locates in it and commits (before: refused as stale)."""
    world = RecoveryWorld(moto_server, tmp_path)
    world.put([(1, "a"), (2, "b")])
    _settle(world)
    world.put([(1, "a2"), BAD, (3, "c")])
    assert world.run_once(Point.AFTER_DEAD_LETTER_COMMIT) is None
    world.expire_lease()
    world.put([(4, "d"), (2, None)])
    pipeline = world.pipeline()
    pipeline.launcher._repair_from_table = None  # as on AWS: plans come from the store and documents
    with caplog.at_level(logging.INFO):
        summary = pipeline.run_once(busy_wait_s=0)
    assert summary.ok, summary.failed
    assert [r.end.value for r in summary.runs] == ["superseded", "committed"]
    assert "UpsertLocateStaleError" not in caplog.text
    assert world.problems() == []
