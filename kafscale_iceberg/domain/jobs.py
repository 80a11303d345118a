"""Spark job runs as the run steps see them, whatever executes them (EMR Serverless or local Spark)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class JobState(StrEnum):
    """A job run's state, folded from the runner's own states."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        """True once the job will not change state again."""
        return self in {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}


@dataclass(frozen=True)
class JobStatus:
    """One look at a job run: folded state, the runner's own state and its explanation."""

    job_id: str
    state: JobState
    runner_state: str
    detail: str = ""
    queued_ms: int | None = None
    """Time the job waited before it started running (EMR's queuedDurationMilliseconds), when known."""
