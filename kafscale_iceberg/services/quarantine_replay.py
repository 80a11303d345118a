"""The commit of a replay of quarantined segments: exactly those ranges, once.

A segment quarantined by a run (unreadable, skipped under the `quarantine` policy) is recorded in
both tables' `kafscale.quarantine.<topic>` lists while the committed offsets move past it. Once the
segment is repaired, a run over exactly its range (per partition `(first - 1, last]`) re-reads it;
`QuarantineReplay.commit_replay` then gives the dead-letter table, then the table, ONE commit each
adding the replay's files and removing the ranges from the list - verified before every attempt like
every table write (`services.verified_commit`). Committed offsets do not move.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from kafscale_iceberg.domain.commits import QuarantinedRange, Standing, TableCommit, TableMarker, TableState
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import DataFile, RunPlan, RunResult, plan_as_written
from kafscale_iceberg.exceptions import RunNotCommittableError
from kafscale_iceberg.services.commit import (
    CommitOutcome,
    TablePolicy,
    check_committable,
    quarantined_ranges,
    table_spec,
)
from kafscale_iceberg.services.verified_commit import (
    TableWrite,
    TableWriter,
    commit_verified,
    read_state_if_exists,
    read_state_or_empty,
)

logger = logging.getLogger(__name__)

Span = tuple[int, int, int]
"""`(partition, first, last)`: what identifies a quarantined range."""


@dataclass(frozen=True)
class ReplayWrite(TableWrite):
    """The replay's files to one table, the replayed ranges off its quarantine list (done when off)."""

    plan: RunPlan
    files: tuple[DataFile, ...]
    wanted: frozenset[Span]
    action: ClassVar[str] = "replay commit"

    def verify(self, state: TableState) -> Standing:
        """READY while the table lists the ranges, COMMITTED once it does not; a table listing only
        some of them is refused (`RunNotCommittableError`)."""
        return Standing.READY if lists_ranges(state, self.wanted, self.plan) else Standing.COMMITTED

    def build(self, state: TableState) -> TableCommit:
        return TableCommit(
            topic=self.topic,
            run_id=self.run_id,
            file_uris=tuple(f.uri for f in self.files),
            files=self.files,
            start_offsets=self.plan.start_offsets(),
            end_offsets=self.plan.end_offsets(),
            marker_after=TableMarker(
                offsets=state.marker.offsets,
                run_id=state.marker.run_id,
                quarantined=tuple(r for r in state.marker.quarantined if r.span not in self.wanted),
            ),
            replayed=tuple(r for r in state.marker.quarantined if r.span in self.wanted),
            # An inferred table's new columns come with the replay's files, as with a run's.
            columns=self.plan.conversion.columns
            if self.plan.conversion.infer_columns and self.table == self.plan.table.identifier
            else None,
        )


class QuarantineReplay(TableWriter):
    """Replays of quarantined segments over a `TableCommitter` and a `CheckpointStore`."""

    def pending_quarantine(self, topic: str, table: str) -> tuple[QuarantinedRange, ...]:
        """Quarantined ranges of `topic` recorded in `table` and not replayed yet (oldest first)."""
        return read_state_or_empty(self._tables, table, topic).marker.quarantined

    def commit_replay(
        self, plan: RunPlan, result: RunResult, lease: LeaseGrant, policy: TablePolicy | None = None
    ) -> CommitOutcome:
        """Commit the run of repaired quarantined segments: exactly those ranges, once. Idempotent.

        The plan covers, per partition, exactly one quarantined range as `(first - 1, last]`. The
        dead-letter table, then the table, each get ONE commit adding the replay's files and removing
        the ranges from `kafscale.quarantine.<topic>`; committed offsets do not move. A table that no
        longer lists the ranges has them already (a replayed replay is a no-op). Refused, writing
        nothing: a plan mixing listed and unlisted ranges, and a result that quarantined a segment
        again (still corrupt: repair it first).
        """
        policy = policy or TablePolicy()
        check_committable(plan, result, lease)
        plan = plan_as_written(plan, result)
        again = quarantined_ranges(result)
        if again:
            raise RunNotCommittableError(
                plan.run_id,
                f"the replay quarantined {[r.segment_key for r in again]} again: the segments are still "
                "unreadable; repair them, then replay (nothing was written)",
            )
        self._checkpoints.renew_lease(lease)
        wanted = frozenset((p.partition, p.start_exclusive + 1, p.end_inclusive) for p in plan.partitions)
        table_committed = dead_letter_committed = False
        main = read_state_or_empty(self._tables, plan.table.identifier, plan.topic)
        if lists_ranges(main, wanted, plan):
            self._tables.ensure_table(table_spec(plan, policy), current=main)
            dead_letter = read_state_if_exists(self._tables, plan.dead_letter_table.identifier, plan.topic)
            if dead_letter is None and result.dead_letter_files:
                raise RunNotCommittableError(
                    plan.run_id,
                    f"dead-letter table {plan.dead_letter_table.identifier!r} is gone: its quarantine list "
                    "cannot be checked, so its dead letters cannot be committed exactly once",
                )
            if dead_letter is not None:
                dead_letter_committed = commit_verified(
                    self._tables,
                    self._write(plan, plan.dead_letter_table.identifier, result.dead_letter_files, wanted),
                    self._retry,
                    known=dead_letter,
                ).committed
            written = commit_verified(
                self._tables,
                self._write(plan, plan.table.identifier, result.data_files, wanted),
                self._retry,
                known=main,
            )
            main, table_committed = written.state, written.committed
        else:
            logger.info("quarantined ranges already replayed; nothing to do", extra={"run_id": plan.run_id})
        released = self._checkpoints.release_lease(lease)
        return CommitOutcome(
            run_id=plan.run_id,
            topic=plan.topic,
            table_committed=table_committed,
            dead_letter_committed=dead_letter_committed,
            table_snapshot_id=main.snapshot_id,
            offsets={p: main.marker.offset(p) for p in plan.start_offsets()},
            lease_released=released,
        )

    @staticmethod
    def _write(
        plan: RunPlan, table: str, files: tuple[DataFile, ...], wanted: frozenset[Span]
    ) -> ReplayWrite:
        return ReplayWrite(
            table=table, topic=plan.topic, run_id=plan.run_id, plan=plan, files=files, wanted=wanted
        )


def lists_ranges(state: TableState, wanted: frozenset[Span], plan: RunPlan) -> bool:
    """True if the table lists every wanted range, False if none; refuses a mix."""
    spans = {r.span for r in state.marker.quarantined}
    present = wanted & spans
    if present and present != wanted:
        missing = sorted(wanted - spans)
        raise RunNotCommittableError(
            plan.run_id,
            f"table {state.table!r} lists only some of the replayed ranges as quarantined; not listed: "
            f"{missing} (replay each quarantined segment with its own exact range)",
        )
    return bool(present)
