"""A run in flight, as the steps pass it along, and where a run's documents live.

`{runs.location}/{topic}/{run_id}/` holds `plan.json` (launcher), `result.json` (Spark job) and
`outcome.json` (written when a run ends without committing, so the next plan of the same range takes
the next attempt).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runner_choice import RunnerKind

PLAN_NAME = "plan.json"
RESULT_NAME = "result.json"
OUTCOME_NAME = "outcome.json"


def join_uri(base: str, *parts: str) -> str:
    """`base` with `parts` appended, one `/` between each (s3://, file:// and paths alike)."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def run_document_uri(runs_location: str, topic: str, run_id: str, name: str) -> str:
    """Where a run's document lives: `{runs.location}/{topic}/{run_id}/{name}`."""
    return join_uri(runs_location, topic, run_id, name)


class RunTicket(BaseModel):
    """A planned run holding its topic's lease: Step Functions state, or the local loop's variable.

    `job_id` is empty until the job is started (by the run steps, idempotently by run id; on AWS the
    state machine starts an EMR job and a Lambda run has none). `runner` is the plan's: the state
    machine's `Choice` branches on it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    run_id: str
    plan_uri: str
    grant: LeaseGrant
    attempt: int = 0
    job_id: str | None = None
    runner: RunnerKind = RunnerKind.EMR_SERVERLESS


class FailedAttempt(BaseModel):
    """A run's attempt that ended without committing - `aborted` by the abort step, or `lost` (its
    execution ended unseen) - written beside its plan as `outcome.json`, so the next plan of the same
    range takes the next attempt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: str
    reason: str
    attempt: int
    job_id: str | None = None
    ended_at_ms: int
    written_under: tuple[str, ...] = Field(
        default=(),
        description="where the run's job wrote data files: never committed unless a commit of this run "
        "landed, so files there that no table snapshot references are safe to delete",
    )
