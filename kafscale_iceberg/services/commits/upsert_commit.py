"""An upsert run's commit (`mappings[].mode: upsert`, see `domain/upsert.py`): the anchor table's write
replaces the files the run's tasks rewrote instead of only appending.

The run's driver and tasks already located the changed keys and wrote the files
(`execution/upsert_stage.py`; the result's `upsert`): `UpsertTableWrite` verifies like every data
table write (the run commits only from exactly its start, at most once) and builds its ONE commit
from the result - the run's files and the rewritten ones added, the files they replace removed, the
marker moved - with the table version the keys were located in (`LocatedIn`). When that version no
longer stands (a `maintain` compaction took a replaced file, another writer added files), the adapter
refuses the commit (`UpsertLocateStaleError`, nothing written) and the run is planned again on the
current version: no update is lost and none is applied twice. A replayed commit of a run already in
the table verifies COMMITTED and changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import ClassVar

from kafscale_iceberg.domain.commits import TableCommit, TableState
from kafscale_iceberg.domain.runs import RunPlan, RunResult, RunStatus, UpsertOutcome
from kafscale_iceberg.domain.upsert import LocatedIn, UpsertCounts, write_mode_properties
from kafscale_iceberg.exceptions import RunNotCommittableError
from kafscale_iceberg.services.commits.run_writes import DataTableWrite

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpsertTableWrite(DataTableWrite):
    """The run's changes to an upsert table, as its tasks made them into files (`outcome`)."""

    action: ClassVar[str] = "upsert commit"
    outcome: UpsertOutcome = field(default_factory=UpsertOutcome)
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
                    "delete_files": commit.upsert.delete_files,
                    "bytes_located": commit.upsert.bytes_located,
                    "bytes_rewritten": commit.upsert.bytes_rewritten,
                    "located_snapshot_id": self.outcome.located_snapshot_id,
                    "snapshot_id": after.snapshot_id,
                },
            )
        super().landed(commit, after)

    def landed_counts(self) -> UpsertCounts | None:
        """The counts of the commit that landed through this write; None when none was confirmed (it
        was in already, or found in after an attempt whose outcome was unknown)."""
        return self._landed[-1] if self._landed else None

    def build(self, state: TableState) -> TableCommit:
        """The ONE commit: the run's files added, the table files they replace removed, the marker
        moved; valid only on the version the keys were located in (`LocatedIn`)."""
        outcome = self.outcome
        return replace(
            super().build(state),
            removed_files=tuple(f.uri for f in outcome.replaced),
            added_deletes=outcome.deletes,
            upsert=UpsertCounts(
                inserted=outcome.inserted,
                updated=outcome.updated,
                deleted=outcome.deleted,
                files_rewritten=len(outcome.replaced),
                bytes_rewritten=sum(f.size_bytes for f in outcome.replaced),
                delete_files=len(outcome.deletes),
                bytes_located=outcome.located_bytes_read,
            ),
            located=LocatedIn(outcome.located_snapshot_id) if outcome.changed_keys else None,
            table_properties=write_mode_properties(outcome.policy),
        )


def check_upsert_committable(plan: RunPlan, result: RunResult) -> None:
    """Refuse (`RunNotCommittableError`) an upsert outcome or deleted keys in a result of a plan that
    is not an upsert's, a succeeded upsert result without its outcome (a job that did not locate and
    rewrite), and deleted-key or position delete files outside the table's run prefix."""
    upsert = plan.conversion.upsert is not None and plan.table is not None
    if not upsert and (result.deleted_key_files or result.upsert is not None):
        raise RunNotCommittableError(
            plan.run_id, "the result lists deleted keys or an upsert outcome, but the plan is not an upsert's"
        )
    if not upsert:
        return
    assert plan.table is not None
    if result.status is RunStatus.SUCCEEDED and result.upsert is None:
        raise RunNotCommittableError(
            plan.run_id,
            "the result of an upsert plan has no upsert outcome (written by a job that does not locate "
            "and rewrite in its tasks): run the plan again with this version's job",
        )
    prefix = plan.table.data_uri.rstrip("/") + "/"
    foreign = [f.uri for f in result.deleted_key_files if not f.uri.startswith(prefix)]
    if result.upsert is not None:
        foreign += [d.uri for d in result.upsert.deletes if not d.uri.startswith(prefix)]
    if foreign:
        raise RunNotCommittableError(
            plan.run_id,
            f"{len(foreign)} deleted-key or position delete file(s) lie outside the run's prefix "
            f"{prefix!r}: {foreign[0]!r}",
        )
