"""The locate and rewrite steps of an upsert run (`domain/upsert.py`) on a pyiceberg table.

`IcebergUpsertFiles.rewrite(table, state, change)`:

- **locate**: the data files of the snapshot `state` was read at that may hold a changed key - the
  scan's partition pruning (an `In` of the changed keys, projected through the partition spec), then
  each file's lower/upper bounds of every key column against the sorted changed keys;
- **rewrite**: each candidate's key columns are read, and only a file holding a changed key is
  written again without those rows (`dataplane/upsert_rewrite.py`); the run's own files lose the
  rows a later change superseded.

Nothing is committed here: the commit step adds and removes what the rewrite returns, in one
Iceberg commit built on the same state (`services/upsert_commit.py`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, In, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from kafscale_iceberg.adapters.iceberg_catalog import CatalogTableAccess
from kafscale_iceberg.adapters.iceberg_data_files import bucket_values
from kafscale_iceberg.dataplane.upsert_rewrite import KeyChanges, read_change_columns, rewrite_without
from kafscale_iceberg.domain.commits import TableState
from kafscale_iceberg.domain.upsert import UpsertChange, UpsertCounts, UpsertRewrite
from kafscale_iceberg.exceptions import CatalogError
from kafscale_iceberg.ports import FileSink, ObjectReader

# Key types whose manifest bounds compare with the values pyarrow gives (as Iceberg stores them).
_BOUNDED = (
    IntegerType,
    LongType,
    StringType,
    BinaryType,
    DecimalType,
    DateType,
    TimestampType,
    TimestamptzType,
)
# Above this many changed keys, the scan's partition filter is left out (pyiceberg evaluates an `In`
# per manifest entry); the bounds still prune.
_PARTITION_FILTER_KEYS = 10_000


class IcebergUpsertFiles(CatalogTableAccess):
    """The `UpsertFiles` port over a pyiceberg catalog; files read through `reader`, written to `sink`."""

    def __init__(self, catalog: Catalog, reader: ObjectReader, sink: FileSink, *, describe: str = "") -> None:
        super().__init__(catalog, describe=describe)
        self._reader = reader
        self._sink = sink

    def rewrite(self, table: str, state: TableState, change: UpsertChange) -> UpsertRewrite:
        """The files to add and to remove so `table` at `state` holds each changed key's last state.

        Idempotent (rewritten files are named from the run's folder and the file they replace).
        Raises `TableMissingError`, the translated catalog errors, and storage errors of the ports.
        """
        changes = KeyChanges(
            change.key,
            read_change_columns(self._reader, change.row_files, change.key),
            read_change_columns(self._reader, change.deleted_key_files, change.key),
        )
        added = []
        removed = []
        updated = deleted = rewritten_bytes = 0
        located, specs = self._locate(table, state, changes)
        for candidate in located:
            outcome = rewrite_without(
                self._reader,
                self._sink,
                candidate.file_path,
                changes,
                folder=change.rewrite_uri,
                own=False,
                # Its rows are some of the candidate's: its partition, whose bucket values its
                # bounds cannot give (adapters/iceberg_data_files.py).
                partition_values=bucket_values(specs[candidate.spec_id], candidate),
            )
            if not outcome.dropped:
                continue
            removed.append(candidate.file_path)
            rewritten_bytes += candidate.file_size_in_bytes
            updated += outcome.dropped - outcome.deleted
            deleted += outcome.deleted
            if outcome.written is not None:
                added.append(outcome.written)
        for own in change.row_files:
            outcome = rewrite_without(
                self._reader,
                self._sink,
                own.uri,
                changes,
                folder=change.rewrite_uri,
                own=True,
                partition_values=own.partition_values,
            )
            if not outcome.dropped:
                added.append(own)
            elif outcome.written is not None:
                added.append(outcome.written)
        inserted = changes.count - changes.deleted - updated
        counts = UpsertCounts(
            inserted=inserted,
            updated=updated,
            deleted=deleted,
            files_rewritten=len(removed),
            bytes_rewritten=rewritten_bytes,
        )
        return UpsertRewrite(added=tuple(added), removed=tuple(removed), counts=counts)

    def locate(self, table: str, state: TableState, changes: KeyChanges) -> list[IcebergDataFile]:
        """The data files of `table` at `state`'s snapshot that may hold a changed key (pruned by
        partition and by the key columns' bounds); none for a table without a snapshot."""
        return self._locate(table, state, changes)[0]

    def _locate(
        self, table: str, state: TableState, changes: KeyChanges
    ) -> tuple[list[IcebergDataFile], dict[int, PartitionSpec]]:
        if state.snapshot_id is None or not changes.count:
            return [], {}
        loaded = self._load(table)
        schema = loaded.schema()
        fields = [schema.find_field(name) for name in changes.key]
        keys = {field.name: _comparable(field, changes.key_values(field.name)) for field in fields}
        try:
            scan = loaded.scan(snapshot_id=state.snapshot_id, row_filter=_partition_filter(keys))
            files = [task.file for task in scan.plan_files()]
        except Exception as exc:
            raise CatalogError(
                self._describe, f"read the manifests of {table!r} at snapshot {state.snapshot_id}", str(exc)
            ) from exc
        located = [f for f in files if all(_may_hold(f, field, keys[field.name]) for field in fields)]
        return located, loaded.specs()


def _comparable(field: NestedField, values: pa.Array) -> list[Any]:
    """The sorted values as manifest bounds decode for `field` (dates as days, timestamps as micros)."""
    if pa.types.is_timestamp(values.type):
        values = values.cast(pa.int64())
    elif pa.types.is_date(values.type):
        values = values.cast(pa.int32())
    return sorted(v for v in values.to_pylist() if v is not None)


def _partition_filter(keys: dict[str, list[Any]]) -> BooleanExpression:
    """`In` of each key column's changed values when they are few and of plain types, else everything."""
    if any(len(values) > _PARTITION_FILTER_KEYS for values in keys.values()):
        return AlwaysTrue()
    terms: list[BooleanExpression] = []
    for name, values in keys.items():
        if not values or not all(isinstance(v, int | str) and not isinstance(v, bool) for v in values):
            return AlwaysTrue()
        terms.append(In(term=Reference(name), values={literal(v) for v in values}))
    return terms[0] if len(terms) == 1 else And(*terms)


def _may_hold(data_file: IcebergDataFile, field: NestedField, values: Sequence[Any]) -> bool:
    """Whether some value of `values` (sorted) lies within the file's bounds of `field`."""
    if not isinstance(field.field_type, _BOUNDED):
        return True
    lower_bytes = (data_file.lower_bounds or {}).get(field.field_id)
    upper_bytes = (data_file.upper_bounds or {}).get(field.field_id)
    if lower_bytes is None or upper_bytes is None:
        return True
    lower = from_bytes(field.field_type, lower_bytes)
    upper = from_bytes(field.field_type, upper_bytes)
    at = bisect.bisect_left(values, lower)
    return at < len(values) and values[at] <= upper
