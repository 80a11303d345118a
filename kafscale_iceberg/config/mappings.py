"""`mappings[]`: one topic into one table (or several: `route`, and several mappings per topic) —
the Go processor's keys (`topic`, `table`, `mode`,
`create_table_if_missing`, `schema`, `lfs`) plus ours (`dead_letter_table`, `partition_by`,
`corrupt_segment_policy`, `target_file_size_bytes`, `upsert` with `mode: upsert`, see
`config.upsert`), with the column, schema and LFS sub-sections.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ByteSize,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kafscale_iceberg.config.base import (
    DEAD_LETTER_SUFFIX,
    LfsMode,
    PositiveByteSize,
    SchemaSource,
    _false_means_off,
    _invalid,
    _lowercase,
    _Problems,
    _Section,
    _zero_means,
)
from kafscale_iceberg.config.formats import MappingFormats, format_problems
from kafscale_iceberg.config.upsert import UpsertConfig, upsert_problems
from kafscale_iceberg.domain.partitioning import (
    describe_partition_field,
    partition_field_name,
    source_type_problem,
)
from kafscale_iceberg.domain.routing import check_route_field, check_template
from kafscale_iceberg.domain.runs import (
    DECIMAL_MAX_PRECISION,
    ColumnSpec,
    ColumnType,
    CorruptSegmentPolicy,
    LfsSettings,
    PartitionField,
    PartitionTransform,
)
from kafscale_iceberg.domain.runs import LfsMode as PlanLfsMode
from kafscale_iceberg.domain.schema import BASE_FIELDS
from kafscale_iceberg.domain.value_formats import JSON, KeyFormatName, ValueFormatName
from kafscale_iceberg.exceptions import SegmentKeyError
from kafscale_iceberg.segments.keys import validate_topic

# Column name -> type of the eight base fields every KafScale table has (ids 1-8).
_BASE_FIELD_TYPES: Mapping[str, ColumnType] = types.MappingProxyType({f.name: f.type for f in BASE_FIELDS})
# Added to the table when a mapping sets lfs.store_metadata (Go appends them if absent).
LFS_METADATA_FIELD_TYPES: Mapping[str, ColumnType] = types.MappingProxyType(
    {
        "lfs_content_type": ColumnType.STRING,
        "lfs_blob_size": ColumnType.LONG,
        "lfs_checksum": ColumnType.STRING,
        "lfs_checksum_alg": ColumnType.STRING,
        "lfs_bucket": ColumnType.STRING,
        "lfs_key": ColumnType.STRING,
    }
)


_DECIMAL_TYPE = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")


class ColumnConfig(_Section):
    """`mappings[].schema.columns[]`: one column extracted from the record's JSON value.

    Besides the Go processor's types: `timestamptz`, `uuid`, `decimal(P,S)` (or `type: decimal` with
    `precision` and `scale`), `struct` with `fields:` (columns), `list` with `element:` and `map`
    (string keys) with `value:` (each a column without a name: `{type: ...}`).
    """

    name: str = ""
    type: Annotated[ColumnType, BeforeValidator(_lowercase)]
    required: bool = False
    precision: int | None = None
    scale: int | None = None
    fields: tuple[ColumnConfig, ...] = ()
    element: ColumnConfig | None = None
    value: ColumnConfig | None = None

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        declared = data.get("type")
        if isinstance(declared, str):
            match = _DECIMAL_TYPE.fullmatch(declared.strip().lower())
            if match:
                data = {**data, "type": "decimal", "precision": int(match[1]), "scale": int(match[2])}
        return data

    @model_validator(mode="after")
    def _check_parts(self) -> ColumnConfig:
        problems = _Problems()
        kind = self.type
        if kind is ColumnType.DECIMAL:
            if self.precision is None or not 1 <= self.precision <= DECIMAL_MAX_PRECISION:
                problems.add(
                    "type", f"decimal needs a precision of 1 to {DECIMAL_MAX_PRECISION}: decimal(P,S)"
                )
            elif self.scale is not None and not 0 <= self.scale <= self.precision:
                problems.add("type", f"decimal scale must be between 0 and the precision {self.precision}")
        if (kind is ColumnType.STRUCT) != bool(self.fields):
            problems.add("fields", "is required for a struct column, and only for one")
        if (kind is ColumnType.LIST) != (self.element is not None):
            problems.add("element", "is required for a list column ({type: ...}), and only for one")
        if (kind is ColumnType.MAP) != (self.value is not None):
            problems.add(
                "value", "is required for a map column ({type: ...}; keys are strings), and only for one"
            )
        names = [f.name for f in self.fields]
        for index, name in enumerate(names):
            if not name:
                problems.add(f"fields[{index}].name", "is required")
            elif names.index(name) != index:
                problems.add(f"fields[{index}].name", f"{name!r} is listed twice")
        problems.raise_if_any()
        return self

    def to_spec(self, name: str | None = None) -> ColumnSpec:
        """The column as a run plan carries it."""
        return ColumnSpec(
            name=self.name if name is None else name,
            type=self.type,
            required=self.required,
            precision=self.precision if self.type is ColumnType.DECIMAL else None,
            scale=(self.scale or 0) if self.type is ColumnType.DECIMAL else None,
            fields=tuple(f.to_spec() for f in self.fields),
            element=self.element.to_spec("element") if self.element is not None else None,
            value=self.value.to_spec("value") if self.value is not None else None,
        )


class MappingSchemaConfig(_Section):
    """`mappings[].schema`: where the table's extra columns come from."""

    source: Annotated[SchemaSource, BeforeValidator(_lowercase)] = "none"
    columns: tuple[ColumnConfig, ...] = ()
    allow_type_widening: bool = False

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        # Go's rule: `mapping` when columns are listed, else `registry` when schema.registry.base_url is
        # set (KafscaleConfig fills that case in, it needs the global section), else `none`.
        if "source" not in data:
            data["source"] = "mapping" if data.get("columns") else "none"
        return data

    @model_validator(mode="after")
    def _check_columns(self) -> MappingSchemaConfig:
        problems = _Problems()
        if self.source == "mapping" and not self.columns:
            problems.add("columns", "is required when schema.source is 'mapping' (list {name, type})")
        if self.source == "infer" and self.columns:
            problems.add(
                "columns",
                "must be left out when schema.source is 'infer' (the columns come from the records); "
                "use schema.source: mapping to list them yourself",
            )
        seen: set[str] = set()
        for index, column in enumerate(self.columns):
            if not column.name:
                problems.add(f"columns[{index}].name", "is required")
            elif column.name in _BASE_FIELD_TYPES:
                problems.add(
                    f"columns[{index}].name",
                    f"{column.name!r} is a base field every KafScale table already has "
                    f"({', '.join(_BASE_FIELD_TYPES)}); choose another name",
                )
            elif column.name in seen:
                problems.add(f"columns[{index}].name", f"{column.name!r} is listed twice")
            seen.add(column.name)
        problems.raise_if_any()
        return self


