"""Launcher Lambda: per-topic work items (FIFO queue) in; a planned, started run per topic out.

A batch may hold several topics; each topic is launched once per batch, whatever the number of its
items. Powertools' `SqsFifoPartialProcessor` with `skip_group_on_error` keeps FIFO order per message
group (one group per topic): once a record of a topic fails, the topic's later records in the batch
are reported as failed too, for SQS to redeliver in order; other topics carry on.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly, reject_or_raise
from kafscale_iceberg.domain.events import parse_topic_message
from kafscale_iceberg.exceptions import KafscaleIcebergError
from kafscale_iceberg.metrics import (
    EMF_NAMESPACE,
    EmfMetricsSink,
    ErrorStage,
    error_stage,
    record_error,
    record_launch,
)

logger = Logger(service="kafscale-iceberg-launcher")
metrics = Metrics(namespace=EMF_NAMESPACE, service="launcher")
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-launcher")
processor = SqsFifoPartialProcessor(skip_group_on_error=True)
# A batch whose every record failed is reported record by record too (Powertools would raise instead,
# failing the invocation): the same redelivery, without a Lambda error for a topic's launch failure.
processor.raise_on_entire_batch_failure = False


def _launch(record: SQSRecord, launched: set[str]) -> None:
    """Launch the record's topic unless this batch already did (`launched`: a topic's later items are
    covered by its launch)."""
    try:
        item = parse_topic_message(record.body, record.message_id)
    except KafscaleIcebergError as exc:
        reject_or_raise(record.body, record.message_id, exc)  # transient, or no rejected queue: fails
        return
    if item.topic in launched:
        return
    try:
        outcome = assembly().launcher.launch(item.topic)
    except KafscaleIcebergError as exc:
        logger.error("launch failed", topic=item.topic, error=str(exc), transient=exc.transient)
        record_error(sink, error_stage(exc, default=ErrorStage.LAUNCH))
        raise
    launched.add(item.topic)
    run_id = outcome.ticket.run_id if outcome.ticket else None
    logger.info("launch", topic=item.topic, status=outcome.status.value, run_id=run_id, detail=outcome.detail)
    record_launch(sink, outcome)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Launch each topic named in the batch; report the records of failed topics (partial batch)."""
    launched: set[str] = set()
    return process_partial_response(
        event=event,
        record_handler=lambda record: _launch(record, launched),
        processor=processor,
        context=context,
    )
