"""Ports: every Protocol the services, the data plane and the deployment depend on, one per role;
`kafscale_iceberg.adapters` implement them (and the one-machine loop's in-process stand-ins).

Values crossing a process boundary are pydantic models; in-process values are frozen dataclasses.
The value types are imported for type checking only: importing the ports loads the standard library
alone (the metrics package, which every Lambda loads, re-exports `MetricsSink`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
    from kafscale_iceberg.domain.anomalies import OffsetAnomalies
    from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata
    from kafscale_iceberg.domain.commits import TableCommit, TableSpec, TableState
    from kafscale_iceberg.domain.compaction_jobs import CompactionJob, CompactionJobResult
    from kafscale_iceberg.domain.events import WorkItem
    from kafscale_iceberg.domain.field_ids import TableFieldIds
    from kafscale_iceberg.domain.history import TableHistory
    from kafscale_iceberg.domain.jobs import JobStatus
    from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant, LeaseHolder
    from kafscale_iceberg.domain.maintenance import (
        CompactionOutcome,
        DeleteFolding,
        ExpiryOutcome,
        OrphanFile,
        TableHealth,
    )
    from kafscale_iceberg.domain.offsets import CommittedOffsets, OffsetState, OffsetUpdate
    from kafscale_iceberg.domain.planning import ListedSegment
    from kafscale_iceberg.domain.record_schemas import RegisteredSchema, SchemaId
    from kafscale_iceberg.domain.redrive import ConvertedDeadLetters, Pair, RedriveSelection
    from kafscale_iceberg.domain.runner_choice import RunnerTraits
    from kafscale_iceberg.domain.runs import ColumnSpec, RunPlan
    from kafscale_iceberg.domain.runs.plan import ConversionSettings
    from kafscale_iceberg.domain.tickets import RunTicket
    from kafscale_iceberg.domain.upsert import UpsertCounts
    from kafscale_iceberg.metrics.definitions import Sample
    from kafscale_iceberg.segments.layout import SegmentFooter


class CheckpointStore(Protocol):
    """Per-topic leases and committed offsets (etcd, or a SQLite file on one machine).

    Every method either completes or changes nothing: one transaction each (an etcd commit wider
    than one transaction - 63 partitions by default - is one fenced transaction per slice).
    Errors: store down or busy -> `CheckpointUnavailableError` (transient); credentials ->
    `CheckpointAuthError`; a value we cannot read -> `CheckpointDataError`; fencing ->
    `LeaseLostError`.
    """

    def claim_lease(self, topic: str, *, owner_id: str, run_id: str) -> LeaseGrant | LeaseBusy:
        """Create the topic's lease if nobody holds it (create-if-absent, one transaction).

        Returns the grant, or `LeaseBusy` naming the current holder (nothing is left behind: the etcd
        lease granted for the attempt is revoked). Not idempotent: a second claim by the same owner
        while the first holds is busy too.
        """
        ...

    def renew_lease(self, grant: LeaseGrant) -> None:
        """Extend the lease by its TTL, from any process holding the grant. Idempotent.

        Raises `LeaseLostError` if the lease expired, was released, or the key now belongs to
        another claim.
        """
        ...

    def release_lease(self, grant: LeaseGrant) -> bool:
        """Delete the lease if (and only if) it is still this grant's. Idempotent.

        Returns True if this call released it, False if it was already gone or belongs to another
        claim (which is left alone).
        """
        ...

    def read_lease_holder(self, topic: str) -> LeaseHolder | None:
        """Who holds the topic's lease now, or None (a Go processor's partition lease counts)."""
        ...

    def load_committed_offsets(self, topic: str) -> CommittedOffsets:
        """The topic's committed offsets; partitions without a stored value read as -1."""
        ...

    def commit_offsets(
        self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]
    ) -> dict[int, OffsetState]:
        """Advance offsets (and the watermarks beside them) in one transaction fenced by the lease.

        Idempotent: committing the same offsets again rewrites them unchanged (new `updated_at`).
        Raises `LeaseLostError` if the lease is not this grant's, `OffsetRegressionError` if any
        partition would move backwards; in both cases nothing is written. Returns what was written.
        """
        ...

    def reset_offsets(self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]) -> dict[int, OffsetState]:
        """Set offsets to any value, backwards included (replay --reset-offsets); fenced like a commit.

        Idempotent. Offset -1 means "nothing committed" (the partition is re-ingested from the start).
        """
        ...

    def read_cluster_metadata(self) -> ClusterMetadata | None:
        """The KafScale cluster's topic/partition snapshot, or None if this store has none."""
        ...


