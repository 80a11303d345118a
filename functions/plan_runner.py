"""The Lambda runner: a small run's tasks in this function, the Spark job's code without a JVM.

The state machine invokes it instead of starting an EMR Serverless job when the launcher chose it
(`RunTicket.runner` is `lambda`: the run's planned bytes are at most `runner.lambda.max_bytes`). It
runs the plan with the in-process runner (`execution/`: plan.json in, the same data files and
result.json out) and returns; the commit step is unchanged. A failed run raises
`RunNotCommittableError`, and a run that times out, runs out of memory or is killed ends the
invocation with Lambda's own error (`Sandbox.Timedout`, `Runtime.OutOfMemory`, `Runtime.ExitError`):
each reaches the state machine's `Catch` and the abort step, like a failed EMR job. The lease is
renewed meanwhile by the state machine's renewal branch. A container image (template.yaml
`PlanRunnerFunction`, `infra/lambda/runner.Dockerfile`) whose numba cache was filled at build time.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly, step_errors
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.services.run_steps import run_to_end

logger = Logger(service="kafscale-iceberg-runner")
tracer = Tracer(service="kafscale-iceberg-runner")

# Left for the invocation to return its verdict before Lambda ends it.
_MARGIN_S = 10.0


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@step_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run the ticket's plan in this function until it ends; returns the ticket with its job id."""
    steps = assembly()
    timeout_s = max(1.0, context.get_remaining_time_in_millis() / 1000 - _MARGIN_S)
    ticket = run_to_end(
        steps.in_process_runner, steps.documents, RunTicket.model_validate(event["ticket"]), timeout_s
    )
    return {"ticket": ticket.model_dump(mode="json")}
