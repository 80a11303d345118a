"""Mapping columns as Iceberg types, and a table's schema and partitioning against what a run writes.

- `iceberg_type`, `column_iceberg_type`, `field_iceberg_type`: the one place a mapping column's Iceberg
  type is decided; `column_spec_of` / `table_columns` read a table's columns back as mapping columns.
- `plan_schema_changes` (pure) and `apply_schema_changes`: the evolution `ensure_table` makes before any
  file is added (optional columns added, int->long / float->double widened when allowed, required
  columns relaxed; anything else a `SchemaChangeError`).
- `stage_new_columns`: an inferred table's renamed and new columns, staged in the transaction that adds
  its files; `stage_column_sources` the table property keeping their former names and Protobuf numbers.
- `field_ids_by_path`: a schema's field ids as `domain.field_ids` plans them.
- `iceberg_transform`, `check_partitioning`: partition transforms, and a table's spec checked against
  the run's.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortField, SortOrder
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from kafscale_iceberg.domain.column_sources import COLUMN_SOURCES_PROPERTY, sources_property, with_sources
from kafscale_iceberg.domain.commits import (
    TableCommit,
    TableSpec,
    describe_partitioning,
)
from kafscale_iceberg.domain.field_ids import missing_parts
from kafscale_iceberg.domain.renames import column_renames
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, PartitionField, PartitionTransform
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES, FieldSpec
from kafscale_iceberg.domain.schema_evolution import merged_column, widened_parts
from kafscale_iceberg.exceptions import (
    InferredColumnChangedError,
    PartitionSpecMismatchError,
    SchemaChangeError,
)

logger = logging.getLogger(__name__)

NAME_MAPPING = "schema.name-mapping.default"
"""The table property mapping the Spark job's Parquet files (no field ids) to the columns by name."""


def iceberg_type(column_type: ColumnType) -> PrimitiveType:
    """The Iceberg type of a mapping column type - the one place this is decided.

    As the Go processor: `timestamp` is Iceberg `timestamp` (no time zone, microseconds), `date` is
    `date`, `int`/`long` are 32/64-bit, `float`/`double` 32/64-bit.
    """
    types: Mapping[ColumnType, PrimitiveType] = {
        ColumnType.BOOLEAN: BooleanType(),
        ColumnType.INT: IntegerType(),
        ColumnType.LONG: LongType(),
        ColumnType.FLOAT: FloatType(),
        ColumnType.DOUBLE: DoubleType(),
        ColumnType.STRING: StringType(),
        ColumnType.BINARY: BinaryType(),
        ColumnType.TIMESTAMP: TimestampType(),
        ColumnType.DATE: DateType(),
        ColumnType.TIMESTAMPTZ: TimestamptzType(),
        ColumnType.UUID: UUIDType(),
        ColumnType.TIME: TimeType(),
    }
    return types[column_type]


def column_iceberg_type(column: ColumnSpec, next_id: Callable[[], int]) -> IcebergType:
    """The Iceberg type of a mapping column with its parts: `decimal(P, S)`, and structs, lists and
    maps (string keys) whose parts are all optional, with field ids from `next_id` (pyiceberg assigns
    fresh ones when the table is created or the column added)."""
    if column.type is ColumnType.DECIMAL:
        return DecimalType(column.precision or 1, column.scale or 0)
    if column.type is ColumnType.STRUCT:
        return StructType(
            *(
                NestedField(
                    field_id=next_id(),
                    name=f.name,
                    field_type=column_iceberg_type(f, next_id),
                    required=False,
                )
                for f in column.fields
            )
        )
    if column.type is ColumnType.LIST and column.element is not None:
        element_id = next_id()
        return ListType(element_id, column_iceberg_type(column.element, next_id), element_required=False)
    if column.type is ColumnType.MAP and column.value is not None:
        key_id, value_id = next_id(), next_id()
        return MapType(
            key_id, StringType(), value_id, column_iceberg_type(column.value, next_id), value_required=False
        )
    return iceberg_type(column.type)


def field_iceberg_type(field: FieldSpec, next_id: Callable[[], int] | None = None) -> IcebergType:
    """The Iceberg type of a table field (a mapping column's parts included)."""
    if field.column is None:
        return iceberg_type(field.type)
    counter = itertools.count(10_000)
    return column_iceberg_type(field.column, next_id or (lambda: next(counter)))


def type_text(field_type: IcebergType) -> str:
    """An Iceberg type as text without field ids, to compare a table's type with a mapping's."""
    if isinstance(field_type, StructType):
        return "struct<" + ", ".join(f"{f.name}: {type_text(f.field_type)}" for f in field_type.fields) + ">"
    if isinstance(field_type, ListType):
        return f"list<{type_text(field_type.element_type)}>"
    if isinstance(field_type, MapType):
        return f"map<{type_text(field_type.key_type)}, {type_text(field_type.value_type)}>"
    return str(field_type)


