"""Iceberg field ids for the data files a run writes, known to the launcher without a catalog.

The Spark job writes the table's field ids into every Parquet file (`PARQUET:field_id`), so engines
read the files by id, with or without the table's name mapping. The launcher has no catalog client:
it plans from `field-ids.json` beside the topic's runs (`{runs.location}/{topic}/field-ids.json`),
which the commit step writes from the tables' schemas after a commit that changed them (the plan
carries the digest of the document it was made from: `TopicFieldIds.digest`; an upsert table's
version changes with every commit, and `maintain` moves it to its compaction's). Columns the table does
not have yet get the ids evolution will give them (`last_column_id + 1, + 2, …` in mapping order,
as the commit step adds them); with no document, the ids a table created by this product gets
(1, 2, … in field order). The commit step checks the plan's ids against the table before adding a
file: a wrong guess (the table changed meanwhile) refuses the run, writing nothing, and the
rewritten document makes the next attempt right.

The document also records each table's columns with their types (`TableFieldIds.columns`): an
inferred table's run starts from them, and its job gives the new columns the ids after
`last_column_id` (`dataplane/inference.with_inferred_columns`). Documents written before carry no
columns and still read (version 1).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from kafscale_iceberg.domain.renames import column_renames, renamed_paths
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import FieldSpec
from kafscale_iceberg.domain.tickets import join_uri

FIELD_IDS_NAME = "field-ids.json"


def field_ids_uri(runs_location: str, topic: str) -> str:
    """Where the field ids of a topic's tables are kept: `{runs.location}/{topic}/field-ids.json`."""
    return join_uri(runs_location, topic, FIELD_IDS_NAME)


class TableFieldIds(BaseModel):
    """One table's column ids by path (top-level columns and the parts of nested ones, e.g.
    `customer.name`, `tags.element`, `attrs.value`) and the highest id it ever assigned."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    identifier: str
    field_ids: dict[str, int]
    last_column_id: int
    columns: tuple[ColumnSpec, ...] | None = None
    """The table's columns after the base fields, with their types (what a run of an inferred table
    starts from); None in documents written before they were recorded. Columns of a type a mapping
    cannot name are left out (they keep their ids above)."""
    metadata_location: str | None = None
    """An upsert table's metadata file when the document was written (its next run locates the changed
    keys in it); None for other tables, which no reader needs it for (so their entries change only
    when their columns do)."""
    data_location: str | None = None
    """Where the table keeps its data files (`write.data.path`, else `{location}/data`): the launcher
    plans the run's files under it (`domain/table_locations.py`). None in documents written before."""


