"""The renames a run's columns make of a table's columns, by path: what the launcher and the driver plan
field ids with, and what the commit stages with the run's files (`adapters/iceberg_schemas.py`).

A column (or a struct's field, at any depth) is renamed when the table has no path of its name but has
one of one of its `aliases` (`domain/schema_evolution.py` keeps a renamed column's former names there):
the column keeps that path's field id, so its old files read under the new name in every engine that
reads by id, and Iceberg's `rename_column` moves the name in the same commit as the rows that bring it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType


@dataclass(frozen=True)
class Rename:
    """One path the run renames: `old` (the table's path, parts) takes the name `new_name`."""

    old: tuple[str, ...]
    new_name: str

    @property
    def new(self) -> tuple[str, ...]:
        return (*self.old[:-1], self.new_name)


def column_renames(columns: Sequence[ColumnSpec], known: Collection[str]) -> tuple[Rename, ...]:
    """The renames `columns` (top-level columns, new names) make of a table whose paths are `known`
    (`customer`, `customer.name`, `tags.element`, ...), parents before their parts; a rename's `old`
    is the table's path before any of them."""
    found: list[Rename] = []
    for column in columns:
        _walk(column, (), known, found)
    return tuple(found)


def _walk(spec: ColumnSpec, old_parent: tuple[str, ...], known: Collection[str], found: list[Rename]) -> None:
    old = (*old_parent, spec.name)
    if ".".join(old) not in known:
        former = next((a for a in spec.aliases if ".".join((*old_parent, a)) in known), None)
        if former is None:
            return  # a new column: nothing under it is in the table
        old = (*old_parent, former)
        found.append(Rename(old, spec.name))
    _walk_parts(spec, old, known, found)


def _walk_parts(spec: ColumnSpec, path: tuple[str, ...], known: Collection[str], found: list[Rename]) -> None:
    """The parts under `spec`, at the table's `path`: a struct's fields (each may be renamed), a list's
    element and a map's value (fixed names, whose own fields may be)."""
    if spec.type is ColumnType.STRUCT:
        for field in spec.fields:
            _walk(field, path, known, found)
    elif spec.type is ColumnType.LIST and spec.element is not None:
        _walk_parts(spec.element, (*path, "element"), known, found)
    elif spec.type is ColumnType.MAP and spec.value is not None:
        _walk_parts(spec.value, (*path, "value"), known, found)


def renamed_paths(ids: Mapping[str, int], renames: Sequence[Rename]) -> dict[str, int]:
    """`ids` (by the table's paths) keyed by the paths after `renames`: each path under a renamed one
    moves with it."""
    if not renames:
        return dict(ids)
    return {_moved(path, renames): field_id for path, field_id in ids.items()}


def _moved(path: str, renames: Sequence[Rename]) -> str:
    table_parts = path.split(".")
    parts = list(table_parts)
    for rename in renames:  # each `old` is in the table's names, as `table_parts` are
        if tuple(table_parts[: len(rename.old)]) == rename.old:
            parts[len(rename.old) - 1] = rename.new_name
    return ".".join(parts)
