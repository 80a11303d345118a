"""Router Lambda: S3 notifications (standard SQS queue) in; one work item per topic per batch (FIFO) out."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse, PartialItemFailures
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly, reject_or_raise
from kafscale_iceberg.exceptions import KafscaleIcebergError, SegmentIncompleteError
from kafscale_iceberg.metrics import (
    EMF_NAMESPACE,
    EMF_SERVICE,
    EmfMetricsSink,
    record_route,
    record_route_failure,
)
from kafscale_iceberg.services.route import RouteBatch

logger = Logger(service="kafscale-iceberg-router")
metrics = Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE)
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-router")
processor = BatchProcessor(event_type=EventType.SQS)

INCOMPLETE_RETRY_SECONDS = 10
"""A `.kfs` whose `.index` has not landed is delivered again after this many seconds per receive
(capped at `INCOMPLETE_RETRY_MAX_SECONDS`), not after the queue's visibility timeout (180 s)."""
INCOMPLETE_RETRY_MAX_SECONDS = 120


def _route(record: SQSRecord, batch: RouteBatch) -> None:
    try:
        outcome = batch.route(record.body, record.message_id)
    except SegmentIncompleteError as exc:
        record_route_failure(sink, exc)
        _redeliver_soon(record)
        raise
    except KafscaleIcebergError as exc:
        logger.warning("notification not routed", message_id=record.message_id, error=str(exc))
        record_route_failure(sink, exc)
        reject_or_raise(record.body, record.message_id, exc)
        return
    record_route(sink, outcome)


def _redeliver_soon(record: SQSRecord) -> None:
    receives = int(record.attributes.approximate_receive_count or 1)
    seconds = min(INCOMPLETE_RETRY_SECONDS * receives, INCOMPLETE_RETRY_MAX_SECONDS)
    try:
        assembly().sqs_redelivery.redeliver_after(record.event_source_arn, record.receipt_handle, seconds)
    except (KafscaleIcebergError, ValueError) as exc:
        # The message still comes back, after the queue's visibility timeout.
        logger.warning("could not shorten the redelivery", message_id=record.message_id, error=str(exc))
    else:
        logger.info(
            "segment incomplete; redelivery in seconds", message_id=record.message_id, seconds=seconds
        )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Route each record, then enqueue one work item per topic; failed records (and those whose items
    could not be enqueued) are returned for SQS to redeliver (partial batch response)."""
    batch = assembly().router.batch()
    response = process_partial_response(
        event=event, record_handler=lambda record: _route(record, batch), processor=processor, context=context
    )
    unsent = batch.send()
    unsent_items: list[PartialItemFailures] = [{"itemIdentifier": message_id} for message_id in unsent]
    response["batchItemFailures"] = [*response["batchItemFailures"], *unsent_items]
    return response