class TableCommitter(Protocol):
    """Iceberg tables as the commit step needs them (adapter: `IcebergTableCommitter`).

    Errors: `TableMissingError`, `SchemaChangeError`, `PartitionSpecMismatchError`,
    `DataFileRejectedError`, `TableMarkerError` (terminal); `CatalogUnavailableError`,
    `TableChangedError`, `CommitOutcomeUnknownError` (transient).
    """

    def ensure_table(self, spec: TableSpec, current: TableState | None = None) -> object:
        """Create the table (and namespace) if missing and allowed, then evolve its schema. Idempotent.

        `current`: the table's state as just read, checked without loading the table again.
        """
        ...

    def read_state(self, table: str, topic: str) -> TableState:
        """The table's current snapshot id and what it records for `topic` (`kafscale.*` properties)."""
        ...

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        """ONE Iceberg commit (files + marker + summary) built on exactly `expected`; the state after it.

        Built on the table version `expected` was read from when the adapter still holds it (no
        second load); the catalog refuses the commit if the table moved since.

        `TableChangedError` when the table is no longer `expected` (nothing written);
        `CommitOutcomeUnknownError` when it may or may not have landed: re-read and verify.
        `commit.delete_after` deletes rows in that same commit (an offset reset).
        """
        ...

    def count_rows(self, table: str, after: Mapping[int, int]) -> int:
        """Rows of `table` whose `offset` is greater than `after[partition]` (what a reset would delete)."""
        ...

    def missing_files(self, table: str, uris: Sequence[str]) -> tuple[str, ...]:
        """Those of `uris` (files to commit to `table`) that do not exist (one HEAD each, with the
        table's storage credentials): a commit never references a file it has not seen exist.
        `CatalogUnavailableError` when the storage does not answer."""
        ...

    def check_commit(self, expected: TableState, commit: TableCommit) -> None:
        """Refuse, writing nothing, what `commit` built on `expected` would be refused for by `commit`
        (an upsert's located version no longer standing: `UpsertLocateStaleError`), so a run is
        refused before its first table commit, never between two."""
        ...

    def field_ids(self, table: str, current: TableState | None = None) -> TableFieldIds:
        """The table's top-level column ids and its last assigned column id (`TableMissingError`).

        `current`: the table's state as just read or committed, used without loading the table again.
        """
        ...


# -- Segments: listing, routing and planning (adapter: `S3SegmentStore`) ---------------------------


class TableLister(Protocol):
    """The tables of a catalog namespace (to find the tables a route's template created)."""

    def list_tables(self, namespace: str) -> tuple[str, ...]: ...


class SegmentReader(Protocol):
    """What the router needs from the segments bucket."""

    bucket: str

    def exists(self, key: str) -> bool: ...

    def read_footer(self, key: str) -> SegmentFooter: ...

    def read_footer_and_size(self, key: str) -> tuple[SegmentFooter, int]: ...


class SegmentLister(Protocol):
    """What planning needs from the segments bucket."""

    bucket: str

    def list_partitions(self, topic: str) -> list[int]: ...

    def list_segments(self, topic: str, partition: int, after_offset: int | None) -> list[ListedSegment]: ...

    def read_footer(self, key: str) -> SegmentFooter: ...


class TopicLister(Protocol):
    """Lists the topics present under the namespace (the S3 segment store does)."""

    def list_topics(self) -> list[str]: ...


class MetadataSource(Protocol):
    """Reads KafScale's cluster metadata snapshot (the etcd checkpoint store does)."""

    def read_cluster_metadata(self) -> ClusterMetadata | None: ...


# -- Control plane: queues, runs and their documents -----------------------------------------------


class WorkQueue(Protocol):
    """The per-topic FIFO work queue."""

    def send_work_items(self, items: Sequence[WorkItem]) -> None:
        """Enqueue items (grouped by topic, deduplicated by segment key). Idempotent per item."""


class TopicSignaller(Protocol):
    """Asks for a topic to be looked at again (a topic signal on the work queue)."""

    def signal(self, topic: str, reason: str) -> None: ...


class RunStarter(Protocol):
    """Hands a planned run to the run steps (a Step Functions execution, or the local loop)."""

    def start_run(self, ticket: RunTicket) -> None:
        """Start the steps of `ticket`'s run. Idempotent per run id.

        Raises `RunAttemptEndedError` when the run id's steps already ran and ended unrecorded.
        """


