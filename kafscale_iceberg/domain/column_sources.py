"""What a table's schema cannot say about its columns' record-schema sources, kept in one table property
(`kafscale.column-sources`) by field id: a column's former names and Avro aliases, and its Protobuf
field number.

A run starts from the table's columns (`field-ids.json`, written from the table): without these, a
record still written with a column's old name would become a new column, and a Protobuf rename could
not be told from a new field. (An Avro default is not kept: whether a record without the field is
older than the version declaring it, or newer than one dropping it, is not known across runs.) The
property is written in the commit that changes them, so it is never
ahead of or behind the schema it describes; ids, not names, so a rename moves nothing in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence

from pydantic import JsonValue

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType

COLUMN_SOURCES_PROPERTY = "kafscale.column-sources"


def sources_property(columns: Sequence[ColumnSpec], ids: Mapping[str, int]) -> str | None:
    """The property's value for `columns` in a table whose field ids by path are `ids`; None when no
    column has a source to keep."""
    found: dict[str, dict[str, JsonValue]] = {}
    for path, spec in _parts(columns):
        field_id = ids.get(path)
        entry = _entry(spec)
        if field_id is not None and entry:
            found[str(field_id)] = entry
    return json.dumps(found, sort_keys=True, separators=(",", ":")) if found else None


def with_sources(
    columns: Sequence[ColumnSpec], ids: Mapping[str, int], value: str | None
) -> tuple[ColumnSpec, ...]:
    """`columns` (from the table's schema) with the sources the property `value` keeps for their ids;
    an unreadable value keeps none (the next commit that changes a column writes it again)."""
    try:
        kept = json.loads(value) if value else {}
    except json.JSONDecodeError:
        kept = {}
    if not isinstance(kept, dict) or not kept:
        return tuple(columns)
    return tuple(_restored(c, c.name, ids, kept) for c in columns)


def _entry(spec: ColumnSpec) -> dict[str, JsonValue]:
    entry: dict[str, JsonValue] = {}
    if spec.aliases:
        entry["aliases"] = list(spec.aliases)
    if spec.number is not None:
        entry["number"] = spec.number
    return entry


def _restored(spec: ColumnSpec, path: str, ids: Mapping[str, int], kept: Mapping[str, object]) -> ColumnSpec:
    update: dict[str, object] = {}
    if spec.type is ColumnType.STRUCT:
        update["fields"] = tuple(_restored(f, f"{path}.{f.name}", ids, kept) for f in spec.fields)
    elif spec.type is ColumnType.LIST and spec.element is not None:
        update["element"] = _restored(spec.element, f"{path}.element", ids, kept)
    elif spec.type is ColumnType.MAP and spec.value is not None:
        update["value"] = _restored(spec.value, f"{path}.value", ids, kept)
    entry = kept.get(str(ids.get(path)))
    if isinstance(entry, dict):
        aliases = entry.get("aliases")
        if isinstance(aliases, list) and all(isinstance(a, str) for a in aliases):
            update["aliases"] = tuple(aliases)
        if isinstance(entry.get("number"), int):
            update["number"] = entry["number"]
    return spec.model_copy(update=update) if update else spec


def _parts(columns: Sequence[ColumnSpec]) -> Iterator[tuple[str, ColumnSpec]]:
    """Every column and part with its path, as `domain.field_ids` names them."""
    for column in columns:
        yield from _walk(column.name, column)


def _walk(path: str, spec: ColumnSpec) -> Iterator[tuple[str, ColumnSpec]]:
    yield path, spec
    if spec.type is ColumnType.STRUCT:
        for field in spec.fields:
            yield from _walk(f"{path}.{field.name}", field)
    elif spec.type is ColumnType.LIST and spec.element is not None:
        yield from _walk(f"{path}.element", spec.element)
    elif spec.type is ColumnType.MAP and spec.value is not None:
        yield from _walk(f"{path}.value", spec.value)
