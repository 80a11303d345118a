"""Replay Lambda (the commit function's container image: it reads the table, and a reset deletes rows).

Invoked by hand or by automation, never by a queue. Event (samples in `events/replay_*.json`):
`{"topic": str, "partitions": [int] | null, "from_offset": int | null, "reset_offsets": bool,
"confirm": "<topic>"}` - `confirm` must equal the topic when `reset_offsets` is true. An invalid
event fails the invocation with a message naming the field; nothing is changed.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import assembly
from kafscale_iceberg.domain.replay import ReplayEvent
from kafscale_iceberg.exceptions import KafscaleIcebergError
from kafscale_iceberg.metrics import (
    EMF_NAMESPACE,
    EMF_SERVICE,
    EmfMetricsSink,
    ErrorStage,
    error_stage,
    record_error,
    record_replay,
)

logger = Logger(service="kafscale-iceberg-replay")
metrics = Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE)
sink = EmfMetricsSink(metrics)
tracer = Tracer(service="kafscale-iceberg-replay")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Replay (and with `reset_offsets`, first rebuild) the event's range; returns the outcome as JSON."""
    try:
        request = ReplayEvent.parse(event, source="replay event").request()
        logger.append_keys(topic=request.topic)
        outcome = assembly().replay.replay(request)
    except KafscaleIcebergError as exc:
        logger.error("replay refused or failed", error=str(exc), transient=exc.transient)
        record_error(sink, error_stage(exc, default=ErrorStage.REPLAY))
        raise
    record_replay(sink, request.topic, outcome)
    logger.info("replay", reset=outcome.reset_done, enqueued=outcome.enqueued, summary=outcome.summary())
    return outcome.to_json()