class LfsConfig(_Section):
    """`mappings[].lfs`: how KafScale large-file (LFS) envelopes in record values are handled."""

    mode: Annotated[LfsMode, BeforeValidator(_false_means_off)] = "off"
    max_inline_size: int = 0
    store_metadata: bool = False
    validate_checksum: bool = True
    resolve_concurrency: Annotated[int, _zero_means(4)] = 4
    # Ours: buckets besides s3.bucket that envelopes may name (the job's role must be able to read them).
    blob_buckets: tuple[str, ...] = ()

    @field_validator("blob_buckets", mode="before")
    @classmethod
    def _single_bucket_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _hybrid_needs_a_threshold(self) -> LfsConfig:
        if self.mode == "hybrid" and self.max_inline_size <= 0:
            problems = _Problems()
            problems.add(
                "max_inline_size",
                f"must be > 0 when mode is 'hybrid' (blobs up to this size are resolved inline), "
                f"got {self.max_inline_size}",
            )
            problems.raise_if_any()
        return self


# --------------------------------------------------------------------------------------------------
# Mappings (Go keys plus ours)

_TRANSFORMS: Mapping[str, PartitionTransform] = {
    "identity": PartitionTransform.IDENTITY,
    "year": PartitionTransform.YEAR,
    "years": PartitionTransform.YEAR,
    "month": PartitionTransform.MONTH,
    "months": PartitionTransform.MONTH,
    "day": PartitionTransform.DAY,
    "days": PartitionTransform.DAY,
    "hour": PartitionTransform.HOUR,
    "hours": PartitionTransform.HOUR,
    "bucket": PartitionTransform.BUCKET,
    "truncate": PartitionTransform.TRUNCATE,
}
_PARAMETER_NAMES: Mapping[PartitionTransform, tuple[str, str]] = {
    PartitionTransform.BUCKET: ("N", "the number of buckets"),
    PartitionTransform.TRUNCATE: ("W", "the width to cut values to"),
}
_PARTITION_TEXT = re.compile(
    r"(?P<transform>\w+)\s*\(\s*(?:(?P<parameter>[^,()\s]+)\s*,\s*)?(?P<inner>[^,()\s]+)\s*\)"
    r"|(?P<bare>[^(),\s]+)"
)
_PARTITION_FORMS = (
    "col, identity(col), year(col), month(col), day(col), hour(col), bucket(N, col), truncate(W, col)"
)


