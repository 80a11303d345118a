"""Which runner executes a run, chosen by the launcher from the run's planned bytes.

On AWS (`runner.type: emr_serverless`) a run of at most `runner.lambda.max_bytes` planned bytes runs
in the Lambda runner (the Spark job's tasks in-process, `functions/plan_runner.py`), a bigger one as
an EMR Serverless job; `max_bytes: 0` sends every run to EMR. The launcher writes the choice in the
plan and the ticket, and the state machine's `Choice` reads it from the ticket. Elsewhere the run
goes to the configured runner (`local` Spark, `inline`).

A run the Lambda runner could not finish (Lambda killed it: timeout, out of memory) would be planned
again at about the same size and killed again, forever; the abort step records the kill in the topic's
backoff document (`services/backoff.py`) and the topic's next runs go to EMR Serverless until one of
its runs commits (`lambda_kill_reason`). The kill is recognised by the error name of the failed task,
which the state machine hands the abort step as a field of its own (`error`), never by the text of
the failure.
"""

from __future__ import annotations

from enum import StrEnum


class RunnerKind(StrEnum):
    """Where a run executes (`RunPlan.runner`, `RunTicket.runner`)."""

    EMR_SERVERLESS = "emr_serverless"
    LAMBDA = "lambda"
    LOCAL = "local"
    INLINE = "inline"


# The error names Lambda and Step Functions report for a runner invocation Lambda killed, by what
# they mean (`LAMBDA_KILL_CAUSES`: the same, as metric label values).
_LAMBDA_KILLS = {
    "Sandbox.Timedout": "timed out",
    "States.Timeout": "timed out",
    "Runtime.OutOfMemory": "ran out of memory",
}
LAMBDA_KILL_CAUSES = {"timed out": "timeout", "ran out of memory": "out_of_memory"}


def choose_runner(
    runner_type: str, planned_bytes: int, lambda_max_bytes: int, *, after_lambda_kill: bool
) -> RunnerKind:
    """The runner of a run of `planned_bytes` under `runner.type` and `runner.lambda.max_bytes`;
    `after_lambda_kill`: the topic's last run was killed in the Lambda runner and nothing was
    committed since, so this one goes to EMR Serverless whatever its size."""
    kind = RunnerKind(runner_type)
    if (
        kind is RunnerKind.EMR_SERVERLESS
        and not after_lambda_kill
        and lambda_max_bytes > 0
        and planned_bytes <= lambda_max_bytes
    ):
        return RunnerKind.LAMBDA
    return kind


def lambda_kill(runner: RunnerKind, error: str | None) -> str | None:
    """What killed a run of `runner` whose failed task reported the error name `error` (the state
    machine's `$.error.Error`, handed to the abort step as is): "timed out" or "ran out of memory"
    when Lambda killed the Lambda runner, else None (the run failed on its own, or on another runner:
    a bigger runner would not help, or is already in use)."""
    if runner is not RunnerKind.LAMBDA or not error:
        return None
    return _LAMBDA_KILLS.get(error)
