"""Run plans and run results: the contract between the launcher, the Spark job and the commit step.

A *run* processes one topic's pending segment range. The launcher writes a `RunPlan` (JSON) to
`{runs.location}/{topic}/{run_id}/plan.json`; the Spark job reads it, writes data files and a
`RunResult` beside it (`result.json`); the commit step reads both. Both are versioned: a reader
refuses a version it does not know instead of guessing.

The plan is self-contained: the job needs no etcd, no config file and no catalog.

The documents, one module each: `plan` (the run plan), `formats` (how record values and keys are
written, and the schema registry the plan names), `result` (the run result), `columns` (the
columns and partition fields both carry), `written` (the two read together: the tables as written, in
commit order), `documents` (what they share). Import from here.
"""

from kafscale_iceberg.domain.runs.columns import (
    DECIMAL_MAX_PRECISION,
    NESTED_TYPES,
    ColumnSpec,
    ColumnType,
    PartitionField,
    PartitionTransform,
    TimeColumns,
)
from kafscale_iceberg.domain.runs.documents import (
    NO_OFFSET,
    Offset,
    PartitionNumber,
    PartitionValue,
)
from kafscale_iceberg.domain.runs.formats import (
    KEY_COLUMN_PREFIX,
    KEY_VALUE_FIELD,
    RegistrySettings,
    RegistryType,
)
from kafscale_iceberg.domain.runs.plan import (
    DEFAULT_PARTITION_FILE_MIN_BYTES,
    LFS_METADATA_COLUMNS,
    PLAN_VERSION,
    RUN_ID_PATTERN,
    ConversionSettings,
    CorruptSegmentPolicy,
    LfsMode,
    LfsSettings,
    MappingPlan,
    PartitionPlan,
    PlannedSegment,
    RoutePlan,
    RunPlan,
    SchemaMode,
    SegmentSource,
    TableRole,
    TableTarget,
    deleted_keys_target,
    make_run_id,
    validate_run_id,
)
from kafscale_iceberg.domain.runs.result import (
    LFS_DURATION_BUCKETS,
    RESULT_VERSION,
    ColumnStats,
    DataFile,
    FailureKind,
    FileStats,
    LfsCounts,
    OffsetGap,
    PartitionOutcome,
    QuarantinedSegment,
    RunCounts,
    RunFailure,
    RunResult,
    RunStatus,
    RunTimings,
    TableOutput,
)
from kafscale_iceberg.domain.runs.upsert import (
    CdcFormat,
    PositionDeleteFile,
    ReplacedFile,
    UpsertOutcome,
    UpsertSettings,
    UpsertWrite,
)
from kafscale_iceberg.domain.runs.written import (
    plan_as_written,
    table_outputs,
    written_mapping,
)

__all__ = [
    "DECIMAL_MAX_PRECISION",
    "DEFAULT_PARTITION_FILE_MIN_BYTES",
    "KEY_COLUMN_PREFIX",
    "KEY_VALUE_FIELD",
    "LFS_DURATION_BUCKETS",
    "LFS_METADATA_COLUMNS",
    "NESTED_TYPES",
    "NO_OFFSET",
    "PLAN_VERSION",
    "RESULT_VERSION",
    "RUN_ID_PATTERN",
    "CdcFormat",
    "ColumnSpec",
    "ColumnStats",
    "ColumnType",
    "ConversionSettings",
    "CorruptSegmentPolicy",
    "DataFile",
    "FailureKind",
    "FileStats",
    "LfsCounts",
    "LfsMode",
    "LfsSettings",
    "MappingPlan",
    "Offset",
    "OffsetGap",
    "PartitionField",
    "PartitionNumber",
    "PartitionOutcome",
    "PartitionPlan",
    "PartitionTransform",
    "PartitionValue",
    "PlannedSegment",
    "PositionDeleteFile",
    "QuarantinedSegment",
    "RegistrySettings",
    "RegistryType",
    "ReplacedFile",
    "RoutePlan",
    "RunCounts",
    "RunFailure",
    "RunPlan",
    "RunResult",
    "RunStatus",
    "RunTimings",
    "SchemaMode",
    "SegmentSource",
    "TableOutput",
    "TableRole",
    "TableTarget",
    "TimeColumns",
    "UpsertOutcome",
    "UpsertSettings",
    "UpsertWrite",
    "deleted_keys_target",
    "make_run_id",
    "plan_as_written",
    "table_outputs",
    "validate_run_id",
    "written_mapping",
]