def _parse_partition_field(value: object) -> object:
    """`col`, `identity(col)`, `day(col)` (plural `days(col)` too), `bucket(N, col)`,
    `truncate(W, col)` -> a PartitionField."""
    if not isinstance(value, str):
        return value
    match = _PARTITION_TEXT.fullmatch(value.strip())
    if match is None:
        raise _invalid(f"{value!r} is not a partition field; allowed forms: {_PARTITION_FORMS}")
    if match["bare"] is not None:
        return PartitionField(column=match["bare"], transform=PartitionTransform.IDENTITY)
    name = match["transform"].lower()
    transform = _TRANSFORMS.get(name)
    if transform is None:
        raise _invalid(
            f"transform {match['transform']!r} in {value!r} is not supported; allowed forms: "
            + _PARTITION_FORMS
        )
    wanted = _PARAMETER_NAMES.get(transform)
    text = match["parameter"]
    if wanted is None:
        if text is not None:
            raise _invalid(f"{name} takes only a column: {name}(col), got {value!r}")
        return PartitionField(column=match["inner"], transform=transform)
    parameter = int(text) if text is not None and re.fullmatch(r"[+-]?\d+", text) else None
    if parameter is None or parameter < 1:
        shown = "nothing" if text is None else repr(text)
        letter, meaning = wanted
        raise _invalid(f"{name} needs {letter} ≥ 1 ({meaning}), got {shown}: write {name}({letter}, col)")
    return PartitionField(column=match["inner"], transform=transform, parameter=parameter)


def _split_identifier(value: str) -> tuple[str, ...]:
    return tuple(value.split("."))


def _check_identifier(value: str) -> str:
    parts = _split_identifier(value)
    if len(parts) < 2 or any(not part or part != part.strip() for part in parts):
        raise _invalid(f"must be an Iceberg identifier 'namespace.table' (e.g. prod.orders), got {value!r}")
    return value


def _check_optional_identifier(value: str) -> str:
    return _check_identifier(value) if value else value


