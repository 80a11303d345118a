"""What every handler shares: the cached composition root and the rejection of hopeless messages."""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import cache
from typing import ParamSpec, TypeVar

from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_environment
from kafscale_iceberg.exceptions import KafscaleIcebergError, TransientError

P = ParamSpec("P")
R = TypeVar("R")

RETRIED_ERROR = TransientError.__name__
"""The one error name the state machine retries a step on (besides Lambda's own `Lambda.*` errors)."""


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


def step_errors(handler: Callable[P, R]) -> Callable[P, R]:
    """Report a state-machine step's failures under names its `Retry` and `Catch` can match.

    Lambda reports an exception as its own class name (`errorType`), and a Step Functions `Retry`
    matches names exactly, never base classes: every transient failure (`error.transient`, whatever
    its class) is raised again as `TransientError` with the original class named in the message, so
    `"ErrorEquals": ["TransientError"]` retries all of them. Other errors keep their names and reach
    the `Catch` (abort).
    """

    @functools.wraps(handler)
    def surfaced(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return handler(*args, **kwargs)
        except KafscaleIcebergError as exc:
            if exc.transient and type(exc) is not TransientError:
                raise TransientError(f"{type(exc).__name__}: {exc}") from exc
            raise

    return surfaced
