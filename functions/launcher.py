"""Launcher Lambda: per-topic work items (FIFO queue) in; a planned, started run per topic out.

A batch may hold several topics; each topic is launched once per batch, whatever the number of its
items. Powertools' `SqsFifoPartialProcessor` with `skip_group_on_error` keeps FIFO order per message
group (one group per topic): once a record of a topic fails, the topic's later records in the batch
are reported as failed too, for SQS to redeliver in order; other topics carry on.

A topic waiting for a larger batch (`runs.min_bytes_per_run`, at most `runs.max_wait_seconds`) has
nothing else to signal it when no more segments come: its records are reported failed and made
visible again after the wait (`ChangeMessageVisibility`), so the topic is launched then. Every record
of its message group in the batch gets the same visibility: the group stays blocked while any of
them is in flight.
"""

from __future__ import annotations

import math
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly, reject_or_raise
from kafscale_iceberg.domain.events import TopicSignal, parse_topic_message
from kafscale_iceberg.exceptions import KafscaleIcebergError, TopicBatchingError
from kafscale_iceberg.metrics import (
    EMF_NAMESPACE,
    EMF_SERVICE,
    EmfMetricsSink,
    ErrorStage,
    error_stage,
    record_error,
    record_launch,
)

logger = Logger(service="kafscale-iceberg-launcher")
metrics = Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE)
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-launcher")
processor = SqsFifoPartialProcessor(skip_group_on_error=True)
# A batch whose every record failed is reported record by record too (Powertools would raise instead,
# failing the invocation): the same redelivery, without a Lambda error for a topic's launch failure.
processor.raise_on_entire_batch_failure = False


def _launch(record: SQSRecord, launched: set[str], waiting: dict[str, float]) -> None:
    """Launch the record's topic unless this batch already did (`launched`: a topic's later items are
    covered by its launch); a topic waiting for a larger batch fails its record (`waiting`: by message
    group, the seconds to wait)."""
    try:
        item = parse_topic_message(record.body, record.message_id)
    except KafscaleIcebergError as exc:
        reject_or_raise(record.body, record.message_id, exc)  # transient, or no rejected queue: fails
        return
    if item.topic in launched:
        return
    segment_ends = item.segment_ends if isinstance(item, TopicSignal) else None
    try:
        outcome = assembly().launcher.launch(item.topic, segment_ends=segment_ends)
    except KafscaleIcebergError as exc:
        logger.error("launch failed", topic=item.topic, error=str(exc), transient=exc.transient)
        record_error(sink, error_stage(exc, default=ErrorStage.LAUNCH))
        raise
    launched.add(item.topic)
    run_id = outcome.ticket.run_id if outcome.ticket else None
    logger.info("launch", topic=item.topic, status=outcome.status.value, run_id=run_id, detail=outcome.detail)
    record_launch(sink, outcome)
    if outcome.batching:
        waiting[record.attributes.message_group_id or ""] = outcome.wait_seconds
        raise TopicBatchingError(item.topic, outcome.wait_seconds, outcome.detail)


def _redeliver_after_wait(event: dict[str, Any], failed: set[str], waiting: dict[str, float]) -> None:
    """Make the failed records of each waiting topic visible again when its wait ends."""
    for record in (SQSRecord(r) for r in event.get("Records", [])):
        group = record.attributes.message_group_id or ""
        if group in waiting and record.message_id in failed:
            seconds = math.ceil(waiting[group])
            try:
                assembly().sqs_redelivery.redeliver_after(
                    record.event_source_arn, record.receipt_handle, seconds
                )
            except (KafscaleIcebergError, ValueError) as exc:
                # The record still comes back, after the queue's visibility timeout.
                logger.warning("could not time the redelivery", message_id=record.message_id, error=str(exc))


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Launch each topic named in the batch; report the records of failed topics (partial batch)."""
    launched: set[str] = set()
    waiting: dict[str, float] = {}
    response = process_partial_response(
        event=event,
        record_handler=lambda record: _launch(record, launched, waiting),
        processor=processor,
        context=context,
    )
    if waiting:
        failed = {str(f["itemIdentifier"]) for f in response["batchItemFailures"]}
        _redeliver_after_wait(event, failed, waiting)
    return response
