"""Reconciler Lambda (scheduled): signals topics the event path left behind (see `services/reconcile.py`).

Lost S3 notifications, runs whose steps died, leases of ended runs: each pass finds topics with
complete segments after their committed offsets and no run in flight, and puts a topic signal on
the work queue for the launcher.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly
from kafscale_iceberg.metrics import EMF_NAMESPACE, EMF_SERVICE, EmfMetricsSink, record_reconcile

logger = Logger(service="kafscale-iceberg-reconciler")
metrics = Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE)
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-reconciler")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One reconciler pass; returns what it did per topic (errors fail the invocation, retried next tick)."""
    report = assembly().reconciler.reconcile()
    record_reconcile(sink, report)
    released = [c.released_lease_of for c in report.checks if c.released_lease_of]
    logger.info("reconciled", source=report.source, signalled=list(report.signalled), released=released)
    return {
        "source": report.source,
        "topics": {
            c.topic: {"action": c.action.value, "detail": c.detail, "pending_segments": c.pending_segments}
            for c in report.checks
        },
    }
