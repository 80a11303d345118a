"""Events, routing, discovery, launching, jobs, invocations and replay."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafscale_iceberg.exceptions.base import KafscaleIcebergError, TransientError

if TYPE_CHECKING:
    from kafscale_iceberg.domain.leases import LeaseBusy


class MalformedEventError(KafscaleIcebergError):
    """A queue message is not an S3 notification or EventBridge event this product understands.

    Terminal: the same bytes will never parse; the message goes to the dead-letter queue with this
    reason.
    """

    def __init__(self, message_id: str, problem: str) -> None:
        self.message_id = message_id
        super().__init__(f"message {message_id}: {problem}")


class SegmentIncompleteError(TransientError):
    """The `.kfs` landed before its `.index` (or the `.index` before its `.kfs`): retry the
    notification later."""


class TopicBatchingError(TransientError):
    """A topic's pending bytes are below `runs.min_bytes_per_run` and its oldest segment is younger
    than `runs.max_wait_seconds`: look at the topic again after `wait_seconds` (the launcher Lambda
    returns the work item to its queue for that long)."""

    def __init__(self, topic: str, wait_seconds: float, detail: str) -> None:
        self.topic = topic
        self.wait_seconds = wait_seconds
        super().__init__(f"topic {topic!r}: {detail}; launching again in {wait_seconds:.0f} s")


class QueueUnavailableError(TransientError):
    """SQS refused or failed a request; the caller retries (sends are idempotent by dedup id)."""


class DiscoveryError(TransientError):
    """`discovery.mode: etcd` and the metadata snapshot can't be read: this pass is skipped."""


class UnmappedTopicError(KafscaleIcebergError):
    """A work item names a topic without a mapping (the router filters these; config changed?)."""


class RegistryUnavailableError(TransientError):
    """The registry did not answer, or answered with a server error; planning is retried."""


class SchemaNotFoundError(KafscaleIcebergError):
    """The registry has no schema for the topic (404) or returned something that is not a JSON object.

    Terminal until someone publishes the schema or changes the mapping's `schema.source`.
    """


class RegistryAuthError(KafscaleIcebergError):
    """The schema registry refused the credentials (401/403): fix `schema_registry.username`/`password`
    or `token` (or the secret they come from)."""


class JobRunnerUnavailableError(TransientError):
    """The job service could not be reached or kept throttling; retry later (same run id)."""


class JobRunnerError(KafscaleIcebergError):
    """The job service refused the request (bad application id, role, permissions): a person must act."""


class UnknownJobError(KafscaleIcebergError):
    """A job id this runner never started (the process restarted?)."""


class ReplayRequestError(KafscaleIcebergError):
    """A replay request is invalid: the message names the field, the value's problem and what is allowed.

    Terminal: the same request will never be accepted.
    """


class ReplayNotConfirmedError(KafscaleIcebergError):
    """A reset was not confirmed (no terminal and no `--yes`, or the wrong answer); nothing changed."""


class ReplayLeaseBusyError(TransientError):
    """A reset needs the topic's lease and a run (or another reset) holds it. Retry when it ends."""

    def __init__(self, busy: LeaseBusy) -> None:
        self.busy = busy
        super().__init__(
            f"cannot reset the offsets of topic {busy.topic!r}: its lease is held by "
            f"{busy.holder.describe()}; nothing was changed - retry `replay --reset-offsets` when that "
            "run ends (a run releases the lease when it commits or aborts; a dead holder's lease "
            "expires after offsets.lease_ttl_seconds)"
        )


class RedriveLeaseBusyError(TransientError):
    """A redrive needs the topic's lease and a run (or a reset, or another redrive) holds it."""

    def __init__(self, busy: LeaseBusy) -> None:
        self.busy = busy
        super().__init__(
            f"cannot re-drive the dead letters of topic {busy.topic!r}: its lease is held by "
            f"{busy.holder.describe()}; nothing was changed - retry `redrive` when that run ends (a dead "
            "holder's lease expires after offsets.lease_ttl_seconds)"
        )


class RedriveRefusedError(KafscaleIcebergError):
    """A redrive this version cannot do for a mapping (nothing was changed). Terminal."""

    def __init__(self, topic: str, table: str, problem: str) -> None:
        self.topic = topic
        self.table = table
        super().__init__(
            f"cannot re-drive the dead letters of topic {topic!r} into {table!r}: {problem}; nothing was "
            "changed (use `replay --reset-offsets` over the dead letters' offsets to re-read them instead)"
        )


class LambdaInvokeError(TransientError):
    """A function could not be invoked (throttled, unreachable, refused); the schedule still runs it."""