class RunTracker(Protocol):
    """Tells whether a run's steps still execute (Step Functions, or the local loop)."""

    def is_running(self, run_id: str) -> bool | None:
        """True while the run's steps execute, False once they ended, None when unknown."""


class RunDocuments(Protocol):
    """Run documents (plans, results, outcomes, backoff, field ids) by URI (adapter: `DocumentStore`).

    Errors: a missing document -> `DocumentMissingError`; storage down or refusing ->
    `DocumentStoreError` (transient).
    """

    def exists(self, uri: str) -> bool:
        """Whether a document is stored at `uri`."""
        ...

    def read_text(self, uri: str) -> str:
        """The document's text (UTF-8)."""
        ...

    def write_text(self, uri: str, text: str) -> None:
        """Store `text` at `uri`, replacing what is there. Idempotent."""
        ...


class SchemaRegistry(Protocol):
    """Topic JSON schemas (`{base_url}/{topic}.json`)."""

    def schema_for(self, topic: str) -> dict[str, object]: ...


class RecordSchemaRegistry(Protocol):
    """Record schemas by id and subject (a Confluent-compatible registry: `adapters/confluent_registry`;
    the AWS Glue Schema Registry, where a subject is a schema's name: `adapters/glue_registry`).

    Errors: the registry has no such schema (404) -> `SchemaNotFoundError`; it is unreachable, times
    out or answers 5xx -> `RegistryUnavailableError` (transient: the run is retried, nothing is
    dead-lettered for it); it refuses the credentials (401/403) -> `RegistryAuthError`.
    """

    def schema_by_id(self, schema_id: SchemaId) -> RegisteredSchema:
        """The schema registered under `schema_id` (immutable: callers may cache it for ever): a
        Confluent registry's integer id, a Glue registry's schema version id (a UUID)."""
        ...

    def latest_schema(self, subject: str) -> RegisteredSchema:
        """The subject's latest version (cached by the adapter for `cache_seconds`)."""
        ...

    def schema_version(self, subject: str, version: int) -> RegisteredSchema:
        """One version of a subject (immutable): what a schema's `references` name (Protobuf imports)."""
        ...


class JobRunner(Protocol):
    """Starts, looks at and cancels a run's job (EMR Serverless, local Spark, in-process), and says
    what it can do: callers ask it (`traits`, `step_request`) instead of testing which runner it is."""

    @property
    def traits(self) -> RunnerTraits:
        """Its kind, the sizes it takes, who starts its job, how its platform reports a kill."""
        ...

    def step_request(self, plan: RunPlan, plan_uri: str) -> dict[str, Any]:
        """What the state machine's task for this runner takes besides the ticket (EMR Serverless:
        the `StartJobRun` request; a runner the state machine invokes with the ticket: nothing).
        Calls nothing."""
        ...

    def start(self, plan: RunPlan, plan_uri: str) -> str:
        """Start the plan's job, or find the one already started for its run id; returns its id."""

    def status(self, job_id: str) -> JobStatus: ...

    def cancel(self, job_id: str) -> None: ...


@runtime_checkable
class RecordFieldSampler(Protocol):
    """Tables whose run files can be read back for the field names the records carry (the Iceberg
    adapter): the hint of a column no record filled (`domain/column_fill.py`)."""

    def record_fields(self, table: str, uri: str, limit: int) -> tuple[str, ...] | None:
        """The top-level field names of the first `limit` records' values in data file `uri`; None
        when it cannot be read."""
        ...


@runtime_checkable
class AwaitableJobRunner(Protocol):
    """A job runner that can block until a job ends (the local Spark runner): the loop then commits
    the moment the job is done instead of at its next watch."""

    def wait(self, job_id: str, timeout_s: float) -> bool:
        """Block until the job ends or `timeout_s` passes; True when it ended."""
        ...


@runtime_checkable
class JobLookup(Protocol):
    """A job runner whose run jobs can be started by someone else (EMR Serverless: the state machine's
    `startJobRun.sync` starts a run's job, so its ticket carries no job id): finds them by run id."""

    def unfinished_jobs(self, run_id: str, *, created_after_ms: int) -> list[str]:
        """The ids of the jobs started for run `run_id` since `created_after_ms` that have not ended."""
        ...


class WaitingJobRunner(JobRunner, AwaitableJobRunner, Protocol):
    """A job runner a step waits on until its job ends (the in-process runner: the Lambda runner)."""


# -- Tables: status and maintenance ------------------------------------------------------------------