# (narrower, wider) Iceberg type names: the promotions Iceberg allows and the Go processor applies.
_WIDENINGS = frozenset({("int", "long"), ("float", "double")})


@dataclass(frozen=True)
class SchemaChanges:
    """What `ensure_table` did to a table: created it, or the columns it added, widened or relaxed."""

    created: bool = False
    added: tuple[str, ...] = ()
    widened: tuple[tuple[str, str, str], ...] = ()
    """`(column, old type, new type)`."""
    relaxed: tuple[str, ...] = ()
    """Columns made optional."""

    def __bool__(self) -> bool:
        return self.created or bool(self.added or self.widened or self.relaxed)


def plan_schema_changes(table: str, schema: Schema, spec: TableSpec) -> SchemaChanges:
    """Compare a table's schema with the fields a run writes; raises `SchemaChangeError` on a refused change.

    Pure: reads `schema`, changes nothing.
    """
    added: list[str] = []
    widened: list[tuple[str, str, str]] = []
    relaxed: list[str] = []
    for wanted in spec.fields:
        new_type = field_iceberg_type(wanted)
        try:
            existing = schema.find_field(wanted.name)
        except ValueError:
            added.append(wanted.name)
            continue
        old_name, new_name = type_text(existing.field_type), type_text(new_type)
        if old_name != new_name:
            if (old_name, new_name) in _WIDENINGS:
                if not spec.allow_type_widening:
                    raise SchemaChangeError(
                        table,
                        wanted.name,
                        old_name,
                        new_name,
                        "widening is off: set schema.allow_type_widening: true on the mapping to widen it",
                    )
                widened.append((wanted.name, old_name, new_name))
            elif (new_name, old_name) not in _WIDENINGS:
                raise SchemaChangeError(
                    table,
                    wanted.name,
                    old_name,
                    new_name,
                    "only int->long and float->double can change in place (and a nested column's type "
                    "must match as a whole); map the values to a new column name, or migrate the table "
                    "yourself",
                )
        if existing.required and not wanted.required:
            relaxed.append(wanted.name)
    return SchemaChanges(added=tuple(added), widened=tuple(widened), relaxed=tuple(relaxed))


def apply_schema_changes(table: Table, spec: TableSpec, changes: SchemaChanges) -> None:
    types = {f.name: field_iceberg_type(f) for f in spec.fields}
    with table.update_schema() as update:
        for name in changes.added:
            update.add_column(name, types[name], required=False)
        for name, _old, _new in changes.widened:
            update.update_column(name, field_type=types[name])
        for name in changes.relaxed:
            update.update_column(name, required=False)


def stage_new_columns(transaction: Transaction, table: str, commit: TableCommit) -> None:
    """Add what the table lacks of an inferred table's columns to `transaction`: new columns, and new
    fields inside existing struct columns, optional, in the order the run planned their ids
    (`domain.field_ids.planned_field_ids(new_parts=True)`), and the promotions a record schema brought
    (int -> long, float -> double, a wider decimal: `domain/schema_evolution.py`). Raises
    `InferredColumnChangedError` (nothing staged) when a column or part the table has is of another
    type in the run's files that is not such a promotion."""
    _stage_renames(transaction, table, commit)
    schema = transaction.table_metadata.schema()
    by_name = {f.name: f for f in schema.fields}
    known = field_ids_by_path(schema)
    counter = itertools.count(10_000)
    additions: list[tuple[tuple[str, ...], IcebergType]] = []
    widenings: list[tuple[tuple[str, ...], IcebergType]] = []
    conflicts: dict[str, tuple[str, str]] = {}
    for column in commit.columns or ():
        existing = by_name.get(column.name)
        if existing is None:
            additions.append(((column.name,), column_iceberg_type(column, lambda: next(counter))))
            continue
        missing = missing_parts(column, known)
        written_spec = _without(column, {parts for parts, _ in missing})
        written = column_iceberg_type(written_spec, lambda: next(counter))
        if type_text(existing.field_type) != type_text(written):
            # A record schema's promotion (int -> long, float -> double, a wider decimal) is staged;
            # anything else is a conflict (`domain/schema_evolution.py`).
            current = column_spec_of(existing)
            if current is None or merged_column(current, written_spec).type_name != written_spec.type_name:
                conflicts[column.name] = (type_text(written), type_text(existing.field_type))
                continue
            widenings.extend(
                (parts, column_iceberg_type(spec, lambda: next(counter)))
                for parts, spec in widened_parts(current, written_spec)
            )
        additions.extend((parts, column_iceberg_type(spec, lambda: next(counter))) for parts, spec in missing)
    if conflicts:
        raise InferredColumnChangedError(table, commit.run_id, conflicts)
    if additions or widenings:
        with transaction.update_schema() as update:
            for parts, field_type in widenings:
                update.update_column(parts, field_type=field_type)
            for parts, field_type in additions:
                update.add_column(parts, field_type, required=False)
        logger.info(
            "inferred columns added with the run's files",
            extra={
                "table": table,
                "run_id": commit.run_id,
                "added": [".".join(p) for p, _ in additions],
                "widened": [".".join(p) for p, _ in widenings],
            },
        )


