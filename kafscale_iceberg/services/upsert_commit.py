"""An upsert run's commit (`mappings[].mode: upsert`, see `domain/upsert.py`): the anchor table's write
replaces the files holding changed keys instead of only appending.

`UpsertTableWrite` verifies like every data table write (the run commits only from exactly its start,
at most once) and builds its ONE commit by locating and rewriting on the very state it builds on
(`UpsertFiles.rewrite`). When the table moved meanwhile - a `maintain` compaction of the same files -
the catalog refuses the commit, and the verified loop reads, verifies and builds again on the new
state: the rewrite then starts from the compacted files, so no update is lost and none is applied
twice. A replayed commit of a run already in the table verifies COMMITTED and rewrites nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar

from kafscale_iceberg.domain.commits import TableCommit, TableState
from kafscale_iceberg.domain.runs import RunPlan, RunResult, TableTarget
from kafscale_iceberg.domain.upsert import UpsertChange, UpsertCounts
from kafscale_iceberg.exceptions import RunNotCommittableError
from kafscale_iceberg.ports import UpsertFiles
from kafscale_iceberg.services.run_writes import DataTableWrite

logger = logging.getLogger(__name__)

REWRITE_FOLDER = "upsert"
"""The folder of a run's data prefix its rewritten files go to."""


@dataclass(frozen=True)
class UpsertTableWrite(DataTableWrite):
    """The run's changes to an upsert table: its rows and deleted keys (`change`), made into files on
    the state the commit builds on (`upsert_files`)."""

    action: ClassVar[str] = "upsert commit"
    change: UpsertChange | None = None
    upsert_files: UpsertFiles | None = field(default=None, compare=False, repr=False)
    renew_lease: Callable[[], object] | None = field(default=None, compare=False, repr=False)
    """Renews the run's lease once the rewrite is written (it may take a while): the commit and the
    offset write that follow get a whole TTL; a lease lost meanwhile stops the run before its commit."""
    _landed: list[UpsertCounts] = field(default_factory=list, compare=False, repr=False)
    """The counts of the commit that landed through this write (`landed`)."""

    def landed(self, commit: TableCommit, after: TableState) -> None:
        """Log what the run did to the table, and keep its counts for the outcome."""
        if commit.upsert is not None:
            self._landed.append(commit.upsert)
            logger.info(
                "upsert landed",
                extra={
                    "table": self.table,
                    "topic": self.topic,
                    "run_id": self.run_id,
                    "inserted": commit.upsert.inserted,
                    "updated": commit.upsert.updated,
                    "deleted": commit.upsert.deleted,
                    "files_rewritten": commit.upsert.files_rewritten,
                    "bytes_rewritten": commit.upsert.bytes_rewritten,
                    "snapshot_id": after.snapshot_id,
                },
            )
        super().landed(commit, after)

    def landed_counts(self) -> UpsertCounts | None:
        """The counts of the commit that landed through this write; None when none was confirmed (it
        was in already, or found in after an attempt whose outcome was unknown)."""
        return self._landed[-1] if self._landed else None

    def build(self, state: TableState) -> TableCommit:
        """The ONE commit: the run's files (superseded rows dropped) and the table's files rewritten
        without the changed keys' rows added, the files they replace removed, the marker moved."""
        assert self.change is not None
        assert self.upsert_files is not None
        rewrite = self.upsert_files.rewrite(self.table, state, self.change)
        if self.renew_lease is not None:
            self.renew_lease()
        return replace(
            super().build(state),
            file_uris=tuple(f.uri for f in rewrite.added),
            files=rewrite.added,
            removed_files=rewrite.removed,
            upsert=rewrite.counts,
        )


def upsert_change(plan: RunPlan, result: RunResult, target: TableTarget) -> UpsertChange:
    """What `result` changes in the plan's upsert table `target`."""
    assert plan.conversion.upsert is not None
    return UpsertChange(
        key=plan.conversion.upsert.key,
        row_files=result.data_files,
        deleted_key_files=result.deleted_key_files,
        rewrite_uri=f"{target.data_uri.rstrip('/')}/{REWRITE_FOLDER}",
    )


def check_upsert_committable(plan: RunPlan, result: RunResult) -> None:
    """Refuse (`RunNotCommittableError`) deleted keys in a result of a plan that is not an upsert's,
    and deleted-key files outside the table's run prefix."""
    if not result.deleted_key_files:
        return
    if plan.conversion.upsert is None or plan.table is None:
        raise RunNotCommittableError(
            plan.run_id, "the result lists deleted keys, but the plan is not an upsert's"
        )
    prefix = plan.table.data_uri.rstrip("/") + "/"
    foreign = [f.uri for f in result.deleted_key_files if not f.uri.startswith(prefix)]
    if foreign:
        raise RunNotCommittableError(
            plan.run_id,
            f"{len(foreign)} deleted-key file(s) lie outside the run's prefix {prefix!r}: {foreign[0]!r}",
        )
