"""What the one-machine loop (`local/pipeline.py`) reports of each run it drove: how it ended
(`RunEnd`) and what it did (`RunReport`), for the progress lines, the `--once` summary and the
metrics (`local/wiring.py`, `commands/run.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafscale_iceberg.domain.finished_runs import FinishedRun
    from kafscale_iceberg.services.run_steps import CommittedRun


class RunEnd(StrEnum):
    """How a run driven by the loop ended."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    """Not committed by this run: its commit first finished an earlier stranded run (`finished`),
    which moved the table past the run's start, or its rows went in but its lease was lost before
    the offsets (`OffsetsFencedError`); the topic is planned again at once."""


@dataclass(frozen=True)
class RunReport:
    """One run, as the loop saw it."""

    topic: str
    run_id: str
    end: RunEnd
    seconds: float
    segments: int = 0
    records: int = 0
    dead_lettered: int = 0
    quarantined: int = 0
    skipped_lfs: int = 0
    lfs_resolved: int = 0
    lfs_errors: dict[str, int] = field(default_factory=dict)
    """LFS envelopes that could not be used, by reason (each one of the dead-lettered records)."""
    offsets: dict[int, int] = field(default_factory=dict)
    reason: str = ""
    retry_after_seconds: int = 0
    consecutive_failures: int = 0
    started_at: float = 0.0
    """Wall clock (Unix seconds) when the loop took the run."""
    commit: CommittedRun | None = None
    commit_started_at: float = 0.0
    commit_ended_at: float = 0.0
    replan: bool = False
    """The plan was stale (refused at commit, the store repaired from the table): plan again now."""
    finished: FinishedRun | None = None
    """A run stranded between its tables' commits that this run's commit finished first (in now)."""
    commit_attempts: int = 1
    """This process's commit attempts of the run (more than 1: an earlier one failed for now - an
    outage, a conflict - and may have landed before it failed)."""

    @property
    def committed_elsewhere(self) -> bool:
        """Committed, but by another runner: this process's first and only commit attempt found the
        run in its tables and the store already (nothing added). Not this process's commit: not
        counted as one (`print_summary`)."""
        outcome = None if self.commit is None else self.commit.outcome
        if outcome is None or self.commit_attempts > 1:
            return False
        return not (outcome.table_committed or outcome.dead_letter_committed or outcome.offsets_written)
