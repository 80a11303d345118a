"""The steps around a running job: watch it (renewing the topic's lease), and abort a failed run.

In AWS these are Step Functions task states (definition in `infra/`); on one machine a loop calls
them. The state passed between steps is a `RunTicket`, JSON-serializable, so any process can pick
up a run where another left it.

- `watch`: one look at the job and one lease renewal. A lost lease cancels the job: another run may
  already hold the topic, and this one must not commit.
- `abort`: records the run's outcome beside its plan (so the next plan of the same range uses the
  next attempt), releases the lease if still ours, and says how long to wait before re-signalling
  the topic and whether the topic's consecutive failures reached the alarm threshold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.config import RunsConfig
from kafscale_iceberg.domain.jobs import JobState, JobStatus
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.exceptions import LeaseLostError
from kafscale_iceberg.ports import CheckpointStore
from kafscale_iceberg.services.launch import OUTCOME_NAME, run_uri

logger = logging.getLogger(__name__)


class RunTicket(BaseModel):
    """A started run, as the steps pass it along (Step Functions state / local loop variable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    run_id: str
    plan_uri: str
    job_id: str
    grant: LeaseGrant
    attempt: int = 0
    started_at_ms: int


class RunOutcome(BaseModel):
    """Written beside a run's plan when the run ends without committing (`outcome.json`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: str
    reason: str
    attempt: int
    job_id: str | None = None
    ended_at_ms: int


class JobWatcher(Protocol):
    """Looks at and cancels running jobs."""

    def status(self, job_id: str) -> JobStatus: ...

    def cancel(self, job_id: str) -> None: ...


@dataclass(frozen=True)
class WatchResult:
    """One look at a running job: its state, and whether the lease was lost (the job was cancelled)."""

    status: JobStatus
    lease_lost: bool = False

    @property
    def is_final(self) -> bool:
        """True when the run should move to commit (succeeded) or abort (anything else final, or lost)."""
        return self.lease_lost or self.status.state.is_final


@dataclass(frozen=True)
class AbortResult:
    """What the abort step decided."""

    resignal_after_seconds: int
    consecutive_failures: int
    alarm: bool
    lease_released: bool


class RunSteps:
    """Watch and abort (see the module docstring)."""

    def __init__(
        self,
        runs: RunsConfig,
        checkpoints: CheckpointStore,
        jobs: JobWatcher,
        documents: DocumentStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._runs = runs
        self._checkpoints = checkpoints
        self._jobs = jobs
        self._documents = documents
        self._clock = clock

    def watch(self, ticket: RunTicket) -> WatchResult:
        """Look at the job once and renew the lease once; cancel the job if the lease is lost."""
        status = self._jobs.status(ticket.job_id)
        if status.state.is_final:
            return WatchResult(status)
        try:
            self._checkpoints.renew_lease(ticket.grant)
        except LeaseLostError as exc:
            logger.error(
                "lease lost while the job runs; cancelling it",
                extra={
                    "topic": ticket.topic,
                    "run_id": ticket.run_id,
                    "job_id": ticket.job_id,
                    "error": str(exc),
                },
            )
            self._jobs.cancel(ticket.job_id)
            return WatchResult(status, lease_lost=True)
        return WatchResult(status)

    def abort(self, ticket: RunTicket, reason: str) -> AbortResult:
        """Record the failed attempt, release the lease if still ours, and decide the retry. Idempotent."""
        outcome = RunOutcome(
            status="aborted",
            reason=reason,
            attempt=ticket.attempt,
            job_id=ticket.job_id,
            ended_at_ms=int(self._clock() * 1000),
        )
        uri = run_uri(self._runs.location, ticket.topic, ticket.run_id, OUTCOME_NAME)
        self._documents.write_text(uri, outcome.model_dump_json())
        released = self._checkpoints.release_lease(ticket.grant)
        failures = ticket.attempt + 1
        alarm = failures >= self._runs.max_consecutive_failures
        log = logger.error if alarm else logger.warning
        log(
            "run aborted",
            extra={
                "topic": ticket.topic,
                "run_id": ticket.run_id,
                "reason": reason,
                "consecutive_failures": failures,
            },
        )
        return AbortResult(
            resignal_after_seconds=self._runs.retry_delay_seconds(failures),
            consecutive_failures=failures,
            alarm=alarm,
            lease_released=released,
        )


def failure_reason(status: JobStatus, *, lease_lost: bool) -> str:
    """A one-line reason for an aborted run, from its last job status."""
    if lease_lost:
        return f"lease lost while job {status.job_id} was {status.runner_state}; job cancelled"
    if status.state is JobState.SUCCEEDED:
        return f"job {status.job_id} succeeded but its result could not be committed"
    return f"job {status.job_id} ended {status.runner_state}: {status.detail}".rstrip(": ")
