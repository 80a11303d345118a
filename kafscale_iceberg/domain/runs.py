"""Run plans and run results: the contract between the launcher, the Spark job and the commit step.

A *run* processes one topic's pending segment range. The launcher writes a `RunPlan` (JSON) to
`{runs.location}/{topic}/{run_id}/plan.json`; the Spark job reads it, writes data files and a
`RunResult` beside it (`result.json`); the commit step reads both. Both are versioned: a reader
refuses a version it does not know instead of guessing.

The plan is self-contained: the job needs no etcd, no config file and no catalog.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kafscale_iceberg.domain.routing import matches_template

PLAN_VERSION: Literal[1] = 1
RESULT_VERSION: Literal[1] = 1
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
NO_OFFSET = -1
"""The committed offset of a partition nothing was committed from (KafScale's convention)."""

Offset = Annotated[int, Field(ge=NO_OFFSET, le=2**63 - 1)]
PartitionNumber = Annotated[int, Field(ge=0, le=2**31 - 1)]
PartitionValue = str | int | float | bool | None
DEFAULT_PARTITION_FILE_MIN_BYTES = 256 * 1024
"""Below this many bytes (Arrow) of one Kafka partition in one task, its rows share a file (see
docs/architecture.md, "Files": the small-file trade)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ColumnType(StrEnum):
    """Mapping column types, as the KafScale processor config names them."""

    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    FLOAT = "float"
    DOUBLE = "double"
    STRING = "string"
    BINARY = "binary"
    TIMESTAMP = "timestamp"
    DATE = "date"
    # Beyond the Go processor's types (what the Kafka Connect Iceberg sink writes):
    TIMESTAMPTZ = "timestamptz"
    UUID = "uuid"
    DECIMAL = "decimal"
    """`decimal(P,S)`: `ColumnSpec.precision` and `.scale`."""
    STRUCT = "struct"
    """`ColumnSpec.fields`."""
    LIST = "list"
    """`ColumnSpec.element`."""
    MAP = "map"
    """String keys; `ColumnSpec.value`."""


NESTED_TYPES = frozenset({ColumnType.STRUCT, ColumnType.LIST, ColumnType.MAP})
DECIMAL_MAX_PRECISION = 38


class PartitionTransform(StrEnum):
    """Iceberg partition transforms this product writes (one value per file for each)."""

    IDENTITY = "identity"
    YEAR = "year"
    MONTH = "month"
    DAY = "day"
    HOUR = "hour"


class SchemaMode(StrEnum):
    """`schema.mode`: what happens to records that fail JSON-schema validation."""

    OFF = "off"
    LENIENT = "lenient"
    STRICT = "strict"


class CorruptSegmentPolicy(StrEnum):
    """What a run does with a segment that fails to decode."""

    FAIL = "fail"
    QUARANTINE = "quarantine"


class ColumnSpec(_Model):
    """One column extracted from the JSON record value, after the eight base fields.

    Nested and parametrized types carry their parts: `decimal` its `precision` and `scale`, `struct`
    its `fields`, `list` its `element`, `map` its `value` (keys are strings). Inside a nested type
    every part is optional (a missing or mistyped inner value is null, and counted).
    """

    name: str
    type: ColumnType
    required: bool = False
    precision: int | None = Field(default=None, ge=1, le=DECIMAL_MAX_PRECISION)
    scale: int | None = Field(default=None, ge=0)
    fields: tuple[ColumnSpec, ...] = ()
    element: ColumnSpec | None = None
    value: ColumnSpec | None = None

    @model_validator(mode="after")
    def _parts_match_type(self) -> ColumnSpec:
        kind = self.type
        if (kind is ColumnType.DECIMAL) != (self.precision is not None):
            raise ValueError(f"column {self.name!r}: precision is given exactly for decimal columns")
        if self.scale is not None and (self.precision is None or self.scale > self.precision):
            raise ValueError(f"column {self.name!r}: decimal scale must be between 0 and the precision")
        if (kind is ColumnType.STRUCT) != bool(self.fields):
            raise ValueError(f"column {self.name!r}: fields are given exactly for struct columns")
        if (kind is ColumnType.LIST) != (self.element is not None):
            raise ValueError(f"column {self.name!r}: element is given exactly for list columns")
        if (kind is ColumnType.MAP) != (self.value is not None):
            raise ValueError(f"column {self.name!r}: value is given exactly for map columns")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"column {self.name!r}: a struct field is listed twice")
        return self

    @property
    def type_name(self) -> str:
        """The type as written in a mapping: `long`, `decimal(10,2)`, `list<string>`, `struct<a: long>`."""
        if self.type is ColumnType.DECIMAL:
            return f"decimal({self.precision},{self.scale or 0})"
        if self.type is ColumnType.LIST and self.element is not None:
            return f"list<{self.element.type_name}>"
        if self.type is ColumnType.MAP and self.value is not None:
            return f"map<string, {self.value.type_name}>"
        if self.type is ColumnType.STRUCT:
            return "struct<" + ", ".join(f"{f.name}: {f.type_name}" for f in self.fields) + ">"
        return self.type.value

    @property
    def scannable(self) -> bool:
        """Whether the compiled scanner builds this column (the Go processor's scalar types)."""
        return self.type in _SCANNED_TYPES


_SCANNED_TYPES = frozenset(
    {
        ColumnType.BOOLEAN,
        ColumnType.INT,
        ColumnType.LONG,
        ColumnType.FLOAT,
        ColumnType.DOUBLE,
        ColumnType.STRING,
        ColumnType.BINARY,
        ColumnType.TIMESTAMP,
        ColumnType.DATE,
        ColumnType.TIMESTAMPTZ,
    }
)


class PartitionField(_Model):
    """One partition field of the target table: `transform(column)`."""

    column: str
    transform: PartitionTransform = PartitionTransform.IDENTITY


class PlannedSegment(_Model):
    """One segment the run reads, with what the listing (and its footer) said about it."""

    key: str
    base_offset: Offset
    last_offset: Offset
    size_bytes: int = Field(ge=0)
    last_modified_ms: int | None = None
    """When the `.kfs` landed (S3 LastModified, Unix ms): the start of queue-to-start latency."""

    @model_validator(mode="after")
    def _offsets_ordered(self) -> PlannedSegment:
        if self.last_offset < self.base_offset:
            raise ValueError(f"segment {self.key}: last_offset {self.last_offset} < base {self.base_offset}")
        return self


class PartitionPlan(_Model):
    """The offsets one partition contributes: `(start_exclusive, end_inclusive]`, and its segments."""

    partition: PartitionNumber
    start_exclusive: Offset
    end_inclusive: Offset
    segments: tuple[PlannedSegment, ...]

    @model_validator(mode="after")
    def _range_is_covered(self) -> PartitionPlan:
        if self.end_inclusive <= self.start_exclusive:
            raise ValueError(
                f"partition {self.partition}: empty range ({self.start_exclusive}, {self.end_inclusive}]"
            )
        if not self.segments:
            raise ValueError(f"partition {self.partition}: no segments")
        bases = [s.base_offset for s in self.segments]
        if bases != sorted(bases):
            raise ValueError(f"partition {self.partition}: segments are not in base-offset order")
        return self


class SegmentSource(_Model):
    """Where segment keys are read from: an S3 bucket (any endpoint) or a local folder."""

    bucket: str | None = None
    root: str | None = Field(default=None, description="local folder holding the bucket's keys")
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False

    @model_validator(mode="after")
    def _exactly_one_location(self) -> SegmentSource:
        if (self.bucket is None) == (self.root is None):
            raise ValueError("a segment source names exactly one of 'bucket' (S3) or 'root' (local folder)")
        return self


class TableTarget(_Model):
    """A table the run writes files for, and where those files go (a run-scoped URI prefix).

    `field_ids` maps every column to its Iceberg field id; the data files carry them as Parquet
    field ids, so engines read them without the table's name mapping. None (plans of earlier
    versions): files without ids, read through the name mapping.
    """

    identifier: str
    data_uri: str
    field_ids: dict[str, int] | None = None
    last_column_id: int | None = None
    """The table's `last-column-id` as the launcher knew it (None: unknown, or the table does not
    exist yet). An inferred table's new columns take the ids after it (`domain/field_ids.py`)."""
    columns: tuple[ColumnSpec, ...] | None = None
    """A routed inferred mapping's table (`schema.source: infer` with `route`): its own columns after
    the base fields (the launcher's: the table's current ones; the job's: those its files are written
    with). None: the mapping's `conversion.columns` (every other table)."""


class TableRole(StrEnum):
    """What a table of a run holds: mapped rows, or dead letters."""

    DATA = "data"
    DEAD_LETTER = "dead_letter"


class RoutePlan(_Model):
    """`mappings[].route` as a run carries it (the rules are `domain.routing`'s).

    `tables` maps a value to its table; `default_table` takes records whose field is missing or null
    (and, without a template, strings no key matches); `table_template` names a table for any valid
    value. A template table's files go to `data_uri_template` with `{path}` filled in
    (`routing.data_uri_for`); `known_field_ids` are the ids of template tables the commit step has
    recorded, `new_field_ids` the ids a table this run creates gets. `reserved`: every other table of
    the config, which a template value may not name. An inferred mapping's template tables also carry
    their own columns and `last-column-id` (`known_columns`, `known_last_column_ids`; a table not
    listed starts from the base fields).
    """

    field: str
    tables: dict[str, TableTarget] = Field(default_factory=dict)
    default_table: TableTarget | None = None
    table_template: str | None = None
    data_uri_template: str | None = None
    known_field_ids: dict[str, dict[str, int]] = Field(default_factory=dict)
    new_field_ids: dict[str, int] | None = None
    reserved: tuple[str, ...] = ()
    known_columns: dict[str, tuple[ColumnSpec, ...]] = Field(default_factory=dict)
    known_last_column_ids: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names_a_table(self) -> RoutePlan:
        if not self.tables and self.table_template is None:
            raise ValueError(f"route on {self.field!r}: give tables, a table_template, or both")
        if (self.table_template is None) != (self.data_uri_template is None):
            raise ValueError("a route's table_template and data_uri_template go together")
        return self

    def static_targets(self) -> tuple[TableTarget, ...]:
        """The tables the route names in advance: `tables` in order, then `default_table`."""
        targets = [*self.tables.values(), *((self.default_table,) if self.default_table else ())]
        unique = {t.identifier: t for t in reversed(targets)}  # each table once, at its first place
        return tuple(unique[i] for i in dict.fromkeys(t.identifier for t in targets))

    def template_target(self, identifier: str) -> TableTarget:
        """The target of a table the template named (its ids: recorded ones, else a new table's)."""
        assert self.data_uri_template is not None
        return TableTarget(
            identifier=identifier,
            data_uri=self.data_uri_template.replace("{path}", "/".join(identifier.split("."))),
            field_ids=self.known_field_ids.get(identifier, self.new_field_ids),
            last_column_id=self.known_last_column_ids.get(identifier),
            columns=self.known_columns.get(identifier),
        )


class LfsMode(StrEnum):
    """`mappings[].lfs.mode`: what a run does with KafScale LFS envelopes in record values."""

    OFF = "off"
    RESOLVE = "resolve"
    REFERENCE = "reference"
    SKIP = "skip"
    HYBRID = "hybrid"


LFS_METADATA_COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec(name="lfs_content_type", type=ColumnType.STRING),
    ColumnSpec(name="lfs_blob_size", type=ColumnType.LONG),
    ColumnSpec(name="lfs_checksum", type=ColumnType.STRING),
    ColumnSpec(name="lfs_checksum_alg", type=ColumnType.STRING),
    ColumnSpec(name="lfs_bucket", type=ColumnType.STRING),
    ColumnSpec(name="lfs_key", type=ColumnType.STRING),
)
"""The columns `lfs.store_metadata` adds (the Go processor's, appended after the mapping's when absent)."""


class LfsSettings(_Model):
    """How LFS envelopes are handled (`mappings[].lfs`), and which buckets blobs may be read from.

    `buckets`: an envelope naming any other bucket is not read (its record is dead-lettered); the
    first is the segment bucket. A local-folder segment source reads blobs from the same folder.
    """

    mode: LfsMode = LfsMode.OFF
    max_inline_size: int = 0
    store_metadata: bool = False
    validate_checksum: bool = True
    resolve_concurrency: int = Field(default=4, ge=1)
    buckets: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _hybrid_has_a_threshold(self) -> LfsSettings:
        if self.mode is LfsMode.HYBRID and self.max_inline_size <= 0:
            raise ValueError("lfs mode 'hybrid' needs max_inline_size > 0")
        return self

    @property
    def fetches(self) -> bool:
        """True when blobs are read (resolve or hybrid)."""
        return self.mode in (LfsMode.RESOLVE, LfsMode.HYBRID)


class ConversionSettings(_Model):
    """How records become rows: mapping columns, validation, corrupt-segment policy, file sizing, LFS."""

    columns: tuple[ColumnSpec, ...] = ()
    partition_by: tuple[PartitionField, ...] = ()
    schema_mode: SchemaMode = SchemaMode.OFF
    json_schema: dict[str, object] | None = None
    corrupt_segment_policy: CorruptSegmentPolicy = CorruptSegmentPolicy.FAIL
    verify_crc: bool = True
    target_file_size_bytes: int = Field(default=128 * 1024 * 1024, gt=0)
    lfs: LfsSettings = LfsSettings()
    partition_file_min_bytes: int = Field(default=DEFAULT_PARTITION_FILE_MIN_BYTES, ge=0)
    """A Kafka partition's rows in one task get files of their own (in offset order) from this many
    bytes of Arrow data; smaller shares of a task are written together in one shared file."""
    infer_columns: bool = False
    """`schema.source: infer`: `columns` are the table's current ones; the job observes the records
    first and adds a column for each new field with a type (`domain/inference.py`)."""
    allow_type_widening: bool = False
    """With `infer_columns`: a new field holding integers and other numbers becomes `double`
    (else `long`)."""

    @model_validator(mode="after")
    def _schema_present_when_validating(self) -> ConversionSettings:
        if self.schema_mode is not SchemaMode.OFF and self.json_schema is None:
            raise ValueError(f"schema_mode {self.schema_mode.value!r} needs json_schema")
        return self

    @property
    def lfs_metadata_columns(self) -> tuple[ColumnSpec, ...]:
        """The `lfs_*` columns `lfs.store_metadata` adds that the mapping does not list itself."""
        if not self.lfs.store_metadata:
            return ()
        listed = {c.name for c in self.columns}
        return tuple(c for c in LFS_METADATA_COLUMNS if c.name not in listed)

    @property
    def table_columns(self) -> tuple[ColumnSpec, ...]:
        """Every column after the base fields: the mapping's, then the LFS metadata columns (as Go)."""
        return (*self.columns, *self.lfs_metadata_columns)


class MappingPlan(_Model):
    """One mapping of the run's topic: its conversion, and its table (fixed) or route, and dead letters."""

    table: TableTarget | None = None
    dead_letter_table: TableTarget
    conversion: ConversionSettings
    route: RoutePlan | None = None

    @model_validator(mode="after")
    def _table_or_route(self) -> MappingPlan:
        if (self.table is None) == (self.route is None):
            raise ValueError("a mapping has exactly one of a table and a route")
        return self

    def static_targets(self) -> tuple[tuple[TableTarget, TableRole], ...]:
        """Its tables known in advance, in commit order: dead letters, routed tables, the table."""
        targets: list[tuple[TableTarget, TableRole]] = [(self.dead_letter_table, TableRole.DEAD_LETTER)]
        if self.route is not None:
            targets += [(t, TableRole.DATA) for t in self.route.static_targets()]
        if self.table is not None:
            targets.append((self.table, TableRole.DATA))
        return tuple(targets)

    @property
    def routed_inference(self) -> bool:
        """Whether each of its tables has its own inferred columns (`route` with `schema.source: infer`)."""
        return self.conversion.infer_columns and self.route is not None

    def target(self, identifier: str) -> TableTarget | None:
        """Its table `identifier` (a template's too, when its route's template names it), else None."""
        for target, _role in self.static_targets():
            if target.identifier == identifier:
                return target
        route = self.route
        if (
            route is not None
            and route.table_template is not None
            and identifier not in route.reserved
            and matches_template(route.table_template, identifier)
        ):
            return route.template_target(identifier)
        return None

    def conversion_for(self, target: TableTarget) -> ConversionSettings:
        """How its rows for `target` are converted: a routed inferred table's own columns, else the
        mapping's conversion."""
        if target.columns is None:
            return self.conversion
        return self.conversion.model_copy(update={"columns": target.columns})


class RunPlan(_Model):
    """Everything the Spark job needs to turn one topic's segment range into data files.

    `table`, `dead_letter_table`, `conversion` and `route` are the topic's first mapping (`table`
    None when it is routed); `more_mappings` are its others (`mappings` gives them all). The
    **anchor** - the table whose marker is the topic's offsets - is the first mapping's table, else
    its route's default table, else its dead-letter table (`anchor`).
    """

    version: Literal[1] = PLAN_VERSION
    run_id: str
    topic: str
    created_at_ms: int
    source: SegmentSource
    partitions: tuple[PartitionPlan, ...]
    table: TableTarget | None
    dead_letter_table: TableTarget
    conversion: ConversionSettings
    result_uri: str
    route: RoutePlan | None = None
    more_mappings: tuple[MappingPlan, ...] = ()

    @property
    def mappings(self) -> tuple[MappingPlan, ...]:
        """Every mapping of the run, the first one first."""
        first = MappingPlan(
            table=self.table,
            dead_letter_table=self.dead_letter_table,
            conversion=self.conversion,
            route=self.route,
        )
        return (first, *self.more_mappings)

    @property
    def anchor(self) -> TableTarget:
        """The table holding the topic's offsets (see the class docstring)."""
        if self.table is not None:
            return self.table
        if self.route is not None and self.route.default_table is not None:
            return self.route.default_table
        return self.dead_letter_table

    @property
    def anchor_role(self) -> TableRole:
        """Whether the anchor holds mapped rows or dead letters."""
        dead_letters = self.anchor.identifier == self.dead_letter_table.identifier
        return TableRole.DEAD_LETTER if dead_letters else TableRole.DATA

    @property
    def infers(self) -> bool:
        """Whether any of its mappings infers its columns (the job then observes the records first)."""
        return any(m.conversion.infer_columns for m in self.mappings)

    @property
    def multi_table(self) -> bool:
        """Whether the run may write tables beyond one table and its dead letters."""
        return self.route is not None or bool(self.more_mappings)

    @field_validator("run_id")
    @classmethod
    def _run_id_shape(cls, value: str) -> str:
        return validate_run_id(value)

    @model_validator(mode="after")
    def _partitions_unique(self) -> RunPlan:
        if (self.table is None) == (self.route is None):
            raise ValueError("a run plan's first mapping has exactly one of a table and a route")
        numbers = [p.partition for p in self.partitions]
        if not numbers:
            raise ValueError("a run plan covers at least one partition")
        if len(set(numbers)) != len(numbers):
            raise ValueError("a run plan lists each partition once")
        return self

    @property
    def total_bytes(self) -> int:
        """Sum of the planned segments' sizes."""
        return sum(s.size_bytes for p in self.partitions for s in p.segments)

    @property
    def segment_count(self) -> int:
        """How many segments the plan covers."""
        return sum(len(p.segments) for p in self.partitions)

    def end_offsets(self) -> dict[int, int]:
        """The offset each partition's committed offset becomes when this run commits."""
        return {p.partition: p.end_inclusive for p in self.partitions}

    def start_offsets(self) -> dict[int, int]:
        """The committed offsets this run expects to find (exclusive starts)."""
        return {p.partition: p.start_exclusive for p in self.partitions}


class RunStatus(StrEnum):
    """How a Spark run ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


class FailureKind(StrEnum):
    """Why a run failed; decides whether retrying the same plan can help."""

    CORRUPT_SEGMENT = "corrupt_segment"
    STRICT_VALIDATION = "strict_validation"
    SEGMENT_UNAVAILABLE = "segment_unavailable"
    INVALID_PLAN = "invalid_plan"
    INTERNAL = "internal"
    BLOB_UNAVAILABLE = "blob_unavailable"
    """An LFS blob could not be read for a reason a retry or a fix may cure (throttling, 5xx, timeout,
    access denied): the run fails and is retried; the record is never dead-lettered for it."""


class RunFailure(_Model):
    """What stopped a run, with the identifiers a person needs to act."""

    kind: FailureKind
    message: str
    segment_key: str | None = None
    position: int | None = None
    record_id: str | None = None
    column: str | None = None
    """The mapping column at fault, when one is (a strict-mode conversion failure, a required column)."""


class ColumnStats(_Model):
    """One column's Iceberg metrics in a data file, taken from the footer the task had just written.

    Bounds are base64 of Iceberg's single-value serialization of the *written* type (`type`), over
    every row group; strings and binaries longer than `dataplane.file_stats.CARRIED_PREFIX` are
    carried as that prefix (`lower_cut`/`upper_cut`), enough for Iceberg's `truncate(16)` default.
    The commit step turns them into the table's metrics (field ids, metrics mode, truncation).
    """

    name: str
    type: ColumnType
    required: bool
    physical_type: str
    size_bytes: int = Field(ge=0)
    value_count: int = Field(ge=0)
    null_count: int | None = None
    has_stats: bool = True
    """Every row group had statistics (Iceberg keeps no null count or bounds otherwise)."""
    lower: str | None = None
    upper: str | None = None
    lower_cut: bool = False
    upper_cut: bool = False


class FileStats(_Model):
    """A data file's Iceberg metrics, computed while it was written (no footer read at commit)."""

    split_offsets: tuple[int, ...] = ()
    columns: tuple[ColumnStats, ...] = ()


class DataFile(_Model):
    """A Parquet file the run wrote, ready to be added to a table as it is.

    `stats` is None in results written before statistics were carried: the commit step then reads
    the file's footer.
    """

    uri: str
    record_count: int = Field(ge=0)
    size_bytes: int = Field(ge=0)
    partition_values: dict[str, PartitionValue] = Field(default_factory=dict)
    stats: FileStats | None = None


class OffsetGap(_Model):
    """Offsets inside a partition's planned range that no segment contained (reported, not invented)."""

    first: Offset
    last: Offset


class QuarantinedSegment(_Model):
    """A segment skipped under the `quarantine` policy; its identity went to the dead-letter table."""

    key: str
    base_offset: Offset
    last_offset: Offset
    error: str


class PartitionOutcome(_Model):
    """What one partition's range produced."""

    partition: PartitionNumber
    first_offset: Offset | None = None
    last_offset: Offset | None = None
    max_timestamp_ms: int | None = None
    records_written: int = 0
    records_dead_lettered: int = 0
    records_overlapped: int = 0
    """Records repeated by an overlapping segment (offsets another segment of the run held: written once)."""
    gaps: tuple[OffsetGap, ...] = ()
    quarantined: tuple[QuarantinedSegment, ...] = ()


class LfsCounts(_Model):
    """What LFS resolution did in a run (or a segment): blobs resolved, errors by reason, durations.

    `errors` is keyed by reason (`decode`, `missing_blob`, `checksum`, `too_large`); each such record
    is a dead-letter row. `duration_counts[i]` / `duration_sums[i]` are the blobs whose resolution
    took at most the i-th bound of `metrics.LFS_DURATION_BUCKETS` (the last: more), and their seconds.
    """

    resolved: int = 0
    resolved_bytes: int = 0
    errors: dict[str, int] = Field(default_factory=dict)
    duration_counts: tuple[int, ...] = ()
    duration_sums: tuple[float, ...] = ()

    def plus(self, other: LfsCounts) -> LfsCounts:
        """The sum of two counts."""
        errors = dict(self.errors)
        for reason, count in other.errors.items():
            errors[reason] = errors.get(reason, 0) + count
        return LfsCounts(
            resolved=self.resolved + other.resolved,
            resolved_bytes=self.resolved_bytes + other.resolved_bytes,
            errors=errors,
            duration_counts=tuple(
                int(x + y) for x, y in _pad_zip(self.duration_counts, other.duration_counts)
            ),
            duration_sums=tuple(x + y for x, y in _pad_zip(self.duration_sums, other.duration_sums)),
        )


def _pad_zip(a: tuple[float, ...], b: tuple[float, ...]) -> list[tuple[float, float]]:
    width = max(len(a), len(b))
    return list(zip((*a, *(0,) * (width - len(a))), (*b, *(0,) * (width - len(b))), strict=True))


class RunCounts(_Model):
    """Records by outcome across the run."""

    written: int = 0
    dead_lettered: int = 0
    out_of_range: int = 0
    control_batches: int = 0
    header_keys_replaced: int = 0
    """Header keys that were not UTF-8, kept with each invalid byte as U+FFFD (as Go stores them)."""
    segments_read: int = 0
    segment_bytes: int = 0
    skipped_lfs: int = 0
    """LFS envelopes left out by `lfs.mode: skip` (their offsets are committed)."""
    lfs: LfsCounts = LfsCounts()
    conversion_failures: dict[str, int] = Field(default_factory=dict)
    """Per mapping column: written records whose present value did not convert to the column's type
    (stored null; the `value` column keeps the bytes). Never silently null: counted here."""


class RunTimings(_Model):
    """Wall-clock timings of the Spark run, in seconds unless named otherwise.

    `session_start_s` is the Spark session start (0 when the session already existed), `process_s`
    the job from reading the plan to writing the result; the `task_*_s` are summed over the tasks
    (so they exceed `process_s` when tasks run in parallel).
    """

    started_at_ms: int
    ended_at_ms: int
    session_start_s: float = 0.0
    process_s: float = 0.0
    tasks: int = 0
    task_read_s: float = 0.0
    task_decode_s: float = 0.0
    task_convert_s: float = 0.0
    task_write_s: float = 0.0
    task_lfs_s: float = 0.0
    task_observe_s: float = 0.0
    """An inferred table's observation stage, summed over its tasks (0 for mapped columns)."""


class TableOutput(_Model):
    """What a run wrote to one table besides the first mapping's `table` and `dead_letter_table` (see
    `RunResult.tables`): its files, rows, per column the values that did not convert, and for an
    inferred table the columns and field ids its files were written with."""

    identifier: str
    role: TableRole
    mapping: int = Field(default=0, ge=0)
    """The index of the topic's mapping that wrote it (in config order)."""
    files: tuple[DataFile, ...] = ()
    records: int = Field(default=0, ge=0)
    conversion_failures: dict[str, int] = Field(default_factory=dict)
    columns: tuple[ColumnSpec, ...] | None = None
    """An inferred mapping's table (in a run of several tables): the columns after the base fields its
    files were written with (the commit adds those the table lacks, in the same Iceberg commit as the
    files). None for every other table."""
    field_ids: dict[str, int] | None = None
    """With `columns`: the field ids its files carry (checked against the table by the commit step)."""


class RunResult(_Model):
    """What the Spark job produced for a plan: files, per-partition outcomes, counts, or a failure.

    `data_files` / `dead_letter_files` are the files of the plan's `table` / `dead_letter_table` (the
    first mapping's); `tables` lists every other table the run wrote rows to (routed tables, other
    mappings' tables and dead letters), each once. `table_outputs(plan, result)` gives them all.
    """

    version: Literal[1] = RESULT_VERSION
    run_id: str
    topic: str
    status: RunStatus
    failure: RunFailure | None = None
    data_files: tuple[DataFile, ...] = ()
    dead_letter_files: tuple[DataFile, ...] = ()
    partitions: tuple[PartitionOutcome, ...] = ()
    counts: RunCounts = RunCounts()
    timings: RunTimings
    tables: tuple[TableOutput, ...] = ()
    columns: tuple[ColumnSpec, ...] | None = None
    """An inferred table's columns (after the base fields) the data files were written with: the
    table's, then the new ones the commit step adds in the same Iceberg commit as the files. None
    for a mapping whose columns are not inferred."""
    field_ids: dict[str, int] | None = None
    """With `columns`: the field ids the data files carry (the plan's, and those the job gave the
    new columns); the commit step checks these against the table."""

    @model_validator(mode="after")
    def _failure_matches_status(self) -> RunResult:
        if (self.status is RunStatus.FAILED) != (self.failure is not None):
            raise ValueError("a failed result carries a failure, and only a failed one")
        if self.status is RunStatus.FAILED and (
            self.data_files or self.dead_letter_files or any(t.files for t in self.tables)
        ):
            raise ValueError("a failed result lists no files: nothing of a failed run may be committed")
        names = [t.identifier for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError("a result lists each table once")
        return self


def plan_as_written(plan: RunPlan, result: RunResult) -> RunPlan:
    """`plan` with the columns and field ids its data files were written with: an inferred table's
    (`RunResult.columns`, `.field_ids` for a run of one table; each `TableOutput`'s in a run of
    several), decided by the job; `plan` itself when nothing is inferred."""
    if not plan.infers:
        return plan
    if not plan.multi_table:
        if result.columns is None:
            return plan
        return plan.model_copy(
            update={
                "conversion": plan.conversion.model_copy(update={"columns": result.columns}),
                "table": plan.table.model_copy(update={"field_ids": result.field_ids})
                if plan.table
                else None,
            }
        )
    mappings = list(plan.mappings)
    for output in result.tables:
        if output.columns is None or output.mapping >= len(mappings):
            continue
        mappings[output.mapping] = written_mapping(mappings[output.mapping], output)
    first = mappings[0]
    return plan.model_copy(
        update={
            "table": first.table,
            "conversion": first.conversion,
            "route": first.route,
            "more_mappings": tuple(mappings[1:]),
        }
    )


def written_mapping(mapping: MappingPlan, output: TableOutput) -> MappingPlan:
    """`mapping` with `output`'s table as the job wrote it (its columns and field ids)."""
    if not mapping.conversion.infer_columns or output.columns is None:
        return mapping
    ids = output.field_ids
    if mapping.table is not None and mapping.table.identifier == output.identifier:
        return mapping.model_copy(
            update={
                "conversion": mapping.conversion.model_copy(update={"columns": output.columns}),
                "table": mapping.table.model_copy(update={"field_ids": ids}),
            }
        )
    route = mapping.route
    if route is None:
        return mapping
    update = {"columns": output.columns, "field_ids": ids}
    tables = {
        value: t.model_copy(update=update) if t.identifier == output.identifier else t
        for value, t in route.tables.items()
    }
    default = route.default_table
    if default is not None and default.identifier == output.identifier:
        default = default.model_copy(update=update)
    known_columns, known_ids = dict(route.known_columns), dict(route.known_field_ids)
    if output.identifier not in {t.identifier for t in route.static_targets()}:
        known_columns[output.identifier] = output.columns
        if ids is not None:
            known_ids[output.identifier] = ids
    routed = route.model_copy(
        update={
            "tables": tables,
            "default_table": default,
            "known_columns": known_columns,
            "known_field_ids": known_ids,
        }
    )
    return mapping.model_copy(update={"route": routed})


def table_outputs(plan: RunPlan, result: RunResult) -> tuple[TableOutput, ...]:
    """Every table of the run with what the run wrote to it, in commit order, the anchor last.

    The order is fixed by the plan: per mapping, its dead-letter table, its template tables (by
    name), the route's `tables` in order and its `default_table`, or its table; then the anchor is
    moved to the end. Tables the plan names are listed even without files (the anchor always commits,
    the others only when they have files). A plan of one fixed table (`multi_table` False) reads its
    files from `data_files` / `dead_letter_files`; any other plan's result lists them in `tables`.
    """
    if not plan.multi_table:
        assert plan.table is not None
        return (
            TableOutput(
                identifier=plan.dead_letter_table.identifier,
                role=TableRole.DEAD_LETTER,
                files=result.dead_letter_files,
                records=sum(o.records_dead_lettered for o in result.partitions),
            ),
            TableOutput(
                identifier=plan.table.identifier,
                role=TableRole.DATA,
                files=result.data_files,
                records=result.counts.written,
                conversion_failures=dict(result.counts.conversion_failures),
            ),
        )
    written = {t.identifier: t for t in result.tables}
    outputs: list[TableOutput] = []
    for index, mapping in enumerate(plan.mappings):
        static = mapping.static_targets()
        names = {t.identifier for t, _ in static}
        dynamic = sorted(
            (t for t in result.tables if t.mapping == index and t.identifier not in names),
            key=lambda t: t.identifier,
        )
        for position, (target, role) in enumerate(static):
            outputs.append(
                written.get(target.identifier)
                or TableOutput(identifier=target.identifier, role=role, mapping=index)
            )
            if position == 0:
                outputs += dynamic
    anchor = next(o for o in outputs if o.identifier == plan.anchor.identifier)
    return (*(o for o in outputs if o is not anchor), anchor)


def validate_run_id(run_id: str) -> str:
    """Return `run_id` if it is 1-64 characters of `[A-Za-z0-9._-]` (EMR clientToken rules)."""
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} must be 1-64 characters of [A-Za-z0-9._-]")
    return run_id


def make_run_id(topic: str, ranges: Iterable[tuple[int, int, int]], attempt: int = 0) -> str:
    """Deterministic run id from the topic, its `(partition, start_exclusive, end_inclusive)` ranges
    and the attempt number.

    The same range and attempt always give the same id, so a retried launcher re-uses the EMR
    `clientToken` and Step Functions execution name instead of starting a second run; a new attempt
    after a failed run gets a new id (EMR would otherwise return the failed run for the old token).
    """
    canonical = ";".join(f"{p}:{s}:{e}" for p, s, e in sorted(ranges))
    digest = hashlib.sha256(f"{topic}\n{canonical}".encode()).hexdigest()[:20]
    suffix = f"-{digest}-a{attempt}"
    return validate_run_id(topic[: 64 - len(suffix)] + suffix)