def _stage_renames(transaction: Transaction, table: str, commit: TableCommit) -> None:
    """The columns a record schema renamed (Avro aliases, a Protobuf number), renamed in `transaction`:
    each keeps its field id and rows (`domain/renames.py`)."""
    renames = column_renames(commit.columns or (), field_ids_by_path(transaction.table_metadata.schema()))
    if not renames:
        return
    with transaction.update_schema() as update:
        for rename in renames:
            update.rename_column(rename.old, rename.new_name)
    logger.info(
        "columns renamed with the run's files",
        extra={
            "table": table,
            "run_id": commit.run_id,
            "renamed": {".".join(r.old): ".".join(r.new) for r in renames},
        },
    )


def _without(column: ColumnSpec, paths: set[tuple[str, ...]], at: tuple[str, ...] = ()) -> ColumnSpec:
    """`column` less the parts at `paths` (path parts from the top-level column's name)."""
    here = (*at, column.name)
    if column.type is ColumnType.STRUCT:
        fields = tuple(_without(f, paths, here) for f in column.fields if (*here, f.name) not in paths)
        return column.model_copy(update={"fields": fields})
    if column.type is ColumnType.LIST and column.element is not None:
        return column.model_copy(update={"element": _without(column.element, paths, here)})
    return column


def column_spec_of(field: NestedField) -> ColumnSpec | None:
    """A table column as a mapping column (type and parts), None for a type mappings cannot name."""
    field_type = field.field_type
    name, required = field.name, field.required
    if isinstance(field_type, DecimalType):
        return ColumnSpec(
            name=name,
            type=ColumnType.DECIMAL,
            required=required,
            precision=field_type.precision,
            scale=field_type.scale,
        )
    if isinstance(field_type, StructType):
        fields = [column_spec_of(f) for f in field_type.fields]
        if not fields or any(f is None for f in fields):
            return None
        return ColumnSpec(
            name=name, type=ColumnType.STRUCT, required=required, fields=tuple(f for f in fields if f)
        )
    if isinstance(field_type, ListType):
        element = column_spec_of(field_type.element_field)
        if element is None:
            return None
        return ColumnSpec(name=name, type=ColumnType.LIST, required=required, element=element)
    if isinstance(field_type, MapType):
        value = column_spec_of(field_type.value_field)
        if value is None or not isinstance(field_type.key_type, StringType):
            return None
        return ColumnSpec(name=name, type=ColumnType.MAP, required=required, value=value)
    for column_type in ColumnType:
        if column_type not in _NOT_PRIMITIVE and iceberg_type(column_type) == field_type:
            return ColumnSpec(name=name, type=column_type, required=required)
    return None


_NOT_PRIMITIVE = frozenset({ColumnType.DECIMAL, ColumnType.STRUCT, ColumnType.LIST, ColumnType.MAP})


def table_columns(schema: Schema, properties: Mapping[str, str] | None = None) -> tuple[ColumnSpec, ...]:
    """The columns of `schema` after the base fields, as mapping columns (those of a type a mapping
    cannot name left out), with the record-schema sources the table's `properties` keep for them
    (former names, Protobuf numbers: `domain/column_sources.py`)."""
    columns = (column_spec_of(f) for f in schema.fields if f.name not in BASE_FIELD_NAMES)
    found = tuple(c for c in columns if c is not None)
    kept = (properties or {}).get(COLUMN_SOURCES_PROPERTY)
    return with_sources(found, field_ids_by_path(schema), kept) if kept else found


def stage_column_sources(transaction: Transaction, columns: Sequence[ColumnSpec]) -> dict[str, str]:
    """The table property keeping `columns`' record-schema sources by field id, when it changes (to set
    with the run's other properties); the ids are the staged schema's (renames and new columns in)."""
    metadata = transaction.table_metadata
    wanted = sources_property(columns, field_ids_by_path(metadata.schema()))
    if wanted is None or metadata.properties.get(COLUMN_SOURCES_PROPERTY) == wanted:
        return {}
    return {COLUMN_SOURCES_PROPERTY: wanted}


