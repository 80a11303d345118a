"""Iceberg tables through pyiceberg: create, evolve, read a topic's commit state, commit a run's files.

`IcebergTableCommitter` is the `TableCommitter` port's adapter. Rules it applies:

- **Creation** (`create_table_if_missing`, namespace too): KafScale's eight base fields with field ids
  1-8, then the mapping's columns; the mapping's partition fields (identity, year, month, day, hour,
  bucket[N], truncate[W]); `write.format.default=parquet` and `schema.name-mapping.default`, which
  maps the Spark job's Parquet files (they carry no field ids) to the columns by name. A create race
  ends in loading the winner.
- **Evolution** before any file is added: a missing column is added *optional* - Iceberg cannot add a
  required column to a table that already holds rows (they would have no value); int->long and
  float->double only with `allow_type_widening`; a table column already wider than the mapping's is
  accepted as it is (Iceberg reads the narrower files promoted); a required table column the mapping
  declares optional is made optional; every other difference is a `SchemaChangeError`. Columns the
  mapping no longer lists are kept. A table created by the KafScale Go processor needs no change.
  An inferred table (`schema.source: infer`) is not evolved here: `commit` stages its new columns
  (`TableCommit.columns`) in the transaction that adds the files, so both are one Iceberg commit.
- **Commit**: one Iceberg transaction = the data files (`add_files`) + the marker properties + the
  snapshot summary, built on exactly the snapshot the caller verified (see `commit`). pyiceberg's own
  commit retries are switched off for it: they re-apply a commit on top of a concurrent one without
  re-checking our offsets, which is the blind retry that duplicates data.
- **Offset reset**: the same single transaction, with a row-level delete (`partition == P and
  offset > N`) instead of files. pyiceberg 0.12 deletes copy-on-write: files whose rows all match are
  dropped (a `delete` snapshot), files with some matching rows are rewritten without them (an
  `overwrite` snapshot); one commit carries both, asserting the branch still points at the snapshot
  verified. A delete matching nothing writes no snapshot: an empty append then carries the marker.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchTableError,
    TableAlreadyExistsError,
    ValidationException,
)
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, GreaterThan, Or, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, _expression_to_complementary_pyarrow
from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.partitioning import PartitionField as IcebergPartitionField
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
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
    UUIDType,
)
from pyiceberg.utils.properties import property_as_bool

from kafscale_iceberg.adapters.iceberg_catalog import CatalogTableAccess
from kafscale_iceberg.adapters.iceberg_data_files import data_files_to_add
from kafscale_iceberg.domain.anomalies import OffsetAnomalies
from kafscale_iceberg.domain.commits import (
    SUMMARY_CONVERSION_FAILURES,
    SUMMARY_TOPIC,
    TableCommit,
    TableSpec,
    TableState,
    decode_conversion_failures,
    describe_partitioning,
    marker_properties,
    read_marker,
)
from kafscale_iceberg.domain.field_ids import TableFieldIds, field_id_mismatches, missing_parts
from kafscale_iceberg.domain.maintenance import files_baseline, total_data_files
from kafscale_iceberg.domain.partitioning import partition_field_name
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, PartitionField, PartitionTransform
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES, FieldSpec
from kafscale_iceberg.exceptions import (
    CatalogUnavailableError,
    CommitOutcomeUnknownError,
    DataFileRejectedError,
    FieldIdMismatchError,
    InferredColumnChangedError,
    KafscaleIcebergError,
    PartitionSpecMismatchError,
    SchemaChangeError,
    TableChangedError,
    TableMissingError,
)

logger = logging.getLogger(__name__)

_SCHEMA_ATTEMPTS = 3
_NAME_MAPPING = "schema.name-mapping.default"
_COMMIT_RETRIES = "commit.retry.num-retries"


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


class IcebergTableCommitter(CatalogTableAccess):
    """Creates, evolves and commits to Iceberg tables in one catalog (the `TableCommitter` port).

    `describe` names the catalog in errors (type and URI, no secret). The last version of each table
    `read_state` loaded or `commit` made is kept, so the `ensure_table`, `commit` and `field_ids`
    that follow in the same commit step, given that state, use it instead of loading the table again
    (each load is a catalog call and a metadata GET); a state of any other version loads the table.
    """

    def __init__(self, catalog: Catalog, *, describe: str = "") -> None:
        super().__init__(catalog, describe=describe)
        self._read: dict[str, Table] = {}

    # -- tables ---------------------------------------------------------------------------------

    def ensure_table(self, spec: TableSpec, current: TableState | None = None) -> SchemaChanges:
        """Create the table (and namespace) if missing and allowed, then evolve its schema. Idempotent.

        `current` (the table's state as just read) spares loading the table again when this adapter
        still holds that version. Raises `TableMissingError`, `SchemaChangeError`,
        `PartitionSpecMismatchError` (terminal), `CatalogUnavailableError` (transient) or `CatalogError`.
        """
        try:
            try:
                table = self._version_read(current) or self._catalog.load_table(spec.identifier)
            except NoSuchTableError:
                if not spec.create_if_missing:
                    raise TableMissingError(spec.identifier) from None
                try:
                    self._create(spec)
                except TableAlreadyExistsError:
                    table = self._catalog.load_table(spec.identifier)  # lost a create race: use the winner
                else:
                    logger.info("table created", extra={"table": spec.identifier})
                    return SchemaChanges(created=True)
            _check_partitioning(spec, table)
            if not spec.evolve:
                return SchemaChanges()  # an inferred table: its commit adds the new columns
            for attempt in range(1, _SCHEMA_ATTEMPTS + 1):
                changes = plan_schema_changes(spec.identifier, table.schema(), spec)
                if not changes:
                    return changes
                try:
                    _apply_schema_changes(table, spec, changes)
                except CommitFailedException:
                    if attempt == _SCHEMA_ATTEMPTS:
                        raise
                    table = self._catalog.load_table(spec.identifier)  # evolved concurrently: re-plan
                    continue
                logger.info(
                    "table schema evolved",
                    extra={
                        "table": spec.identifier,
                        "added": changes.added,
                        "widened": changes.widened,
                        "relaxed": changes.relaxed,
                    },
                )
                return changes
        except KafscaleIcebergError:
            raise
        except Exception as exc:
            raise self._translate(f"ensure table {spec.identifier!r}", exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _create(self, spec: TableSpec) -> None:
        # Top-level fields keep ids 1..n (the base fields' 1-8, as the Go processor's); nested parts
        # take ids after them. The catalog assigns fresh ids on creation either way.
        nested_ids = itertools.count(len(spec.fields) + 1)
        schema = Schema(
            *(
                NestedField(
                    field_id=field.field_id or index,
                    name=field.name,
                    field_type=field_iceberg_type(field, lambda: next(nested_ids)),
                    required=field.required,
                )
                for index, field in enumerate(spec.fields, start=1)
            )
        )
        partition_fields = []
        for index, field in enumerate(spec.partition_by):
            source = schema.find_field(field.column)
            partition_fields.append(
                IcebergPartitionField(
                    source_id=source.field_id,
                    field_id=1000 + index,
                    transform=_transform(field),
                    name=partition_field_name(field),
                )
            )
        if spec.namespace:
            self._catalog.create_namespace_if_not_exists(spec.namespace)
        with self._catalog.create_table_transaction(
            spec.identifier,
            schema,
            partition_spec=PartitionSpec(*partition_fields),
            properties={"write.format.default": "parquet", "format-version": "2"},
        ) as transaction:
            # Ids are assigned by the catalog; the name mapping is computed from the assigned ones.
            mapping = transaction.table_metadata.schema().name_mapping
            transaction.set_properties({_NAME_MAPPING: mapping.model_dump_json()})

    # -- commit state -----------------------------------------------------------------------------

    def read_state(self, table: str, topic: str) -> TableState:
        """The table's current snapshot and what it records for `topic` (its `kafscale.*` properties).

        Raises `TableMissingError`, `TableMarkerError`, `CatalogUnavailableError` or `CatalogError`.
        """
        loaded = self._load(table)
        self._read[table] = loaded
        return _state_of(loaded, table, topic)

    def _version_read(self, state: TableState | None) -> Table | None:
        """The table exactly as `state` was read, when it was the last version this adapter loaded
        (`read_state`) or committed."""
        if state is None or state.version is None:
            return None
        table = self._read.get(state.table)
        return table if table is not None and table.metadata_location == state.version else None

    def last_commit_ms(self, table: str, topic: str) -> int | None:
        """When `topic` was last committed to `table`: the newest snapshot on the current lineage whose
        summary names the topic (`kafscale.topic`), Unix ms; None when no snapshot does (never
        committed by this product, or expired).

        Walks parent snapshots from the current one, so it costs O(snapshots since the topic's last
        commit) in memory, no extra I/O. Raises like `read_state`.
        """
        metadata = self._load(table).metadata
        by_id = {snapshot.snapshot_id: snapshot for snapshot in metadata.snapshots}
        snapshot_id = metadata.current_snapshot_id
        while snapshot_id is not None and snapshot_id in by_id:
            snapshot = by_id[snapshot_id]
            if snapshot.summary is not None and snapshot.summary.get(SUMMARY_TOPIC) == topic:
                return snapshot.timestamp_ms
            snapshot_id = snapshot.parent_snapshot_id
        return None

    def conversion_failures(self, table: str, topic: str) -> dict[str, int]:
        """Per column, the values of `topic` stored null because they did not convert: the sum of the
        `kafscale.conversion-failures` summaries on the current lineage (snapshots still retained).

        Walks parent snapshots in memory, no extra I/O beyond loading the table. Raises like `read_state`.
        """
        totals: dict[str, int] = {}
        for summary in _topic_summaries(self._load(table), topic):
            text = summary.get(SUMMARY_CONVERSION_FAILURES)
            for column, count in decode_conversion_failures(text or "{}").items():
                totals[column] = totals.get(column, 0) + count
        return dict(sorted(totals.items()))

    def offset_anomalies(self, table: str, topic: str) -> OffsetAnomalies:
        """Per partition, the offset gaps and overlapped records of `topic`'s runs: the sum of the
        `kafscale.offset-gaps` / `kafscale.overlapped` summaries on the current lineage (snapshots
        still retained). Walks parent snapshots in memory like `conversion_failures`."""
        total = OffsetAnomalies()
        for summary in _topic_summaries(self._load(table), topic):
            total = total.plus(OffsetAnomalies.from_summary(summary))
        return total

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        """Make ONE Iceberg commit: add `commit.file_uris`, record `commit.marker_after`, write the summary.

        With `commit.delete_after`, the same commit first deletes every row of those partitions whose
        `offset` is greater (copy-on-write: a `delete` and/or `overwrite` snapshot; when nothing
        matches, an empty append carries the marker). Builds on exactly `expected` - on the version it
        was read from when `read_state` loaded it last, else on the table loaded now: raises
        `TableChangedError` (nothing written) when the table's snapshot or marker differ from it, or
        when a concurrent commit wins the race (the catalog asserts the branch's snapshot is still
        the one built on; every marker change comes with a snapshot). Raises `DataFileRejectedError`
        when a file does not fit the table (nothing written), and `CommitOutcomeUnknownError` when the
        catalog failed in a way that may or may not have applied the commit - verify with
        `read_state` before anything else. Returns the state after the commit.
        """
        table = self._version_read(expected) or self._load(expected.table)
        now = _state_of(table, expected.table, commit.topic)
        if now.snapshot_id != expected.snapshot_id or now.marker != expected.marker:
            raise TableChangedError(
                expected.table,
                f"expected snapshot {expected.snapshot_id} with {expected.marker}, "
                f"found snapshot {now.snapshot_id} with {now.marker}",
            )
        transaction = _single_attempt(table).transaction()
        if commit.columns is not None and commit.file_uris:
            # An inferred table's new columns: staged in this transaction, so they land in the same
            # Iceberg commit as the files (ids as Iceberg assigns them; checked just below).
            _stage_new_columns(transaction, expected.table, commit)
        if commit.field_ids is not None and commit.file_uris:
            schema = transaction.table_metadata.schema()
            mismatches = field_id_mismatches(commit.field_ids, field_ids_by_path(schema))
            if mismatches:
                raise FieldIdMismatchError(expected.table, commit.run_id, mismatches)
        updates, removals = marker_properties(commit.topic, commit.marker_after)
        try:
            transaction.set_properties(updates)
            present = tuple(key for key in removals if key in table.properties)
            if present:
                transaction.remove_properties(*present)
            if commit.delete_after:
                delete_rows(
                    transaction,
                    rows_after(commit.delete_after),
                    commit.summary(),
                    data_location=commit.rewrite_location,
                )
            if commit.file_uris:
                # What `add_files` does, from the metrics the run carried instead of one footer read
                # per file (`iceberg_data_files`). Duplicate paths are ruled out by the offsets
                # marker; pyiceberg's own check would read every manifest of the table on each commit.
                _append_files(transaction, table, commit)
            elif transaction.table_metadata.current_snapshot_id == expected.snapshot_id:
                # A run with no rows still moves the offsets (and a delete that matched nothing wrote
                # no snapshot): an empty append snapshot carries the marker.
                with transaction.update_snapshot(snapshot_properties=commit.summary()).fast_append():
                    pass
        except (ValueError, FileNotFoundError) as exc:
            if commit.delete_after:
                raise self._translate(f"delete the rows after offsets {commit.delete_after}", exc) from exc
            raise DataFileRejectedError(
                expected.table, commit.run_id, f"{type(exc).__name__}: {exc}"
            ) from exc
        except OSError as exc:
            raise CatalogUnavailableError(
                self._describe, f"read the data files of run {commit.run_id!r}", str(exc)
            ) from exc
        except Exception as exc:  # staging only: nothing reached the catalog
            raise self._translate(f"prepare the commit of run {commit.run_id!r}", exc) from exc
        try:
            committed = transaction.commit_transaction()
        except (CommitFailedException, ValidationException) as exc:
            raise TableChangedError(expected.table, f"a concurrent commit won: {exc}") from exc
        except Exception as exc:
            raise CommitOutcomeUnknownError(
                expected.table, commit.run_id, f"{type(exc).__name__}: {exc}"
            ) from exc
        self._read[expected.table] = committed
        return _state_of(committed, expected.table, commit.topic)

    def field_ids(self, table: str, current: TableState | None = None) -> TableFieldIds:
        """The table's column ids by path (nested parts included) and `last-column-id`, from the
        version `current` was read or committed as when this adapter holds it, else loaded. Raises
        like `read_state`."""
        metadata = (self._version_read(current) or self._load(table)).metadata
        return TableFieldIds(
            identifier=table,
            field_ids=field_ids_by_path(metadata.schema()),
            last_column_id=metadata.last_column_id,
            columns=table_columns(metadata.schema()),
        )

    def count_rows(self, table: str, after: Mapping[int, int]) -> int:
        """How many rows of `table` have, for a partition of `after`, an `offset` greater than its value.

        A scan reading the `partition` and `offset` columns of the files that may match. Raises
        `TableMissingError`, `CatalogUnavailableError` or `CatalogError`.
        """
        loaded = self._load(table)
        if not after:
            return 0
        try:
            return loaded.scan(row_filter=rows_after(after), selected_fields=("partition", "offset")).count()
        except OSError as exc:
            raise CatalogUnavailableError(self._describe, f"count rows of {table!r}", str(exc)) from exc
        except Exception as exc:
            raise self._translate(f"count rows of {table!r}", exc) from exc


def _stage_new_columns(transaction: Transaction, table: str, commit: TableCommit) -> None:
    """Add what the table lacks of an inferred table's columns to `transaction`: new columns, and new
    fields inside existing struct columns, optional, in the order the run planned their ids
    (`domain.field_ids.planned_field_ids(new_parts=True)`). Raises `InferredColumnChangedError`
    (nothing staged) when a column or part the table has is of another type in the run's files."""
    schema = transaction.table_metadata.schema()
    by_name = {f.name: f for f in schema.fields}
    known = field_ids_by_path(schema)
    counter = itertools.count(10_000)
    additions: list[tuple[tuple[str, ...], IcebergType]] = []
    conflicts: dict[str, tuple[str, str]] = {}
    for column in commit.columns or ():
        existing = by_name.get(column.name)
        if existing is None:
            additions.append(((column.name,), column_iceberg_type(column, lambda: next(counter))))
            continue
        missing = missing_parts(column, known)
        written = column_iceberg_type(
            _without(column, {parts for parts, _ in missing}), lambda: next(counter)
        )
        if type_text(existing.field_type) != type_text(written):
            conflicts[column.name] = (type_text(written), type_text(existing.field_type))
            continue
        additions.extend((parts, column_iceberg_type(spec, lambda: next(counter))) for parts, spec in missing)
    if conflicts:
        raise InferredColumnChangedError(table, commit.run_id, conflicts)
    if additions:
        with transaction.update_schema() as update:
            for parts, field_type in additions:
                update.add_column(parts, field_type, required=False)
        logger.info(
            "inferred columns added with the run's files",
            extra={"table": table, "run_id": commit.run_id, "added": [".".join(p) for p, _ in additions]},
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


def table_columns(schema: Schema) -> tuple[ColumnSpec, ...]:
    """The columns of `schema` after the base fields, as mapping columns (those of a type a mapping
    cannot name left out)."""
    columns = (column_spec_of(f) for f in schema.fields if f.name not in BASE_FIELD_NAMES)
    return tuple(c for c in columns if c is not None)


def _append_files(transaction: Transaction, table: Table, commit: TableCommit) -> None:
    metadata = transaction.table_metadata
    files = data_files_to_add(metadata, table.io, commit.file_uris, {f.uri: f for f in commit.files})
    if metadata.name_mapping() is None:
        transaction.set_properties({_NAME_MAPPING: metadata.schema().name_mapping.model_dump_json()})
    # As `add_files`: a merge append when the table enables manifest merging, else a fast append.
    snapshot = transaction.update_snapshot(snapshot_properties=commit.summary())
    merge = property_as_bool(
        metadata.properties,
        TableProperties.MANIFEST_MERGE_ENABLED,
        TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT,
    )
    with snapshot.merge_append() if merge else snapshot.fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)


@dataclass(frozen=True)
class RowDeletion:
    """What `delete_rows` did: files dropped whole, files rewritten, rows removed and rows rewritten."""

    files_dropped: int = 0
    files_rewritten: int = 0
    rows_removed: int = 0
    rows_rewritten: int = 0


def delete_rows(
    transaction: Transaction,
    delete_filter: BooleanExpression,
    summary: dict[str, str],
    *,
    data_location: str | None = None,
) -> RowDeletion:
    """Delete the rows matching `delete_filter` copy-on-write, as ONE `overwrite` snapshot of `transaction`.

    Only files whose statistics (partition values, column bounds) say they may hold matching rows are
    read (pyiceberg's scan planning); a file all of whose rows match is dropped, a file with some is
    rewritten without them (pyiceberg's writer: the table's field ids, into the table's data
    location), a file with none is left alone. pyiceberg's own `Transaction.delete` writes a
    `delete` and then an `overwrite` snapshot, so time travel could land between them; here both
    changes are one snapshot. Nothing matching: no snapshot (the caller decides).

    `data_location` puts the rewritten files in that folder instead of the table's data location
    (a reset writes under its run folder, so orphan cleanup finds the files of an interrupted one).
    """
    schema = transaction.table_metadata.schema()
    write_metadata = _writing_to(transaction.table_metadata, data_location)
    keep = _expression_to_complementary_pyarrow(bind(schema, delete_filter, case_sensitive=True), schema)
    io = transaction._table.io
    commit_uuid = uuid.uuid4()
    counter = itertools.count(0)
    removed: list[IcebergDataFile] = []
    added: list[IcebergDataFile] = []
    rows_removed = rows_rewritten = rewritten = 0
    for task in transaction._scan(row_filter=delete_filter).plan_files():
        rows = ArrowScan(
            table_metadata=transaction.table_metadata, io=io, projected_schema=schema, row_filter=AlwaysTrue()
        ).to_table(tasks=[task])
        kept = rows.filter(keep)
        if kept.num_rows == rows.num_rows:
            continue
        removed.append(task.file)
        rows_removed += rows.num_rows - kept.num_rows
        if kept.num_rows:
            rewritten += 1
            rows_rewritten += kept.num_rows
            added.extend(
                _dataframe_to_data_files(
                    io=io,
                    df=kept,
                    table_metadata=write_metadata,
                    write_uuid=commit_uuid,
                    counter=counter,
                )
            )
    if removed:
        overwrite = transaction.update_snapshot(snapshot_properties=summary).overwrite(
            commit_uuid=commit_uuid
        )
        with overwrite:
            for data_file in removed:
                overwrite.delete_data_file(data_file)
            for data_file in added:
                overwrite.append_data_file(data_file)
    return RowDeletion(
        files_dropped=len(removed) - rewritten,
        files_rewritten=rewritten,
        rows_removed=rows_removed,
        rows_rewritten=rows_rewritten,
    )


def _writing_to(metadata: TableMetadata, data_location: str | None) -> TableMetadata:
    """`metadata` whose location provider writes data files straight into `data_location` (only this
    in-memory view: a commit sends updates, never these properties)."""
    if data_location is None:
        return metadata
    properties = {
        **metadata.properties,
        TableProperties.WRITE_DATA_PATH: data_location.rstrip("/"),
        TableProperties.OBJECT_STORE_ENABLED: "false",
    }
    return metadata.model_copy(update={"properties": properties})


def rows_after(offsets: Mapping[int, int]) -> BooleanExpression:
    """`(partition == P1 and offset > N1) or ...`: the rows after each partition's offset (base fields)."""
    terms = [
        And(
            EqualTo(term=Reference("partition"), value=literal(p)),
            GreaterThan(term=Reference("offset"), value=literal(o)),
        )
        for p, o in sorted(offsets.items())
    ]
    if not terms:
        raise ValueError("rows_after needs at least one partition")
    expression: BooleanExpression = terms[0]
    for term in terms[1:]:
        expression = Or(expression, term)
    return expression


def _state_of(table: Table, identifier: str, topic: str) -> TableState:
    metadata = table.metadata
    snapshot = metadata.current_snapshot()
    return TableState(
        table=identifier,
        topic=topic,
        snapshot_id=metadata.current_snapshot_id,
        marker=read_marker(metadata.properties, topic, table=identifier),
        snapshot_count=len(metadata.snapshots),
        version=table.metadata_location,
        data_files=total_data_files(snapshot.summary if snapshot is not None else None),
        files_baseline=files_baseline(metadata.properties),
    )


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


def _single_attempt(table: Table) -> Table:
    """The same table, with pyiceberg's commit retries off for transactions started from it.

    pyiceberg reads the retry count from the loaded metadata's properties; only this in-memory view
    changes - the commit sends updates, never these properties, so the table keeps its own setting.
    """
    properties = {**table.metadata.properties, _COMMIT_RETRIES: "0"}
    metadata = table.metadata.model_copy(update={"properties": properties})
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog)


