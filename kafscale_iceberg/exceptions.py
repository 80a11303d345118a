"""The error hierarchy: every error says what failed, on which identifiers, and what to do next.

Each error is either *transient* (retrying the same work later may succeed: a network blip, a busy
lease, a segment whose `.index` has not landed yet) or *terminal* (retrying changes nothing until a
person acts: a corrupt segment, a bad config). Callers decide retry from `error.transient`, never
from the class name. Foreign exceptions are translated once, in the adapter, with `raise ... from`.

One hierarchy, said one way: every error class of the package is defined in this module, and an
error is transient exactly when it subclasses `TransientError` (the one class that sets
`transient`). The run state machine retries the name `TransientError`: the step Lambdas raise every
transient error under that name (`functions/runtime.step_errors`), so a class's transience means
the same to the state machine as to the code that raised it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from kafscale_iceberg.domain.leases import LeaseBusy


class KafscaleIcebergError(Exception):
    """Base of every error this package raises on purpose."""

    transient: ClassVar[bool] = False
    """True for `TransientError` and its subclasses only: subclass `TransientError` to say it."""


class TransientError(KafscaleIcebergError):
    """Retrying the same work later may succeed; the state machine retries this name."""

    transient: ClassVar[bool] = True


class ConfigError(KafscaleIcebergError):
    """The configuration is invalid; the message names the YAML key and the allowed values."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"config key '{key}': {problem}")


class ConfigValidationError(ConfigError):
    """A config source failed to load; `problems` holds every `(key path, problem)` found, not only the first.

    `key` and `problem` are those of the first problem; the message lists them all, one per line, and
    never contains a secret's value.
    """

    def __init__(self, source: str, problems: Sequence[tuple[str, str]], *, note: str = "") -> None:
        if not problems:
            raise ValueError("ConfigValidationError needs at least one problem")
        self.source = source
        self.problems = tuple(problems)
        super().__init__(*self.problems[0])
        count = len(self.problems)
        lines = [f"invalid configuration in {source} ({count} problem{'' if count == 1 else 's'}):"]
        lines += [f"  {key}: {problem}" if key else f"  {problem}" for key, problem in self.problems]
        if note:
            lines.append(note)
        self.args = ("\n".join(lines),)


class SegmentKeyError(KafscaleIcebergError):
    """An S3 key is not a KafScale segment or index key (or names an invalid topic)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"not a KafScale segment key: {key!r}: {problem}")


class SegmentFormatError(KafscaleIcebergError):
    """A segment or index file is corrupt or truncated.

    Names the object, the byte position where decoding failed and what was expected there. Terminal:
    the bytes will not change by retrying; repair or replace the object, or quarantine it by policy.
    """

    def __init__(self, source: str, position: int, problem: str) -> None:
        self.source = source
        self.position = position
        self.problem = problem
        super().__init__(
            f"{source}: byte {position}: {problem} "
            "(the object is corrupt or truncated: re-upload it from the broker, or set the "
            "corrupt-segment policy to 'quarantine' to record it in the dead-letter table and move on)"
        )


class TruncatedSegmentError(SegmentFormatError):
    """The data ends before a structure that must be complete (header, batch, footer, index entry)."""


class CrcMismatchError(SegmentFormatError):
    """A batch CRC-32C or the footer's body CRC-32C does not match the bytes."""


class UnsupportedCodecError(SegmentFormatError):
    """A record batch names a compression codec that Kafka does not define."""


class CheckpointError(KafscaleIcebergError):
    """A lease or offset operation on the checkpoint store (etcd or the SQLite file) failed."""


class CheckpointUnavailableError(CheckpointError, TransientError):
    """The checkpoint store could not be reached (or was busy); nothing was written. Transient.

    `problem` names every endpoint (or the SQLite file) that was tried and why each failed.
    """

    def __init__(self, operation: str, targets: tuple[str, ...], problem: str) -> None:
        self.operation = operation
        self.targets = targets
        self.problem = problem
        super().__init__(
            f"checkpoint store unavailable while trying to {operation}: {problem} (nothing was "
            "written; check that the store is up and the endpoints (etcd.endpoints) are right, then retry)"
        )


