"""Run-step Lambdas for the state machine (`infra/state_machine.asl.json`): start, watch (renew), abort.
The Lambda runner (a small run's tasks in-process) is `functions/plan_runner.py`.

Each takes the state's `ticket` and returns the fields the next state needs; the abort step also
returns the re-signal message (`signal`: SQS fields built by `TopicSignal.sqs_message`, so the state
machine never builds a FIFO group or deduplication id itself). Failures are reported under the names
the state machine's `Retry` matches (`step_errors`). The commit step is in
`functions/commit.py` (a container image: it needs pyiceberg and pyarrow).
"""

from __future__ import annotations

import uuid
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly, step_errors
from kafscale_iceberg.domain.events import TopicSignal
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.metrics import EMF_NAMESPACE, EMF_SERVICE, EmfMetricsSink, record_abort
from kafscale_iceberg.services.run_steps import failure_reason

logger = Logger(service="kafscale-iceberg-steps")
metrics = Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE)
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-steps")


def _ticket(event: dict[str, Any]) -> RunTicket:
    return RunTicket.model_validate(event["ticket"])


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@step_errors
def start_job(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Renew the lease and hand the state machine the request of the run's runner (`job`, asked of
    the runner the launcher chose, `ticket.runner`): EMR's is the one `StartJobRun` call of its
    startJobRun.sync task (the run id is its ClientToken); the Lambda runner's is empty (the state
    machine invokes it with the ticket)."""
    steps = assembly()
    ticket = _ticket(event)
    plan = steps.run_steps().prepare_job(ticket)
    job = steps.aws_runners.step_request(plan, ticket.plan_uri)
    return {"ticket": ticket.model_dump(mode="json"), "job": job}


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@step_errors
def watch(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One lease renewal (the state machine's Renew step, every few minutes while the job or the Lambda
    runner runs; a ticket with a job id also gets one look at the job); `lease_lost` ends the wait
    (the state machine stops the branch running the job)."""
    ticket = _ticket(event)
    result = assembly().run_steps().watch(ticket)
    status = result.status
    succeeded = status is not None and status.state.value == "succeeded" and not result.lease_lost
    return {
        "ticket": ticket.model_dump(mode="json"),
        "done": result.is_final,
        "succeeded": succeeded,
        "lease_lost": result.lease_lost,
        "job_state": "" if status is None else status.runner_state,
        "reason": "" if succeeded else failure_reason(status, lease_lost=result.lease_lost),
    }


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@step_errors
def abort(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Record the failed attempt, release the lease, and say when to re-signal the topic. The state
    machine passes the failure's text (`reason`) and the failed task's error name (`error`)."""
    ticket = _ticket(event)
    reason = str(event.get("reason") or event.get("error") or "run failed")
    error = str(event.get("error") or "") or None
    result = assembly().run_steps().abort(ticket, reason, error=error)
    record_abort(
        sink,
        ticket.topic,
        result.consecutive_failures,
        run_started_at=ticket.grant.claimed_at_ms / 1000,
        lambda_killed=result.lambda_killed,
    )
    signal = TopicSignal(topic=ticket.topic, reason="retry after a failed run", nonce=uuid.uuid4().hex)
    return {
        "topic": ticket.topic,
        "resignal_after_seconds": result.resignal_after_seconds,
        "alarm": result.alarm,
        "signal": signal.sqs_message(),
    }
