"""Which runner executes a run, chosen by the launcher from the run's planned bytes.

On AWS (`runner.type: emr_serverless`) a run of at most `runner.lambda.max_bytes` planned bytes runs
in the Lambda runner (the Spark job's tasks in-process, `functions/plan_runner.py`), a bigger one as
an EMR Serverless job; `max_bytes: 0` sends every run to EMR. The launcher writes the choice in the
plan and the ticket, and the state machine's `Choice` reads it from the ticket. Elsewhere the run
goes to the configured runner (`local` Spark, `inline`).
"""

from __future__ import annotations

from enum import StrEnum


class RunnerKind(StrEnum):
    """Where a run executes (`RunPlan.runner`, `RunTicket.runner`)."""

    EMR_SERVERLESS = "emr_serverless"
    LAMBDA = "lambda"
    LOCAL = "local"
    INLINE = "inline"


def choose_runner(runner_type: str, planned_bytes: int, lambda_max_bytes: int) -> RunnerKind:
    """The runner of a run of `planned_bytes` under `runner.type` and `runner.lambda.max_bytes`."""
    kind = RunnerKind(runner_type)
    if kind is RunnerKind.EMR_SERVERLESS and lambda_max_bytes > 0 and planned_bytes <= lambda_max_bytes:
        return RunnerKind.LAMBDA
    return kind