class RouteConfig(_Section):
    """`mappings[].route`: each record to the table its field's value names (see `domain.routing`).

    `field` is a top-level name or a dotted path into objects; `tables` maps values to tables;
    `default_table` takes records whose field is missing or null (and, without a template, values no
    key matches); `table_template` (`ns.orders_{value}`) names a table for any other valid value.
    """

    field: str
    tables: dict[str, Annotated[str, AfterValidator(_check_identifier)]] = Field(default_factory=dict)
    default_table: Annotated[str, AfterValidator(_check_optional_identifier)] = ""
    table_template: str = ""

    @model_validator(mode="after")
    def _check_route(self) -> RouteConfig:
        problems = _Problems()
        field_problem = check_route_field(self.field)
        if field_problem:
            problems.add("field", field_problem)
        if not self.tables and not self.table_template:
            problems.add("tables", "give tables {value: table}, a table_template, or both")
        if self.table_template:
            template_problem = check_template(self.table_template)
            if template_problem:
                problems.add("table_template", template_problem)
        for value in self.tables:
            if not value:
                problems.add("tables", "a value is empty (records with no value go to default_table)")
        problems.raise_if_any()
        return self

    @property
    def namespace(self) -> tuple[str, ...]:
        """The namespace of the route's first table: `default_table`'s, else the first of `tables`',
        else the template's."""
        first = self.default_table or next(iter(self.tables.values()), "") or self.table_template
        return _split_identifier(first)[:-1]


def _check_topic(value: str) -> str:
    try:
        return validate_topic(value)
    except SegmentKeyError as exc:
        raise _invalid(f"{value!r} is not a Kafka topic name: {exc.problem}") from None


