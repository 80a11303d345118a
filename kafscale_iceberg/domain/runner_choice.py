"""Which runner executes a run, chosen by the launcher from the run's planned bytes.

On AWS (`runner.type: emr_serverless`) a run of at most `runner.lambda.max_bytes` planned bytes runs
in the Lambda runner (the Spark job's tasks in-process, `functions/plan_runner.py`), a bigger one as
an EMR Serverless job; `max_bytes: 0` sends every run to EMR. The launcher writes the choice in the
plan and the ticket, and the state machine's `Choice` reads it from the ticket. Elsewhere the run
goes to the configured runner (`local` Spark, `inline`).

A run the Lambda runner could not finish (Lambda killed it: timeout, out of memory) would be planned
again at about the same size and killed again, forever; the abort step records the kill in the topic's
backoff document (`services/backoff.py`) and the topic's next runs go to EMR Serverless until one of
its runs commits (`lambda_failed`).
"""

from __future__ import annotations

from enum import StrEnum


class RunnerKind(StrEnum):
    """Where a run executes (`RunPlan.runner`, `RunTicket.runner`)."""

    EMR_SERVERLESS = "emr_serverless"
    LAMBDA = "lambda"
    LOCAL = "local"
    INLINE = "inline"


# The errors Lambda and Step Functions report for a runner invocation Lambda killed, by what they mean.
_LAMBDA_KILLS = {
    "Sandbox.Timedout": "timed out",
    "States.Timeout": "timed out",
    "Runtime.OutOfMemory": "ran out of memory",
}


def choose_runner(
    runner_type: str, planned_bytes: int, lambda_max_bytes: int, *, lambda_failed: bool
) -> RunnerKind:
    """The runner of a run of `planned_bytes` under `runner.type` and `runner.lambda.max_bytes`;
    `lambda_failed`: the topic's last run was killed in the Lambda runner and nothing was committed
    since, so this one goes to EMR Serverless whatever its size."""
    kind = RunnerKind(runner_type)
    if (
        kind is RunnerKind.EMR_SERVERLESS
        and not lambda_failed
        and lambda_max_bytes > 0
        and planned_bytes <= lambda_max_bytes
    ):
        return RunnerKind.LAMBDA
    return kind


def lambda_kill(runner: RunnerKind, reason: str) -> str | None:
    """What killed a run of `runner` that failed for `reason` (the abort step's, holding the state
    machine's error and cause): "timed out" or "ran out of memory" when Lambda killed the Lambda
    runner, else None (the run failed on its own: a bigger runner would not help)."""
    if runner is not RunnerKind.LAMBDA:
        return None
    return next((what for error, what in _LAMBDA_KILLS.items() if error in reason), None)
