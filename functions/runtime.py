"""What every handler shares: the cached composition root and the rejection of hopeless messages."""

from __future__ import annotations

from functools import cache

from kafscale_iceberg.assembly import Assembly, config_from_environment
from kafscale_iceberg.exceptions import KafscaleIcebergError


@cache
def assembly() -> Assembly:
    """The process's dependencies, built on first use (config validated once per cold start)."""
    return Assembly(config_from_environment())


def reject_or_raise(body: str, message_id: str, error: KafscaleIcebergError) -> None:
    """Park a message that can never succeed on the rejected-messages queue, with its reason.

    Transient errors are re-raised so the batch processor reports the message as failed and SQS
    redelivers it; with no rejected-messages queue configured, terminal errors are re-raised too and
    reach the queue's DLQ through redrive.
    """
    url = assembly().config.notifications.rejected_queue_url
    if error.transient or not url:
        raise error
    import boto3  # noqa: PLC0415

    from kafscale_iceberg.adapters.sqs_queues import SqsDeadLetterQueue  # noqa: PLC0415

    client = boto3.client("sqs", region_name=assembly().config.s3.region or None)
    SqsDeadLetterQueue(client, url).reject(body, message_id=message_id, reason=str(error))