class CheckpointAuthError(CheckpointError):
    """The checkpoint store rejected our credentials or permissions. Terminal: fix the config.

    Names the user, never the password.
    """

    def __init__(self, operation: str, targets: tuple[str, ...], username: str | None, problem: str) -> None:
        self.operation = operation
        self.targets = targets
        self.username = username
        self.problem = problem
        who = f"user {username!r}" if username else "no user (etcd.username is empty)"
        super().__init__(
            f"checkpoint store at {', '.join(targets)} refused to {operation} as {who}: {problem} "
            "(fix etcd.username / etcd.password, or grant the user read-write access to the key prefix)"
        )


class CheckpointRequestError(CheckpointError):
    """The checkpoint store answered with an error we do not expect to go away by retrying."""

    def __init__(self, operation: str, targets: tuple[str, ...], problem: str) -> None:
        self.operation = operation
        self.targets = targets
        self.problem = problem
        super().__init__(f"checkpoint store at {', '.join(targets)} failed to {operation}: {problem}")


class CheckpointDataError(CheckpointError):
    """A value stored under one of our keys is not what this product (or the Go processor) writes.

    Terminal: someone else writes under the key prefix, or the value was edited by hand. Inspect the
    key and fix or delete it; never guessed around.
    """

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"checkpoint key {key!r}: {problem} (inspect the key; fix or delete the value)")


class LeaseLostError(CheckpointError):
    """This run's topic lease expired, was released, or now belongs to another claim.

    Terminal for this run: it must stop without committing offsets (nothing was written by the call
    that raised this, except - for a commit too wide for one etcd transaction - the partitions in
    `written_partitions`). The topic is not stuck: the new holder, or the next run, carries on.
    """

    def __init__(
        self, topic: str, token: int, run_id: str, reason: str, written_partitions: tuple[int, ...] = ()
    ) -> None:
        self.topic = topic
        self.token = token
        self.run_id = run_id
        self.reason = reason
        self.written_partitions = written_partitions
        written = (
            f"the offsets of partitions {list(written_partitions)} were written before the loss (a "
            "commit wider than one etcd transaction); nothing else was written"
            if written_partitions
            else "nothing was written"
        )
        super().__init__(
            f"lease on topic {topic!r} lost by run {run_id!r} (fencing token {token}): {reason}; "
            f"{written}: stop this run, the current or next lease holder takes over"
        )


class OffsetRegressionError(CheckpointError):
    """A commit would move a committed offset backwards. Terminal; nothing was written.

    A deliberate rewind is `reset_offsets` (the `replay --reset-offsets` command), never a commit.
    """

    def __init__(self, topic: str, partition: int, committed: int, attempted: int) -> None:
        self.topic = topic
        self.partition = partition
        self.committed = committed
        self.attempted = attempted
        super().__init__(
            f"refusing to move the committed offset of {topic}/{partition} backwards from {committed} "
            f"to {attempted} (nothing was written; to re-ingest on purpose, reset the offsets with "
            "`replay --reset-offsets`)"
        )