def _transform(field: PartitionField) -> Transform[Any, Any]:
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


def _check_partitioning(spec: TableSpec, table: Table) -> None:
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


def _apply_schema_changes(table: Table, spec: TableSpec, changes: SchemaChanges) -> None:
    types = {f.name: field_iceberg_type(f) for f in spec.fields}
    with table.update_schema() as update:
        for name in changes.added:
            update.add_column(name, types[name], required=False)
        for name, _old, _new in changes.widened:
            update.update_column(name, field_type=types[name])
        for name in changes.relaxed:
            update.update_column(name, required=False)


def _topic_summaries(table: Table, topic: str) -> list[Mapping[str, str]]:
    """The summaries of the snapshots committed for `topic` on the table's current lineage, newest first."""
    metadata = table.metadata
    by_id = {snapshot.snapshot_id: snapshot for snapshot in metadata.snapshots}
    summaries: list[Mapping[str, str]] = []
    snapshot_id = metadata.current_snapshot_id
    while snapshot_id is not None and snapshot_id in by_id:
        snapshot = by_id[snapshot_id]
        if snapshot.summary is not None and snapshot.summary.get(SUMMARY_TOPIC) == topic:
            summaries.append(snapshot.summary)
        snapshot_id = snapshot.parent_snapshot_id
    return summaries
