"""The commit step and the offset reset: a run refused, a table that moved, an outcome unknown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kafscale_iceberg.exceptions.base import KafscaleIcebergError, TransientError

if TYPE_CHECKING:
    from kafscale_iceberg.domain.finished_runs import FinishedRun


class RunNotCommittableError(KafscaleIcebergError):
    """The run result can never be committed (a failed run, or a result of another plan). Terminal."""

    def __init__(self, run_id: str, problem: str) -> None:
        self.run_id = run_id
        self.problem = problem
        super().__init__(f"run {run_id!r} cannot be committed: {problem}")


class RunAttemptEndedError(KafscaleIcebergError):
    """A run id's attempt already ended without its outcome being recorded (its steps died).

    The launcher records the attempt as lost and plans the range under the next attempt.
    """

    def __init__(self, run_id: str, problem: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r}: {problem}")


class OffsetMismatchError(KafscaleIcebergError):
    """The committed offsets are not where the run starts: someone committed meanwhile. Terminal.

    `mismatches` holds `(partition, expected start, committed offset found)`. Nothing was written.
    """

    def __init__(
        self,
        table: str,
        topic: str,
        run_id: str,
        mismatches: Sequence[tuple[int, int, int]],
        *,
        repaired: Mapping[int, int] | None = None,
    ) -> None:
        self.table = table
        self.topic = topic
        self.run_id = run_id
        self.mismatches = tuple(mismatches)
        self.repaired: dict[int, int] = dict(repaired or {})
        """Partitions whose checkpoint-store offset was set to the table's (fenced) before raising."""
        detail = "; ".join(
            f"partition {partition}: run starts after {expected}, committed is {found}"
            for partition, expected, found in self.mismatches
        )
        if self.repaired:
            action = (
                f"nothing was written; the checkpoint store was repaired to the table's offsets "
                f"{dict(sorted(self.repaired.items()))}, so the next plan starts there - no action needed"
            )
        else:
            action = "nothing was written; abort this run and plan a new one from the committed offsets"
        super().__init__(
            f"refusing to commit run {run_id!r} of topic {topic!r} to {table!r}: {detail} ({action})"
        )


class RunSupersededError(OffsetMismatchError):
    """The run's commit first finished an earlier run stranded between its tables' commits (`finished`),
    which moved the table past this run's start: this run, planned before, is not committed and the
    topic is planned again from the table's offsets. A recovery, not a failure; nothing to do."""

    def __init__(self, stale: OffsetMismatchError, finished: FinishedRun) -> None:
        super().__init__(stale.table, stale.topic, stale.run_id, stale.mismatches, repaired=stale.repaired)
        self.finished = finished
        self.args = (
            f"run {stale.run_id!r} of topic {stale.topic!r} was planned before {finished.describe()} was "
            "finished; it is planned again from the table's offsets (nothing of it was committed)",
        )


class CommitConflictError(TransientError):
    """The table kept changing under the commit; each attempt was verified not to have landed. Transient."""

    def __init__(self, table: str, run_id: str, attempts: int) -> None:
        self.table = table
        self.run_id = run_id
        self.attempts = attempts
        super().__init__(
            f"run {run_id!r}: table {table!r} changed concurrently on each of {attempts} commit attempts "
            "(verified: none landed; another writer is committing to this table - retry the commit later)"
        )


class CommitOutcomeUnknownError(TransientError):
    """A commit request failed in a way that leaves its outcome unknown; the caller must verify. Transient."""

    def __init__(self, table: str, run_id: str, problem: str) -> None:
        self.table = table
        self.run_id = run_id
        super().__init__(
            f"run {run_id!r}: the outcome of the commit to table {table!r} is unknown: {problem} "
            "(retry the commit: it first checks whether the run is already in the table)"
        )


class TableChangedError(TransientError):
    """The table changed between reading its commit state and committing; nothing was written. Transient.

    The commit step re-reads and re-verifies the state before trying again (never a blind retry).
    """

    def __init__(self, table: str, problem: str) -> None:
        self.table = table
        super().__init__(f"table {table!r} changed since its commit state was read: {problem}")


class DeadLetterAheadError(KafscaleIcebergError):
    """The dead-letter table holds part of this run's range from another run. Terminal; nothing written.

    An earlier run committed its dead-letter files and never its table files (its commit was
    abandoned), then a different range was planned. Adding this run's dead letters would duplicate.
    The same holds for every table of a topic committed before its anchor (routed tables, other
    mappings' tables: `kind` names which).
    """

    def __init__(
        self,
        table: str,
        topic: str,
        run_id: str,
        other_run_id: str | None,
        partitions: Sequence[int],
        kind: str = "dead-letter table",
    ) -> None:
        self.table = table
        self.topic = topic
        self.run_id = run_id
        self.other_run_id = other_run_id
        self.partitions = tuple(partitions)
        super().__init__(
            f"refusing to commit run {run_id!r} of topic {topic!r}: {kind} {table!r} already "
            f"holds part of its range on partitions {list(self.partitions)} from run {other_run_id!r}, "
            "whose table commit never happened (nothing was written; commit that run from its result "
            "first, then plan again)"
        )


class OffsetResetRefusedError(KafscaleIcebergError):
    """An offset reset was refused before anything was written (`replay --reset-offsets`). Terminal.

    Names the topic, the partition and offsets, why, and the reset that would be accepted.
    """

    def __init__(self, topic: str, problem: str) -> None:
        self.topic = topic
        self.problem = problem
        super().__init__(f"refusing to reset the offsets of topic {topic!r}: {problem} (nothing was written)")
