"""Commit Lambda (container image): the final step — one Iceberg snapshot per table, then offsets, then
the topic's signal for what arrived while the run held the lease.

The signal is sent here rather than by a state of its own (a Standard execution bills each state it
enters: two fewer a run, docs/cost.md). It is deduplicated by run id, so a retried commit step sends
one message; a send that fails cannot fail the committed run (logged; the reconciler finds what is
pending on its next pass).
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly, step_errors
from kafscale_iceberg.domain.events import TopicSignal
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.exceptions import KafscaleIcebergError
from kafscale_iceberg.metrics import (
    EMF_NAMESPACE,
    EMF_SERVICE,
    EmfMetricsSink,
    record_commit,
    record_commit_failure,
)

logger = Logger(service="kafscale-iceberg-commit")
metrics = Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE)
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-commit")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@step_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Commit the run in the event's ticket; errors fail the state (transient ones retried as
    `TransientError`, then aborted)."""
    ticket = RunTicket.model_validate(event["ticket"])
    started = time.time()
    try:
        committed = assembly().run_steps().commit_run(ticket)
    except KafscaleIcebergError as exc:
        record_commit_failure(sink, exc)
        raise
    record_commit(
        sink, committed.plan, committed.result, committed.outcome, started_at=started, ended_at=time.time()
    )
    if committed.outcome.table_committed:
        assembly().maintenance_trigger.after_commit(ticket.topic, committed.outcome.states)  # never raises
    # Segments may have arrived while the run held the lease. The run's ends are segments' ends (the
    # launcher planned them from footers): the launcher need not probe behind them.
    signal = TopicSignal(
        topic=ticket.topic,
        reason="run committed",
        nonce=ticket.run_id,
        segment_ends=committed.plan.end_offsets(),
    )
    return {
        "topic": ticket.topic,
        "run_id": ticket.run_id,
        "table_committed": committed.outcome.table_committed,
        "offsets": {str(p): o for p, o in committed.outcome.offsets.items()},
        "signalled": _signal(signal),
    }


def _signal(signal: TopicSignal) -> bool:
    """Send the signal after a commit; never raises (the run is committed whatever happens here)."""
    try:
        assembly().work_queue.send_signal(signal)
    except KafscaleIcebergError as exc:  # SQS failed, or no work queue configured
        logger.warning(
            "the topic could not be signalled after its commit; the reconciler finds what is pending",
            topic=signal.topic,
            run_id=signal.nonce,
            error=f"{type(exc).__name__}: {exc}",
        )
        return False
    return True