def field_ids_by_path(schema: Schema) -> dict[str, int]:
    """Every field id of `schema` by path, as `domain.field_ids` plans them: top-level names, then
    `struct.field`, `list.element`, `map.key`, `map.value` below them."""
    ids: dict[str, int] = {}

    def walk(path: str, field_type: IcebergType) -> None:
        if isinstance(field_type, StructType):
            for nested in field_type.fields:
                ids[f"{path}.{nested.name}"] = nested.field_id
                walk(f"{path}.{nested.name}", nested.field_type)
        elif isinstance(field_type, ListType):
            ids[f"{path}.element"] = field_type.element_id
            walk(f"{path}.element", field_type.element_type)
        elif isinstance(field_type, MapType):
            ids[f"{path}.key"], ids[f"{path}.value"] = field_type.key_id, field_type.value_id
            walk(f"{path}.key", field_type.key_type)
            walk(f"{path}.value", field_type.value_type)

    for top in schema.fields:
        ids[top.name] = top.field_id
        walk(top.name, top.field_type)
    return ids


def iceberg_transform(field: PartitionField) -> Transform[Any, Any]:
    """pyiceberg's transform of `field`: `BucketTransform(N)`, `TruncateTransform(W)`, `DayTransform()`…"""
    if field.transform is PartitionTransform.BUCKET and field.parameter is not None:
        return BucketTransform(field.parameter)
    if field.transform is PartitionTransform.TRUNCATE and field.parameter is not None:
        return TruncateTransform(field.parameter)
    transforms: Mapping[PartitionTransform, Transform[Any, Any]] = MappingProxyType(
        {
            PartitionTransform.IDENTITY: IdentityTransform(),
            PartitionTransform.YEAR: YearTransform(),
            PartitionTransform.MONTH: MonthTransform(),
            PartitionTransform.DAY: DayTransform(),
            PartitionTransform.HOUR: HourTransform(),
        }
    )
    return transforms[field.transform]


def check_partitioning(spec: TableSpec, table: Table) -> None:
    """Every partition field of the table must be one the run's files are split by (one value per file)."""
    table_fields = _table_partitioning(table.spec(), table.schema())
    mapped = [(field.iceberg_transform, field.column) for field in spec.partition_by]
    if not set(table_fields) <= set(mapped):
        raise PartitionSpecMismatchError(
            spec.identifier, describe_partitioning(table_fields), describe_partitioning(mapped)
        )


def _table_partitioning(partition_spec: PartitionSpec, schema: Schema) -> list[tuple[str, str]]:
    return [
        (str(field.transform), schema.find_column_name(field.source_id) or "?")
        for field in partition_spec.fields
    ]


def key_column_names(schema: Schema) -> list[str]:
    """An upsert table's key columns (its identifier fields) in schema order: the order its files are
    sorted by (compaction) and its declared sort order lists them."""
    key = set(schema.identifier_field_ids)
    return [field.name for field in schema.fields if field.field_id in key]


def key_sort_order(schema: Schema) -> SortOrder:
    """The sort order of a table with identifier fields: its key ascending (`key_column_names`);
    unsorted for a table without."""
    fields = [
        SortField(source_id=schema.find_field(name).field_id, transform=IdentityTransform())
        for name in key_column_names(schema)
    ]
    return SortOrder(*fields) if fields else UNSORTED_SORT_ORDER


def set_identifier_fields(table: Table, spec: TableSpec) -> bool:
    """Declare `spec.identifier_fields` (an upsert table's key) as the table's identifier fields when
    they differ (one schema commit), and the key as its sort order when it has none (compaction
    writes its files in key order); True when changed. Raises `SchemaChangeError` when a key column
    is optional in the table (Iceberg identifier fields are required)."""
    wanted = set(spec.identifier_fields)
    if not wanted:
        return False
    changed = set(table.schema().identifier_field_names()) != wanted
    if changed:
        _declare_identifier_fields(table, spec)
    if table.sort_order().is_unsorted:
        with table.update_sort_order() as update:
            for name in key_column_names(table.schema()):
                update.asc(name, IdentityTransform())
        changed = True
    return changed


def _declare_identifier_fields(table: Table, spec: TableSpec) -> None:
    for name in spec.identifier_fields:
        field = table.schema().find_field(name)
        if not field.required:
            raise SchemaChangeError(
                spec.identifier,
                name,
                f"optional {type_text(field.field_type)}",
                f"required {type_text(field.field_type)} (an upsert key column)",
                "an upsert table's key columns are required; upsert into a new table, or rewrite this one "
                "with the column required",
            )
    with table.update_schema() as update:
        update.set_identifier_fields(*spec.identifier_fields)