class ConcurrentOffsetUpdateError(CheckpointError, TransientError):
    """The offsets changed under us between read and write, every attempt, while our lease held.

    Transient: something writes offsets without holding the topic lease, most likely a KafScale Go
    processor still running against the same key prefix. Stop it before switching over.
    """

    def __init__(self, topic: str, partitions: tuple[int, ...], attempts: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.attempts = attempts
        super().__init__(
            f"offsets of topic {topic!r} partitions {list(partitions)} changed concurrently {attempts} "
            "times while this run held the lease (nothing was written; is a KafScale Go processor "
            "still running against the same offsets.key_prefix? stop it, then retry)"
        )


class DecompressedSizeError(SegmentFormatError):
    """A compressed batch expands beyond the decoder's payload limit (corrupt, or a decompression bomb)."""


class CatalogError(KafscaleIcebergError):
    """The Iceberg catalog could not be loaded or refused a request.

    Names the catalog type and URI (never a token or password), the operation and the table.
    """

    def __init__(self, catalog: str, operation: str, problem: str) -> None:
        self.catalog = catalog
        self.operation = operation
        self.problem = problem
        super().__init__(f"iceberg catalog {catalog}: {operation} failed: {problem}")


class CatalogUnavailableError(CatalogError, TransientError):
    """The catalog (or its warehouse storage) did not answer, or answered with a server error. Transient."""


class TableMissingError(KafscaleIcebergError):
    """A mapped table does not exist and the mapping does not allow creating it. Terminal."""

    def __init__(self, table: str) -> None:
        self.table = table
        super().__init__(
            f"table {table!r} does not exist (create it, or set create_table_if_missing: true on its mapping)"
        )


class SchemaChangeError(KafscaleIcebergError):
    """A column's type in the table and in the mapping differ in a way that is not applied. Terminal.

    Names the table, the column, the table's type and the mapping's type, and what to do.
    """

    def __init__(self, table: str, column: str, table_type: str, mapped_type: str, advice: str) -> None:
        self.table = table
        self.column = column
        self.table_type = table_type
        self.mapped_type = mapped_type
        super().__init__(
            f"table {table!r} column {column!r}: the table has type {table_type}, the mapping asks for "
            f"{mapped_type}: {advice}"
        )


class PartitionSpecMismatchError(KafscaleIcebergError):
    """The table is partitioned by a field the run's files are not split by. Terminal."""

    def __init__(self, table: str, table_fields: str, mapped_fields: str) -> None:
        self.table = table
        super().__init__(
            f"table {table!r} is partitioned by [{table_fields}] but the mapping's partition_by is "
            f"[{mapped_fields}]: each data file must hold one value per table partition field; make "
            "partition_by list every partition field of the table (or evolve the table's spec)"
        )


class TableMarkerError(KafscaleIcebergError):
    """A `kafscale.*` property of a table is not what this product writes. Terminal: inspect it."""

    def __init__(self, table: str, key: str, problem: str) -> None:
        self.table = table
        self.key = key
        super().__init__(
            f"table {table!r} property {key!r}: {problem} (it is written only by the commit step; "
            "restore it from the newest snapshot summary's kafscale.* keys)"
        )


class DataFileRejectedError(KafscaleIcebergError):
    """The catalog refused to add a run's data file (schema, partition values, missing file). Terminal."""

    def __init__(self, table: str, run_id: str, problem: str) -> None:
        self.table = table
        self.run_id = run_id
        super().__init__(
            f"run {run_id!r}: the data files could not be added to table {table!r}: {problem} "
            "(nothing was committed; fix the Spark output or the table, then retry the commit)"
        )


class FieldIdMismatchError(DataFileRejectedError):
    """A run's files carry field ids that are not the table's (it changed after planning). Terminal."""

    def __init__(self, table: str, run_id: str, mismatches: Mapping[str, tuple[int, int | None]]) -> None:
        self.mismatches = dict(mismatches)
        described = ", ".join(
            f"{name}: file id {planned}, table id {'none' if found is None else found}"
            for name, (planned, found) in sorted(mismatches.items())
        )
        super().__init__(
            table,
            run_id,
            f"the files' Parquet field ids differ from the table's ({described}); the table's schema "
            "changed after the run was planned. Abort the run: the next attempt is planned with the "
            "table's ids",
        )


class InferredColumnChangedError(FieldIdMismatchError):
    """An inferred column the run wrote has another type in the table than in the run's files (the
    table gained it meanwhile, from another run). Terminal for this run; the next attempt is planned
    with the table's columns, and is refused before any write like a field-id mismatch."""

    def __init__(self, table: str, run_id: str, conflicts: Mapping[str, tuple[str, str]]) -> None:
        self.mismatches = {}
        self.conflicts = dict(conflicts)
        described = ", ".join(
            f"{name}: files {written}, table {found}" for name, (written, found) in sorted(conflicts.items())
        )
        DataFileRejectedError.__init__(
            self,
            table,
            run_id,
            f"inferred columns have another type in the table than in the files ({described}); the "
            "table's schema changed after the run was planned. Abort the run: the next attempt is "
            "planned with the table's columns",
        )


class RunNotCommittableError(KafscaleIcebergError):
    """The run result can never be committed (a failed run, or a result of another plan). Terminal."""

    def __init__(self, run_id: str, problem: str) -> None:
        self.run_id = run_id
        self.problem = problem
        super().__init__(f"run {run_id!r} cannot be committed: {problem}")


class RunAttemptEndedError(KafscaleIcebergError):
    """A run id's attempt already ended without its outcome being recorded (its steps died).

    The launcher records the attempt as lost and plans the range under the next attempt.
    """

    def __init__(self, run_id: str, problem: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r}: {problem}")


class OffsetMismatchError(KafscaleIcebergError):
    """The committed offsets are not where the run starts: someone committed meanwhile. Terminal.

    `mismatches` holds `(partition, expected start, committed offset found)`. Nothing was written.
    """

    def __init__(
        self,
        table: str,
        topic: str,
        run_id: str,
        mismatches: Sequence[tuple[int, int, int]],
        *,
        repaired: Mapping[int, int] | None = None,
    ) -> None:
        self.table = table
        self.topic = topic
        self.run_id = run_id
        self.mismatches = tuple(mismatches)
        self.repaired: dict[int, int] = dict(repaired or {})
        """Partitions whose checkpoint-store offset was set to the table's (fenced) before raising."""
        detail = "; ".join(
            f"partition {partition}: run starts after {expected}, committed is {found}"
            for partition, expected, found in self.mismatches
        )
        if self.repaired:
            action = (
                f"nothing was written; the checkpoint store was repaired to the table's offsets "
                f"{dict(sorted(self.repaired.items()))}, so the next plan starts there - no action needed"
            )
        else:
            action = "nothing was written; abort this run and plan a new one from the committed offsets"
        super().__init__(
            f"refusing to commit run {run_id!r} of topic {topic!r} to {table!r}: {detail} ({action})"
        )


class CommitConflictError(TransientError):
    """The table kept changing under the commit; each attempt was verified not to have landed. Transient."""

    def __init__(self, table: str, run_id: str, attempts: int) -> None:
        self.table = table
        self.run_id = run_id
        self.attempts = attempts
        super().__init__(
            f"run {run_id!r}: table {table!r} changed concurrently on each of {attempts} commit attempts "
            "(verified: none landed; another writer is committing to this table - retry the commit later)"
        )


class CommitOutcomeUnknownError(TransientError):
    """A commit request failed in a way that leaves its outcome unknown; the caller must verify. Transient."""

    def __init__(self, table: str, run_id: str, problem: str) -> None:
        self.table = table
        self.run_id = run_id
        super().__init__(
            f"run {run_id!r}: the outcome of the commit to table {table!r} is unknown: {problem} "
            "(retry the commit: it first checks whether the run is already in the table)"
        )


class TableChangedError(TransientError):
    """The table changed between reading its commit state and committing; nothing was written. Transient.

    The commit step re-reads and re-verifies the state before trying again (never a blind retry).
    """

    def __init__(self, table: str, problem: str) -> None:
        self.table = table
        super().__init__(f"table {table!r} changed since its commit state was read: {problem}")


class DeadLetterAheadError(KafscaleIcebergError):
    """The dead-letter table holds part of this run's range from another run. Terminal; nothing written.

    An earlier run committed its dead-letter files and never its table files (its commit was
    abandoned), then a different range was planned. Adding this run's dead letters would duplicate.
    The same holds for every table of a topic committed before its anchor (routed tables, other
    mappings' tables: `kind` names which).
    """

    def __init__(
        self,
        table: str,
        topic: str,
        run_id: str,
        other_run_id: str | None,
        partitions: Sequence[int],
        kind: str = "dead-letter table",
    ) -> None:
        self.table = table
        self.topic = topic
        self.run_id = run_id
        self.other_run_id = other_run_id
        self.partitions = tuple(partitions)
        super().__init__(
            f"refusing to commit run {run_id!r} of topic {topic!r}: {kind} {table!r} already "
            f"holds part of its range on partitions {list(self.partitions)} from run {other_run_id!r}, "
            "whose table commit never happened (nothing was written; commit that run from its result "
            "first, then plan again)"
        )


class OffsetResetRefusedError(KafscaleIcebergError):
    """An offset reset was refused before anything was written (`replay --reset-offsets`). Terminal.

    Names the topic, the partition and offsets, why, and the reset that would be accepted.
    """

    def __init__(self, topic: str, problem: str) -> None:
        self.topic = topic
        self.problem = problem
        super().__init__(f"refusing to reset the offsets of topic {topic!r}: {problem} (nothing was written)")


class LfsBlobMissingError(KafscaleIcebergError):
    """An LFS envelope's blob does not exist (deleted by lifecycle, never uploaded): its record is
    dead-lettered (`lfs_missing_blob`); the blob will not appear by retrying."""

    def __init__(self, bucket: str, key: str) -> None:
        self.bucket = bucket
        self.key = key
        super().__init__(f"LFS blob s3://{bucket}/{key} does not exist")


class LfsBlobTooLargeError(KafscaleIcebergError):
    """An LFS blob is larger than the mapping lets a value be (`lfs.max_inline_size`, or what one
    Parquet value can hold): its record is dead-lettered (`lfs_too_large`)."""

    def __init__(self, bucket: str, key: str, size: int, limit: int) -> None:
        self.bucket = bucket
        self.key = key
        self.size = size
        self.limit = limit
        super().__init__(f"LFS blob s3://{bucket}/{key} is {size} bytes, more than the limit of {limit}")


class LfsBlobUnavailableError(TransientError):
    """An LFS blob could not be read for a reason a retry (or a fix of the permissions) may cure:
    throttling, a 5xx, a timeout, a refused connection, access denied. The run fails and is
    retried; the record is never dead-lettered for it."""

    def __init__(self, bucket: str, key: str, problem: str) -> None:
        self.bucket = bucket
        self.key = key
        self.problem = problem
        super().__init__(
            f"LFS blob s3://{bucket}/{key} could not be read: {problem} (the run is retried; if this "
            "persists, check that the job's role may s3:GetObject on the bucket - template.yaml "
            "LfsBlobBuckets - and that the bucket is reachable)"
        )


# -- Segments in S3, run documents and data files --------------------------------------------------------


class SegmentObjectMissingError(KafscaleIcebergError):
    """An object the caller expected is not in the bucket (not yet written, or expired by lifecycle)."""

    def __init__(self, bucket: str, key: str) -> None:
        self.bucket = bucket
        self.key = key
        super().__init__(f"s3://{bucket}/{key} does not exist")


class S3UnavailableError(TransientError):
    """S3 could not be reached or refused the request in a way a retry may fix."""


class DocumentMissingError(KafscaleIcebergError):
    """No document at the URI (a plan never written, a result a failed job never wrote)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(f"{uri} does not exist")


class DocumentStoreError(TransientError):
    """Reading or writing a document failed in a way a retry may fix."""


class DataFilePublishError(TransientError):
    """A finished data file could not be moved or uploaded to its URI (retrying the run may help)."""


class FileListingError(TransientError):
    """Files under a prefix could not be listed or deleted (names the URI; retry may help)."""


# -- Events, routing, discovery and launching ------------------------------------------------------------


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


# -- Jobs ------------------------------------------------------------------------------------------------


class JobRunnerUnavailableError(TransientError):
    """The job service could not be reached or kept throttling; retry later (same run id)."""


class JobRunnerError(KafscaleIcebergError):
    """The job service refused the request (bad application id, role, permissions): a person must act."""


class UnknownJobError(KafscaleIcebergError):
    """A job id this runner never started (the process restarted?)."""


# -- Replay ----------------------------------------------------------------------------------------------


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


# -- Deployment and the one machine ----------------------------------------------------------------------


class SecretAccessError(KafscaleIcebergError):
    """A secret cannot be read: missing, not permitted, or not decryptable. A person must act."""

    def __init__(self, secret_id: str, code: str, remedy: str) -> None:
        self.secret_id = secret_id
        self.code = code
        super().__init__(f"secret {secret_id}: {code}: {remedy}")


class SecretUnavailableError(TransientError):
    """Secrets Manager could not be reached or throttled the request; retry later."""


class MetricsServerError(KafscaleIcebergError):
    """The metrics endpoint could not listen (port taken, address not local)."""


class JavaMissingError(KafscaleIcebergError):
    """Local Spark needs Java 17 or 21 and none was found."""


class EmbeddedServiceError(KafscaleIcebergError):
    """An embedded service could not start; the message says what to install or look at."""


# -- Inside the Spark job: a record, a mapping or a plan the data plane cannot use (also `ValueError`s) ---


class EnvelopeError(KafscaleIcebergError, ValueError):
    """An LFS envelope that cannot be used: not JSON of the envelope's shape, or a required field missing."""


class PartitioningError(KafscaleIcebergError, ValueError):
    """A partition field names a column the table lacks, or a transform its type does not allow."""


class InvalidJsonSchemaError(KafscaleIcebergError, ValueError):
    """The plan's JSON Schema is not a valid schema for its own meta-schema."""


class FieldIdError(KafscaleIcebergError, ValueError):
    """The plan's field ids do not cover the columns of a file, or give one id twice."""


class CompactionResultError(KafscaleIcebergError):
    """A compaction job's result does not match its job (another job's, failed, rows differ, files
    missing): nothing is committed, its files are orphans, the next maintenance pass plans again."""


class LambdaInvokeError(TransientError):
    """A function could not be invoked (throttled, unreachable, refused); the schedule still runs it."""
