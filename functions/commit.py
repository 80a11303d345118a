"""Commit Lambda (container image): the final step — one Iceberg snapshot per table, then offsets."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly
from kafscale_iceberg.domain.tickets import RunTicket

logger = Logger(service="kafscale-iceberg-commit")
metrics = Metrics(namespace="KafScaleIceberg", service="commit")
tracer = Tracer(service="kafscale-iceberg-commit")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Commit the run in the event's ticket; errors fail the state (retried, then aborted)."""
    ticket = RunTicket.model_validate(event["ticket"])
    outcome = assembly().run_steps(with_commits=True).commit(ticket)
    metrics.add_dimension(name="topic", value=ticket.topic)
    metrics.add_metric(name="runs_committed_total", unit=MetricUnit.Count, value=1)
    return {
        "topic": ticket.topic,
        "run_id": ticket.run_id,
        "table_committed": outcome.table_committed,
        "offsets": {str(p): o for p, o in outcome.offsets.items()},
    }