class TopicFieldIds(BaseModel):
    """`field-ids.json`: the field ids of the tables a topic's runs write (table, dead-letter table)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    tables: tuple[TableFieldIds, ...] = ()

    def table(self, identifier: str) -> TableFieldIds | None:
        """The ids recorded for `identifier`, None when not recorded."""
        return next((t for t in self.tables if t.identifier == identifier), None)

    def versions_only_for(self, identifiers: Collection[str]) -> TopicFieldIds:
        """This document with `metadata_location` kept only for `identifiers` (the upsert tables)."""
        return self.model_copy(
            update={
                "tables": tuple(
                    t if t.identifier in identifiers else t.model_copy(update={"metadata_location": None})
                    for t in self.tables
                )
            }
        )

    def with_version(self, identifier: str, metadata_location: str) -> TopicFieldIds:
        """This document with `identifier`'s recorded table version replaced (its ids unchanged)."""
        return self.model_copy(
            update={
                "tables": tuple(
                    t.model_copy(update={"metadata_location": metadata_location})
                    if t.identifier == identifier
                    else t
                    for t in self.tables
                )
            }
        )

    def digest(self) -> str:
        """A digest of the content (its JSON as written): equal digests, equal documents. The plan
        carries the one its launcher read, so the commit step writes the document only when it changes."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


NESTED_TYPES = frozenset({ColumnType.STRUCT, ColumnType.LIST, ColumnType.MAP})


def column_parts(column: ColumnSpec | None) -> list[tuple[str, ColumnSpec | None]]:
    """The direct parts of a nested column, `(name, spec)` in Iceberg's order: a struct's fields, a
    list's `element`, a map's `key` (a string: no spec) and `value`. Empty for other columns."""
    if column is None:
        return []
    if column.type is ColumnType.STRUCT:
        return [(f.name, f) for f in column.fields]
    if column.type is ColumnType.LIST:
        return [("element", column.element)]
    if column.type is ColumnType.MAP:
        return [("key", None), ("value", column.value)]
    return []


def part_paths(name: str, column: ColumnSpec | None) -> list[str]:
    """Every part's path under top-level column `name` (`customer.address.city`, `tags.element`,
    `attrs.key`, `attrs.value`), in the order Iceberg assigns their ids."""
    paths: list[str] = []
    _assign_parts(name, column, lambda: len(paths), {}, paths)
    return paths


def _assign_parts(
    path: str,
    column: ColumnSpec | None,
    next_id: Callable[[], int],
    ids: dict[str, int],
    order: list[str] | None = None,
) -> None:
    """Ids for the parts under `path` as Iceberg assigns them (pyiceberg's `_SetFreshIDs`, a
    pre-order walk): all direct parts of a struct (a map's key and value) first, then each part's
    own parts, in order."""
    parts = column_parts(column)
    for part, _spec in parts:
        full = f"{path}.{part}"
        ids[full] = next_id()
        if order is not None:
            order.append(full)
    for part, spec in parts:
        _assign_parts(f"{path}.{part}", spec, next_id, ids, order)


def missing_parts(column: ColumnSpec, known: Collection[str]) -> list[tuple[tuple[str, ...], ColumnSpec]]:
    """The parts of an existing nested column whose paths are not in `known`, as `(path parts,
    spec)`, in the order evolution adds them (and Iceberg gives them ids): depth-first through the
    known parts, a missing part whole (its own parts get ids right after it)."""
    found: list[tuple[tuple[str, ...], ColumnSpec]] = []

    def walk(path: tuple[str, ...], spec: ColumnSpec | None) -> None:
        for part, part_spec in column_parts(spec):
            full = (*path, part)
            if ".".join(full) in known:
                walk(full, part_spec)
            elif part_spec is not None:
                found.append((full, part_spec))

    walk((column.name,), column)
    return found


def planned_field_ids(
    fields: Sequence[FieldSpec], known: TableFieldIds | None, *, new_parts: bool = False
) -> dict[str, int] | None:
    """The field id of each of `fields` and of each part of a nested one, once the table holds them
    (see the module docstring), keyed by path: `customer`, `customer.name`, `tags.element`, ...

    Ids as Iceberg assigns them: at creation the top-level fields take 1..n and their parts follow
    in a pre-order walk; a column added by evolution takes the next id and its parts the ids after
    it. None (files without ids, read through the name mapping) when a known nested column's parts
    are not all recorded (a `field-ids.json` written before parts were recorded): a file with ids on
    a column but not on its parts would be read with those parts missing by id-trusting engines.
    With `new_parts` (an inferred table, whose known struct columns may gain fields) those parts are
    new ones instead, with the ids evolution gives them (`missing_parts` order).
    """
    if known is None:
        ids = {f.name: index for index, f in enumerate(fields, start=1)}
        counter = itertools.count(len(fields) + 1)
        for f in fields:
            _assign_parts(f.name, f.column, lambda: next(counter), ids)
        return ids
    renames = column_renames([f.column for f in fields if f.column is not None], known.field_ids)
    if renames:  # renamed columns keep their ids (`domain/renames.py`)
        known = known.model_copy(update={"field_ids": renamed_paths(known.field_ids, renames)})
    ids = {}
    next_id = itertools.count(known.last_column_id + 1)
    for f in fields:
        if f.name in known.field_ids:
            ids[f.name] = known.field_ids[f.name]
            paths = part_paths(f.name, f.column)
            missing = [path for path in paths if path not in known.field_ids]
            if missing and not new_parts:
                return None
            ids.update({path: known.field_ids[path] for path in paths if path in known.field_ids})
            if missing and f.column is not None:
                for parts, spec in missing_parts(f.column, known.field_ids):
                    path = ".".join(parts)
                    ids[path] = next(next_id)
                    _assign_parts(path, spec, lambda: next(next_id), ids)
        else:
            ids[f.name] = next(next_id)
            _assign_parts(f.name, f.column, lambda: next(next_id), ids)
    return ids


def field_id_mismatches(
    planned: Mapping[str, int], table: Mapping[str, int]
) -> dict[str, tuple[int, int | None]]:
    """Columns whose planned id differs from the table's: `{name: (planned, table's or None)}`."""
    return {
        name: (planned_id, table.get(name))
        for name, planned_id in sorted(planned.items())
        if table.get(name) != planned_id
    }
