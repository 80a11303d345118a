"""Recovery that never sticks and cleanup that never corrupts (issue 29), on the one-machine pipeline:
the two reproductions of the issue, append mode through the orphan case, and a cheap slice of the crash
harness (`bench/chaos.py` runs all of it: `make chaos`).

Real parts: moto S3, the SQLite checkpoint store and catalog, the in-process runner, the real
maintenance service (`tests/support/recovery_world.py`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.moto import MotoEndpoint
from tests.support.recovery_world import BAD, DLQ, TABLE, TOPIC, Kill, RecoveryWorld

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
    assert world.run_once(Kill.AFTER_DEAD_LETTERS) is None
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
    assert world.run_once(Kill.AFTER_DEAD_LETTERS) is None
    world.expire_lease()
    stranded = world.catalog.load_table(DLQ).properties[f"kafscale.run-id.{TOPIC}"]
    deleted = [o.uri for t in world.maintain().tables for o in t.orphans]
    assert not [uri for uri in deleted if f"/{stranded}/" in uri]  # the stranded run's files are spared
    assert world.delete_unreferenced_files()  # and deleted by hand all the same
    world.put([(4, "d")])
    _settle(world)
    assert world.problems() == []