class TableStatusReader(Protocol):
    """What status reads from the tables (adapter: `IcebergTableCommitter`)."""

    def read_state(self, table: str, topic: str) -> TableState: ...

    def last_commit_ms(self, table: str, topic: str) -> int | None: ...

    def conversion_failures(self, table: str, topic: str) -> dict[str, int]: ...

    def unfilled_columns(self, table: str, topic: str) -> dict[str, str]:
        """The mapping columns no record of `topic`'s last run carried, each with its line."""
        ...

    def dead_letter_reasons(self, table: str, topic: str) -> dict[str, int]: ...

    def offset_anomalies(self, table: str, topic: str) -> OffsetAnomalies: ...

    def upsert_counts(self, table: str, topic: str) -> UpsertCounts: ...


class DeadLetterStore(Protocol):
    """A topic's dead-letter rows and a redrive's two commits (adapter: `IcebergDeadLetters`).

    Rows cross this port as Arrow tables typed `Any`: the services import no pyarrow."""

    def read_dead_letters(self, table: str, topic: str, selection: RedriveSelection) -> Any: ...

    def redriven_pairs(self, table: str, topic: str) -> set[Pair]: ...

    def land_redriven(
        self, table: str, topic: str, rows: Any, pairs: Sequence[Pair], redrive_id: str
    ) -> None: ...

    def resolve_dead_letters(
        self, table: str, topic: str, record_ids: Sequence[str], failing: Any, redrive_id: str
    ) -> None: ...


class TableSchemaEnsurer(Protocol):
    """A table created or evolved to a spec, as a run's commit does (adapter: `IcebergTableCommitter`)."""

    def ensure_table(self, spec: TableSpec, current: TableState | None = None) -> Any: ...


class DeadLetterConverter(Protocol):
    """Dead-letter rows converted again (`dataplane.redrive.convert_dead_letters`)."""

    def __call__(
        self, topic: str, settings: ConversionSettings, dead: Any, *, already: set[Pair]
    ) -> ConvertedDeadLetters: ...


class TableHistoryReader(Protocol):
    """A topic's snapshots in a table, from their summaries (adapter: `IcebergTableCommitter`)."""

    def topic_history(self, table: str, topic: str) -> TableHistory: ...


class TableHealthReader(Protocol):
    """Files and snapshots of a table (adapter: `IcebergTableMaintainer`)."""

    def health(self, table: str, *, small_file_bytes: int) -> TableHealth: ...


class CompactionPlanLike(Protocol):
    """A planned compaction (adapter type): how many files it rewrites."""

    @property
    def file_count(self) -> int: ...

    @property
    def total_bytes(self) -> int: ...


class TableMaintainer(Protocol):
    """Iceberg maintenance operations (adapter: `IcebergTableMaintainer`)."""

    def exists(self, table: str) -> bool: ...

    def health(self, table: str, *, small_file_bytes: int) -> TableHealth: ...

    def plan_compaction(
        self,
        table: str,
        *,
        small_file_bytes: int,
        min_small_files: int,
        max_bytes: int,
        folding: DeleteFolding | None = None,
    ) -> CompactionPlanLike: ...

    def write_compaction(self, plan: Any, *, data_prefix: str, target_file_size_bytes: int) -> Any: ...

    def commit_compaction(self, write: Any, *, now_ms: int) -> CompactionOutcome: ...

    def expire_snapshots(
        self,
        table: str,
        *,
        older_than_ms: int,
        keep: int,
        previous_versions_max: int,
        now_ms: int,
        dry_run: bool,
    ) -> ExpiryOutcome: ...

    def referenced_files(self, table: str) -> frozenset[str]: ...


# Compaction as Spark work and the small-file trigger (services/compaction_jobs.py, compaction_trigger.py).


@runtime_checkable
class CompactionJobRunner(Protocol):
    """Runs compaction jobs (adapters: `EmrServerlessJobRunner`, `LocalSparkJobRunner`)."""

    def start_compaction(self, job: CompactionJob, job_uri: str) -> str: ...

    def status(self, job_id: str) -> JobStatus: ...


class CompactionJobTables(Protocol):
    """The table side of a Spark compaction (adapter: `IcebergTableMaintainer`)."""

    def plan_compaction(
        self,
        table: str,
        *,
        small_file_bytes: int,
        min_small_files: int,
        max_bytes: int,
        folding: DeleteFolding | None = None,
    ) -> Any: ...

    def compaction_job(
        self,
        plan: Any,
        *,
        job_id: str,
        data_prefix: str,
        target_file_size_bytes: int,
        result_uri: str,
        started_ms: int,
    ) -> CompactionJob: ...

    def commit_compaction_job(
        self, job: CompactionJob, result: CompactionJobResult, *, now_ms: int
    ) -> CompactionOutcome: ...


