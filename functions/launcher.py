"""Launcher Lambda: per-topic work items (FIFO queue) in; a planned, started run per topic out.

A batch may hold several topics; each topic is launched once per batch, whatever the number of its
items. Items of a topic whose launch failed transiently are returned for redelivery.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly, reject_or_raise
from kafscale_iceberg.domain.events import parse_topic_message
from kafscale_iceberg.exceptions import KafscaleIcebergError
from kafscale_iceberg.metrics import EMF_NAMESPACE, EmfMetricsSink, ErrorStage, record_error, record_launch

logger = Logger(service="kafscale-iceberg-launcher")
metrics = Metrics(namespace=EMF_NAMESPACE, service="launcher")
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-launcher")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Launch each topic named in the batch; report the records of failed topics (partial batch)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    failures: list[dict[str, str]] = []
    for record in event.get("Records", []):
        try:
            item = parse_topic_message(record["body"], record["messageId"])
        except KafscaleIcebergError as exc:
            try:
                reject_or_raise(record["body"], record["messageId"], exc)
            except KafscaleIcebergError:
                failures.append({"itemIdentifier": record["messageId"]})
            continue
        by_topic.setdefault(item.topic, []).append(record)
    for topic, records in by_topic.items():
        try:
            outcome = assembly().launcher.launch(topic)
        except KafscaleIcebergError as exc:
            logger.error("launch failed", topic=topic, error=str(exc), transient=exc.transient)
            record_error(sink, ErrorStage.LAUNCH)
            failures.extend({"itemIdentifier": r["messageId"]} for r in records)
            continue
        run_id = outcome.ticket.run_id if outcome.ticket else None
        logger.info("launch", topic=topic, status=outcome.status.value, run_id=run_id, detail=outcome.detail)
        record_launch(sink, outcome)
    return {"batchItemFailures": failures}
