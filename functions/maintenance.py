"""Maintenance Lambda (scheduled, and invoked by the commit function's small-file trigger).

Each invocation is one `maintain` pass (`services/maintenance.py`) over the mapped tables (the
schedule) or over the event's `topics` (the trigger): compaction when a table has
`maintenance.compaction_min_small_files` small files, as an EMR Serverless job through the job
runner (`services/compaction_jobs.py`: the pass plans and starts the job, waits up to
`maintenance.compaction_wait_seconds`, checks and commits its result; a job still running is
committed by the next pass), snapshot expiry and orphan-file cleanup. Every step is idempotent: a
failed pass is replaced by the next one and alarms through Lambda Errors.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly
from kafscale_iceberg.metrics import (
    EMF_NAMESPACE,
    EMF_SERVICE,
    EmfMetricsSink,
    maintenance_totals,
    record_maintenance,
)

logger = Logger(service="kafscale-iceberg-maintenance")
metrics = Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE)
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-maintenance")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One maintenance pass; returns what it did per table (errors fail the invocation)."""
    # The schedule's event names no topic (all tables); the small-file trigger's names its topic.
    topics = [str(t) for t in event.get("topics", [])]
    report = assembly().maintenance.maintain(topics=topics, dry_run=bool(event.get("dry_run", False)))
    record_maintenance(sink, report)
    compacted, expired, _ = maintenance_totals(report)
    logger.info("maintained", tables=[t.table for t in report.tables], compacted=compacted, expired=expired)
    return report.to_json()