class MappingConfig(_Section):
    """`mappings[]`: one topic ingested into one table (and its dead-letter table)."""

    topic: Annotated[str, AfterValidator(_check_topic)]
    table: Annotated[str, AfterValidator(_check_optional_identifier)] = ""
    route: RouteConfig | None = None
    mode: Annotated[Literal["append", "upsert"], BeforeValidator(_lowercase)] = "append"
    create_table_if_missing: bool = False
    schema_: MappingSchemaConfig = Field(default_factory=MappingSchemaConfig, alias="schema")
    lfs: LfsConfig = Field(default_factory=LfsConfig)
    # Ours:
    dead_letter_table: str = Field(default="", validate_default=True)
    partition_by: tuple[Annotated[PartitionField, BeforeValidator(_parse_partition_field)], ...] = ()
    corrupt_segment_policy: Annotated[CorruptSegmentPolicy | None, BeforeValidator(_lowercase)] = None
    target_file_size_bytes: PositiveByteSize | None = None
    # This topic's batching, over `runs.*` (a small topic can wait longer and cost less per GB, as
    # Firehose's buffers do; docs/configuration.md "Batching").
    min_bytes_per_run: Annotated[ByteSize, Field(ge=0)] | None = None
    max_wait_seconds: Annotated[int, Field(ge=0)] | None = None
    # Record formats (`config/formats.py`):
    value_format: ValueFormatName = JSON
    value_subject: str = ""
    value_message: str = ""
    key_format: KeyFormatName = None
    key_subject: str = ""
    key_message: str = ""

    @model_validator(mode="after")
    def _formats_fit(self) -> MappingConfig:
        formats = MappingFormats(
            value_format=self.value_format,
            value_subject=self.value_subject,
            value_message=self.value_message,
            key_format=self.key_format,
            key_subject=self.key_subject,
            key_message=self.key_message,
            schema_source=self.schema_.source,
            column_names=tuple(c.name for c in self.schema_.columns),
            lfs_on=self.lfs.mode != "off",
            upsert=self.upsert is not None,
            routed=self.route is not None,
        )
        format_problems(formats).raise_if_any()
        return self

    upsert: UpsertConfig | None = None

    @field_validator("partition_by", mode="before")
    @classmethod
    def _single_field_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("dead_letter_table")
    @classmethod
    def _default_dead_letter_table(cls, value: str, info: ValidationInfo) -> str:
        table = info.data.get("table")
        route = info.data.get("route")
        if table is None or (not table and not isinstance(route, RouteConfig)):  # reported elsewhere
            return value
        if table:
            namespace = _split_identifier(table)[:-1]
            derived = f"{table}{DEAD_LETTER_SUFFIX}"
        else:  # routed: the default table's dead letters, else `{namespace}.{topic}__dlq`
            assert isinstance(route, RouteConfig)
            namespace = route.namespace
            topic = str(info.data.get("topic", "")).replace(".", "_").replace("-", "_").lower()
            derived = (
                f"{route.default_table}{DEAD_LETTER_SUFFIX}"
                if route.default_table
                else ".".join((*namespace, f"{topic}{DEAD_LETTER_SUFFIX}"))
            )
        if not value:
            return derived
        if "." not in value:  # a bare name lives in the table's namespace
            return ".".join((*namespace, value))
        return _check_identifier(value)

    @model_validator(mode="after")
    def _check_tables_and_partitions(self) -> MappingConfig:
        problems = _Problems()
        if self.route is not None and self.table:
            problems.add(
                "table",
                "is not allowed with route: a routed mapping's tables are route.tables, "
                "route.table_template and route.default_table (for records no value routes)",
            )
        elif self.route is None and not self.table:
            problems.add("table", "is required (an Iceberg identifier 'namespace.table'), or give a route")
        if self.dead_letter_table and self.dead_letter_table == self.table:
            problems.add("dead_letter_table", f"must differ from the table {self.table!r}")
        elif self.dead_letter_table in self.data_tables:
            problems.add(
                "dead_letter_table", f"{self.dead_letter_table!r} is also a table this mapping writes rows to"
            )
        column_types = self.known_column_types()
        seen: set[PartitionField] = set()
        names: set[str] = set()
        for index, field in enumerate(self.partition_by):
            key = f"partition_by[{index}]"
            if field in seen:
                problems.add(key, f"{describe_partition_field(field)} is listed twice")
            elif partition_field_name(field) in names:
                problems.add(
                    key,
                    f"{describe_partition_field(field)} gives a second partition field named "
                    f"{partition_field_name(field)!r}; keep one {field.transform.value} of a column",
                )
            seen.add(field)
            names.add(partition_field_name(field))
            column_type = column_types.get(field.column)
            if column_type is None:
                if self.schema_.source == "registry":
                    continue  # registry columns are only known at planning time; checked there
                if self.schema_.source == "infer":
                    problems.add(
                        key,
                        f"column {field.column!r} is not a base field ({', '.join(_BASE_FIELD_TYPES)}); "
                        "with schema.source: infer the other columns only exist once records show them, "
                        "so a table can be partitioned by base fields only",
                    )
                    continue
                problems.add(
                    key,
                    f"column {field.column!r} is neither a base field ({', '.join(_BASE_FIELD_TYPES)}) "
                    "nor a column of this mapping",
                )
                continue
            problem = source_type_problem(field, column_type)
            if problem is not None:
                hint = " (milliseconds as a number)" if field.column == "timestamp_ms" else ""
                problems.add(key, problem + hint)
        problems.raise_if_any()
        return self

    @model_validator(mode="after")
    def _check_upsert(self) -> MappingConfig:
        problems = _Problems()
        found = upsert_problems(
            self.upsert,
            mode=self.mode,
            routed=self.route is not None,
            lfs_on=self.lfs.mode != "off",
            schema_source=self.schema_.source,
            columns=self.schema_.columns,
            partition_columns=[field.column for field in self.partition_by],
        )
        for key, problem in found:
            problems.add(key, problem)
        problems.raise_if_any()
        return self

    @model_validator(mode="after")
    def _infer_reads_plain_values(self) -> MappingConfig:
        if self.schema_.source != "infer":
            return self
        problems = _Problems()
        if self.lfs.mode != "off":
            problems.add(
                "lfs.mode",
                f"must be off when schema.source is 'infer' (got {self.lfs.mode!r}): columns are inferred "
                "from the record values as they are in the segments, not from LFS blobs",
            )
        problems.raise_if_any()
        return self

    @model_validator(mode="after")
    def _lfs_columns_keep_their_types(self) -> MappingConfig:
        if not self.lfs.store_metadata or self.schema_.source != "mapping":
            return self
        problems = _Problems()
        for index, column in enumerate(self.schema_.columns):
            wanted = LFS_METADATA_FIELD_TYPES.get(column.name)
            if wanted is not None and column.type != wanted:
                problems.add(
                    f"schema.columns[{index}].type",
                    f"{column.name!r} is filled from LFS metadata (lfs.store_metadata), which is "
                    f"{wanted.value}; declare it {wanted.value} or drop it from the columns",
                )
        problems.raise_if_any()
        return self

    @property
    def identifier(self) -> tuple[str, ...]:
        """The table's identifier: `prod.orders` -> `("prod", "orders")` (a routed mapping: its anchor's)."""
        return _split_identifier(self.table or self.anchor_table)

    @property
    def data_tables(self) -> tuple[str, ...]:
        """The tables this mapping writes rows to that the config names (a template's are found later)."""
        if self.route is None:
            return (self.table,) if self.table else ()
        named = list(self.route.tables.values())
        if self.route.default_table:
            named.append(self.route.default_table)
        return tuple(dict.fromkeys(named))

    @property
    def anchor_table(self) -> str:
        """The table whose marker holds the topic's offsets when this mapping is its first: the table,
        else the route's default table, else the dead-letter table."""
        if self.table:
            return self.table
        if self.route is not None and self.route.default_table:
            return self.route.default_table
        return self.dead_letter_table

    @property
    def static_tables(self) -> tuple[str, ...]:
        """Every table the config names for this mapping: its data tables, then its dead letters."""
        return (*self.data_tables, self.dead_letter_table)

    @property
    def namespace(self) -> tuple[str, ...]:
        """The table's namespace: every part but the last (`("prod",)`)."""
        return self.identifier[:-1]

    @property
    def table_name(self) -> str:
        """The table's own name: the last part (`"orders"`)."""
        return self.identifier[-1]

    @property
    def dead_letter_identifier(self) -> tuple[str, ...]:
        """The dead-letter table's identifier (default: `{table}__dlq` in the same namespace)."""
        return _split_identifier(self.dead_letter_table)

    def known_column_types(self) -> dict[str, ColumnType]:
        """Every column the table will have that the config alone determines, by name -> type."""
        types_by_name: dict[str, ColumnType] = dict(_BASE_FIELD_TYPES)
        if self.lfs.store_metadata:
            types_by_name.update(LFS_METADATA_FIELD_TYPES)
        if self.schema_.source == "mapping":
            types_by_name.update({column.name: column.type for column in self.schema_.columns})
        return types_by_name

    def lfs_settings(self, segment_bucket: str) -> LfsSettings:
        """The LFS settings a run plan carries; blobs may be read from the segment bucket and
        `lfs.blob_buckets` (see docs/configuration.md, "LFS")."""
        lfs = self.lfs
        buckets = tuple(dict.fromkeys(b for b in (segment_bucket, *lfs.blob_buckets) if b))
        return LfsSettings(
            mode=PlanLfsMode(lfs.mode),
            max_inline_size=lfs.max_inline_size,
            store_metadata=lfs.store_metadata,
            validate_checksum=lfs.validate_checksum,
            resolve_concurrency=max(1, lfs.resolve_concurrency),
            buckets=buckets,
        )

    def column_specs(self) -> tuple[ColumnSpec, ...]:
        """The mapping's columns as a run plan carries them (empty unless `schema.source` is `mapping`)."""
        if self.schema_.source != "mapping":
            return ()
        return tuple(column.to_spec() for column in self.schema_.columns)
