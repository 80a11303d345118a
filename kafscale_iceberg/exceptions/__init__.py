"""The error hierarchy: every error says what failed, on which identifiers, and what to do next.

Each error is either *transient* (retrying the same work later may succeed: a network blip, a busy
lease, a segment whose `.index` has not landed yet) or *terminal* (retrying changes nothing until a
person acts: a corrupt segment, a bad config). Callers decide retry from `error.transient`, never
from the class name. Foreign exceptions are translated once, in the adapter, with `raise ... from`.

One hierarchy, said one way: every error class of the package is defined in this package (one
module per area, below; import them from here), and an
error is transient exactly when it subclasses `TransientError` (the one class that sets
`transient`). The run state machine retries the name `TransientError`: the step Lambdas raise every
transient error under that name (`functions/runtime.step_errors`), so a class's transience means
the same to the state machine as to the code that raised it.

Areas: `base` (the root and the transient marker), `configuration`, `segments`, `storage` (objects
in S3), `checkpoints`, `tables` (the catalog and its tables), `commits` (the commit step and offset
resets), `control_plane` (events, routing, launching, jobs, replay), `dataplane` (inside the job).
"""

from __future__ import annotations

from kafscale_iceberg.exceptions.base import (
    KafscaleIcebergError,
    TransientError,
)
from kafscale_iceberg.exceptions.checkpoints import (
    CheckpointAuthError,
    CheckpointDataError,
    CheckpointError,
    CheckpointRequestError,
    CheckpointUnavailableError,
    ConcurrentOffsetUpdateError,
    LeaseLostError,
    OffsetRegressionError,
    OffsetsFencedError,
    OffsetsNotRecordedError,
)
from kafscale_iceberg.exceptions.commits import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    DeadLetterAheadError,
    OffsetMismatchError,
    OffsetResetRefusedError,
    RunAttemptEndedError,
    RunNotCommittableError,
    RunSupersededError,
    TableChangedError,
)
from kafscale_iceberg.exceptions.configuration import (
    ConfigError,
    ConfigValidationError,
    EmbeddedServiceError,
    JavaMissingError,
    MetricsServerError,
    SecretAccessError,
    SecretUnavailableError,
)
from kafscale_iceberg.exceptions.control_plane import (
    DiscoveryError,
    JobRunnerError,
    JobRunnerUnavailableError,
    LambdaInvokeError,
    MalformedEventError,
    QueueUnavailableError,
    RedriveLeaseBusyError,
    RedriveRefusedError,
    RegistryAuthError,
    RegistryUnavailableError,
    ReplayLeaseBusyError,
    ReplayNotConfirmedError,
    ReplayRequestError,
    SchemaNotFoundError,
    SegmentIncompleteError,
    TopicBatchingError,
    UnknownJobError,
    UnmappedTopicError,
)
from kafscale_iceberg.exceptions.dataplane import (
    ColumnRenameError,
    EnvelopeError,
    FieldIdError,
    InvalidJsonSchemaError,
    PartitioningError,
    RecordSchemaError,
)
from kafscale_iceberg.exceptions.segments import (
    CrcMismatchError,
    DecompressedSizeError,
    LfsBlobMissingError,
    LfsBlobTooLargeError,
    LfsBlobUnavailableError,
    SegmentFormatError,
    SegmentKeyError,
    TruncatedSegmentError,
    UnsupportedCodecError,
)
from kafscale_iceberg.exceptions.storage import (
    DataFilePublishError,
    DocumentMissingError,
    DocumentStoreError,
    FileListingError,
    S3UnavailableError,
    SegmentObjectMissingError,
)
from kafscale_iceberg.exceptions.tables import (
    CatalogError,
    CatalogUnavailableError,
    CompactionResultError,
    DataFileMissingError,
    DataFileRejectedError,
    FieldIdMismatchError,
    InferredColumnChangedError,
    OffsetNotInHistoryError,
    PartitionSpecMismatchError,
    SchemaChangeError,
    TableLocationUnknownError,
    TableMarkerError,
    TableMissingError,
    UnfilledColumnError,
    UpsertLocateStaleError,
    UpsertTableError,
)

__all__ = [
    "CatalogError",
    "CatalogUnavailableError",
    "CheckpointAuthError",
    "CheckpointDataError",
    "CheckpointError",
    "CheckpointRequestError",
    "CheckpointUnavailableError",
    "ColumnRenameError",
    "CommitConflictError",
    "CommitOutcomeUnknownError",
    "CompactionResultError",
    "ConcurrentOffsetUpdateError",
    "ConfigError",
    "ConfigValidationError",
    "CrcMismatchError",
    "DataFileMissingError",
    "DataFilePublishError",
    "DataFileRejectedError",
    "DeadLetterAheadError",
    "DecompressedSizeError",
    "DiscoveryError",
    "DocumentMissingError",
    "DocumentStoreError",
    "EmbeddedServiceError",
    "EnvelopeError",
    "FieldIdError",
    "FieldIdMismatchError",
    "FileListingError",
    "InferredColumnChangedError",
    "InvalidJsonSchemaError",
    "JavaMissingError",
    "JobRunnerError",
    "JobRunnerUnavailableError",
    "KafscaleIcebergError",
    "LambdaInvokeError",
    "LeaseLostError",
    "LfsBlobMissingError",
    "LfsBlobTooLargeError",
    "LfsBlobUnavailableError",
    "MalformedEventError",
    "MetricsServerError",
    "OffsetMismatchError",
    "OffsetNotInHistoryError",
    "OffsetRegressionError",
    "OffsetResetRefusedError",
    "OffsetsFencedError",
    "OffsetsNotRecordedError",
    "PartitionSpecMismatchError",
    "PartitioningError",
    "QueueUnavailableError",
    "RecordSchemaError",
    "RedriveLeaseBusyError",
    "RedriveRefusedError",
    "RegistryAuthError",
    "RegistryUnavailableError",
    "ReplayLeaseBusyError",
    "ReplayNotConfirmedError",
    "ReplayRequestError",
    "RunAttemptEndedError",
    "RunNotCommittableError",
    "RunSupersededError",
    "S3UnavailableError",
    "SchemaChangeError",
    "SchemaNotFoundError",
    "SecretAccessError",
    "SecretUnavailableError",
    "SegmentFormatError",
    "SegmentIncompleteError",
    "SegmentKeyError",
    "SegmentObjectMissingError",
    "TableChangedError",
    "TableLocationUnknownError",
    "TableMarkerError",
    "TableMissingError",
    "TopicBatchingError",
    "TransientError",
    "TruncatedSegmentError",
    "UnfilledColumnError",
    "UnknownJobError",
    "UnmappedTopicError",
    "UnsupportedCodecError",
    "UpsertLocateStaleError",
    "UpsertTableError",
]
