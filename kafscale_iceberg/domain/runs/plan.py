"""The run plan: what the launcher writes to `{runs.location}/{topic}/{run_id}/plan.json` and the job reads.

Self-contained: the job needs no etcd, no config file and no catalog. Versioned: a reader refuses a
version it does not know instead of guessing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kafscale_iceberg.domain.routing import data_uri_for, matches_template
from kafscale_iceberg.domain.runner_choice import RunnerKind
from kafscale_iceberg.domain.runs.columns import ColumnSpec, ColumnType, PartitionField, TimeColumns
from kafscale_iceberg.domain.runs.documents import DocumentModel, Offset, PartitionNumber
from kafscale_iceberg.domain.runs.formats import KEY_COLUMN_PREFIX, RegistrySettings
from kafscale_iceberg.domain.runs.upsert import UpsertSettings
from kafscale_iceberg.domain.value_formats import JSON, KeyFormatName, ValueFormatName

PLAN_VERSION: Literal[1] = 1
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
DEFAULT_PARTITION_FILE_MIN_BYTES = 256 * 1024
"""Below this many bytes (Arrow) of one Kafka partition in one task, its rows share a file (see
docs/architecture.md, "Files": the small-file trade)."""


class SchemaMode(StrEnum):
    """`schema.mode`: what happens to records that fail JSON-schema validation."""

    OFF = "off"
    LENIENT = "lenient"
    STRICT = "strict"


class CorruptSegmentPolicy(StrEnum):
    """What a run does with a segment that fails to decode."""

    FAIL = "fail"
    QUARANTINE = "quarantine"


class PlannedSegment(DocumentModel):
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


class PartitionPlan(DocumentModel):
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


class SegmentSource(DocumentModel):
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


class TableTarget(DocumentModel):
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
    metadata_location: str | None = None
    """An upsert table: the table's metadata file as the launcher knew it (`field-ids.json`), which the
    run locates the files holding changed keys in; None when the table has none (new). The commit
    refuses the run when that version no longer stands, and the next plan carries the current one."""
    location_unknown: bool = False
    """The launcher did not know where the table keeps its data (a table not created yet whose catalog
    chooses its location: a REST warehouse name, an S3 Tables bucket ARN), so `data_uri` is a folder
    of the run's documents: the commit step creates the table and refuses the run
    (`TableLocationUnknownError`), recording the location for the next plan (`domain/table_locations.py`)."""


def deleted_keys_target(table: TableTarget) -> TableTarget:
    """Where a run writes the keys it deletes from `table`: a folder of the table's run prefix, under
    a name no table has (these files are read by the commit step, never added to a table)."""
    return TableTarget(
        identifier=f"{table.identifier}#deleted_keys",
        data_uri=f"{table.data_uri.rstrip('/')}/deleted_keys",
        field_ids=None,
    )


class TableRole(StrEnum):
    """What a table of a run holds: mapped rows, or dead letters (or, for an upsert table, the keys
    the run deletes: files of the run only, never a table's)."""

    DATA = "data"
    DEAD_LETTER = "dead_letter"
    DELETED_KEYS = "deleted_keys"


class RoutePlan(DocumentModel):
    """`mappings[].route` as a run carries it (the rules are `domain.routing`'s).

    `tables` maps a value to its table; `default_table` takes records whose field is missing or null (and,
    without a template, strings no key matches); `table_template` names a table for any valid value. A
    template table's files go to its recorded data location (`known_data_uris`), else to
    `data_uri_template` with `{path}` filled in (`routing.data_uri_for`); `known_field_ids` are the ids of
    template tables the commit step has recorded, `new_field_ids` the ids a table this run creates gets.
    `reserved`: every other table of the config, which a template value may not name. An inferred
    mapping's template tables also carry their own columns and `last-column-id` (`known_columns`,
    `known_last_column_ids`; a table not listed starts from the base fields).
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
    known_data_uris: dict[str, str] = Field(default_factory=dict)
    """The run's folder in each template table whose data location the commit step has recorded."""
    template_location_unknown: bool = False
    """A template table not in `known_data_uris` has no known location (`TableTarget.location_unknown`)."""

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

    def resolved(
        self,
        tables: dict[str, TableTarget],
        default_table: TableTarget | None,
        known_columns: dict[str, tuple[ColumnSpec, ...]],
        known_field_ids: dict[str, dict[str, int]],
    ) -> RoutePlan:
        """This route with its tables as a job resolved them (their columns and field ids)."""
        return self.model_copy(
            update={
                "tables": tables,
                "default_table": default_table,
                "known_columns": known_columns,
                "known_field_ids": known_field_ids,
            }
        )

    def template_target(self, identifier: str) -> TableTarget:
        """The target of a table the template named (its ids: recorded ones, else a new table's)."""
        assert self.data_uri_template is not None
        return TableTarget(
            identifier=identifier,
            data_uri=self.known_data_uris.get(identifier) or data_uri_for(self.data_uri_template, identifier),
            location_unknown=identifier not in self.known_data_uris and self.template_location_unknown,
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


class LfsSettings(DocumentModel):
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


class ConversionSettings(DocumentModel):
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
    time_columns: TimeColumns = TimeColumns.TIME
    """`types.time`: the type a time of day from a record schema gets (`TimeColumns`)."""
    value_format: ValueFormatName = JSON
    """How the values are written (`domain/value_formats.py`); with a format other than `json` and
    `infer_columns`, the columns come from the records' own schemas and evolve with them."""
    value_subject: str | None = None
    """Registered formats: the subject whose latest schema reads values without the wire prefix."""
    value_message: str | None = None
    """Protobuf: the message type of values without the wire prefix."""
    key_format: KeyFormatName = None
    """How the keys are written (None: `raw`); decoded, the `key_` columns are read from them."""
    key_subject: str | None = None
    """Registered key formats: the subject whose latest schema reads keys without the wire prefix."""
    key_message: str | None = None
    """Protobuf keys: the message type of keys without the wire prefix."""
    upsert: UpsertSettings | None = None
    """`mode: upsert`: the table holds each key's latest row (None: rows are appended)."""

    @model_validator(mode="after")
    def _schema_present_when_validating(self) -> ConversionSettings:
        # A self-described format's records are checked against their own schemas.
        if self.value_format.self_described:
            return self
        if self.schema_mode is not SchemaMode.OFF and self.json_schema is None:
            raise ValueError(f"schema_mode {self.schema_mode.value!r} needs json_schema")
        return self

    @property
    def reads_registry(self) -> bool:
        """Whether its values or keys name schemas in the schema registry."""
        return self.value_format.registered or (self.key_format is not None and self.key_format.registered)

    @property
    def key_columns(self) -> tuple[ColumnSpec, ...]:
        """The columns read from the decoded key (`key_<field>`; none when keys are `raw`)."""
        if self.key_format is None:
            return ()
        return tuple(c for c in self.columns if c.name.startswith(KEY_COLUMN_PREFIX))

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


class MappingPlan(DocumentModel):
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


class RunPlan(DocumentModel):
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
    schema_registry: RegistrySettings | None = None
    """The registry the records' schemas are read from (a mapping with a registered value format)."""
    runner: RunnerKind = RunnerKind.EMR_SERVERLESS  # chosen by the launcher (domain/runner_choice.py)
    field_ids_digest: str | None = None
    """The digest of the `field-ids.json` the launcher planned from (`TopicFieldIds.digest`; None:
    none was stored, or it was unreadable): the commit step rewrites the document only when the
    tables' ids, columns or an upsert table's version differ from it."""

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

    def with_mappings(self, mappings: list[MappingPlan]) -> RunPlan:
        """This plan with its mappings replaced, in order (the first one's fields stand in the plan)."""
        first = mappings[0]
        return self.model_copy(
            update={
                "table": first.table,
                "conversion": first.conversion,
                "route": first.route,
                "more_mappings": tuple(mappings[1:]),
            }
        )

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