class JobDocuments(Protocol):
    """Reads and writes the job documents (adapter: `DocumentStore`)."""

    def read_text(self, uri: str) -> str: ...

    def write_text(self, uri: str, text: str) -> None: ...

    def exists(self, uri: str) -> bool: ...


class FileLister(Protocol):
    """Files under a storage prefix (adapter: `StorageFileLister`)."""

    def list_files(self, prefix: str) -> list[OrphanFile]: ...

    def delete_files(self, uris: Sequence[str]) -> int: ...


# -- Data plane: what the Spark tasks read and write -------------------------------------------------


class ObjectReader(Protocol):
    """Reads whole objects named by URI."""

    def read_bytes(self, uri: str) -> bytes:
        """The object's bytes; raises a `KafscaleIcebergError` when it is missing or unreadable."""
        ...


@runtime_checkable
class RangedObjectReader(Protocol):
    """A reader that can also read a byte range of an object."""

    def read_bytes(self, uri: str) -> bytes:
        """The object's bytes; raises a `KafscaleIcebergError` when it is missing or unreadable."""
        ...

    def read_range(self, uri: str, start: int, end_inclusive: int | None) -> bytes:
        """Bytes `start..end_inclusive` of the object (to its end when None); errors as `read_bytes`."""
        ...


class FileSink(Protocol):
    """Where finished data files go: written to a local staging path, then published to their URI."""

    def staging_path(self, uri: str) -> str:
        """A local path to write `uri`'s content to (its folder exists)."""
        ...

    def publish(self, staging_path: str, uri: str) -> None:
        """Move the finished file to `uri`, replacing what is there. Idempotent; the staging file is gone."""
        ...


class ValueDecoder(Protocol):
    """Decodes a batch of record values of one format (`dataplane/formats/`: one module per
    `value_format`); reusable for every batch of a task."""

    def decode(self, values: Any) -> DecodedBatch:
        """The batch (an Arrow binary array) decoded: the records grouped by the schema they were
        written with, and per-record errors; never raises for bad data (a registry outage raises
        `RegistryUnavailableError`, which fails the run transiently)."""
        ...

    def schemas_of(self, values: Any, offsets: Any, *, partition: int) -> dict[str, tuple[ColumnSpec, ...]]:
        """The columns of each schema `values` were written with, keyed so that sorted keys put older
        schemas first (the observation stage); values that do not decode are passed over."""
        ...


class BlobReader(Protocol):
    """Reads LFS blobs (`adapters.lfs_blobs`); called from several threads at once."""

    def read_blob(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        """The blob's bytes. Raises `LfsBlobMissingError`, `LfsBlobTooLargeError` (length above
        `max_bytes`, body unread) or `LfsBlobUnavailableError` (transient)."""
        ...


TaskWork = Callable[[Iterable[int]], Iterator[str]]
"""What a task executor maps: task indexes in, one JSON document per task out (the run driver's
`TaskRunner`, `ObservationRunner` in `execution/driver.py`)."""


class TaskExecutor(Protocol):
    """Maps a run's tasks for the run driver: Spark (`spark_app/job.SparkTaskExecutor`) or this
    process (`execution/in_process.InProcessTaskExecutor`)."""

    @property
    def parallelism(self) -> int:
        """How many tasks run at once (the run is cut into a multiple of it)."""
        ...

    def map_tasks(self, work: TaskWork, count: int) -> list[str]:
        """`work` over task indexes `0..count-1`, each task on its own; every task's document, any order.

        Raises what a task raised (the driver turns it into a failed result).
        """
        ...


# -- Deployment ------------------------------------------------------------------------------------


class SecretSource(Protocol):
    """Where secrets named by ARN are read (Secrets Manager in AWS)."""

    def read_secret(self, secret_id: str) -> str:
        """The secret's string value."""
        ...


# -- Metrics ----------------------------------------------------------------------------------------


class MetricsSink(Protocol):
    """Where samples go: Prometheus (one-machine `run`) or CloudWatch EMF (the Lambdas)."""

    def emit(self, samples: Sequence[Sample]) -> None:
        """Record the samples (counters added, gauges set, histograms observed)."""
        ...
