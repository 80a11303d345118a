"""A table's columns evolved by the schemas its records were written with (every `value_format` but
`json`): what the driver decides from the schemas a run's records carry.

Rules, applied to each schema in turn (in schema-id order: older versions first):

- a field the columns lack becomes a new optional column (inside a struct: a new optional field),
  after the existing ones;
- a column the schema also has keeps its place and widens where Iceberg allows it: `int` -> `long`,
  `float` -> `double`, `decimal(P,S)` -> `decimal(P',S)` with `P' > P` (the same scale); a struct
  column merges its fields by these rules, a list its element, a map its value;
- any other change of type (a `string` field becoming `long`) keeps the column's type: the values
  that do not convert are counted as conversion failures of the column (never silently null);
- a column the schema lacks stays (a field a newer version dropped): null from then on;
- a scalar default a schema declares for a field (Avro) is carried by its column, the newest
  schema's winning: a record written with a schema without the field lands it (Avro's schema
  resolution), in the run whose records carry that schema.

Names are compared exactly, and a new name equal to a column's ignoring case is left out (it stays in
the `value` bytes), as for inferred columns (`domain/inference.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, TimeColumns

_WIDER: dict[tuple[ColumnType, ColumnType], ColumnType] = {
    (ColumnType.INT, ColumnType.LONG): ColumnType.LONG,
    (ColumnType.FLOAT, ColumnType.DOUBLE): ColumnType.DOUBLE,
}


def evolved_columns(
    current: Sequence[ColumnSpec], schemas: Iterable[Sequence[ColumnSpec]], *, reserved: Iterable[str] = ()
) -> tuple[ColumnSpec, ...]:
    """`current` evolved by each of `schemas` (columns from record schemas), in order; `reserved`
    names (base fields, `lfs_*`) never become columns."""
    columns = tuple(c.model_copy(update={"required": False}) if c.required else c for c in current)
    reserved_names = {name.casefold() for name in reserved}
    for schema in schemas:
        columns = _merged_fields(columns, schema, reserved_names)
    return columns


def _merged_fields(
    current: Sequence[ColumnSpec], incoming: Sequence[ColumnSpec], reserved: set[str]
) -> tuple[ColumnSpec, ...]:
    by_name = {c.name: c for c in incoming}
    merged = [merged_column(c, by_name[c.name]) if c.name in by_name else c for c in current]
    taken = {c.name.casefold() for c in current} | reserved
    for column in incoming:
        if column.name.casefold() in taken:
            continue
        taken.add(column.name.casefold())
        merged.append(column.model_copy(update={"required": False}))
    return tuple(merged)


def merged_column(current: ColumnSpec, incoming: ColumnSpec) -> ColumnSpec:
    """`current` widened and extended by `incoming` where the rules allow (else `current`), with
    `incoming`'s declared default when it has one its type takes (a newer schema's default wins)."""
    merged = _merged_parts(current, incoming)
    fits = merged.type is incoming.type or _WIDER.get((incoming.type, merged.type)) is merged.type
    if incoming.default is not None and fits and merged.default != incoming.default:
        return merged.model_copy(update={"default": incoming.default})
    return merged


def _merged_parts(current: ColumnSpec, incoming: ColumnSpec) -> ColumnSpec:
    kind = current.type
    if kind is ColumnType.STRUCT and incoming.type is ColumnType.STRUCT:
        return current.model_copy(update={"fields": _merged_fields(current.fields, incoming.fields, set())})
    if kind is ColumnType.LIST and incoming.type is ColumnType.LIST:
        assert current.element is not None
        assert incoming.element is not None
        return current.model_copy(update={"element": merged_column(current.element, incoming.element)})
    if kind is ColumnType.MAP and incoming.type is ColumnType.MAP:
        assert current.value is not None
        assert incoming.value is not None
        return current.model_copy(update={"value": merged_column(current.value, incoming.value)})
    if kind is ColumnType.DECIMAL and incoming.type is ColumnType.DECIMAL:
        wider = (incoming.precision or 0) > (current.precision or 0)
        if wider and (incoming.scale or 0) == (current.scale or 0):
            return current.model_copy(update={"precision": incoming.precision})
        return current
    wider_type = _WIDER.get((kind, incoming.type))
    if wider_type is not None:
        return current.model_copy(update={"type": wider_type})
    return current


def widened_parts(current: ColumnSpec, evolved: ColumnSpec) -> tuple[tuple[tuple[str, ...], ColumnSpec], ...]:
    """The parts of `current` whose type `evolved` widens (path from the column's name, the new part):
    what the commit changes with `update_column` beside the new columns."""
    found: list[tuple[tuple[str, ...], ColumnSpec]] = []
    _collect_widened(current, evolved, (current.name,), found)
    return tuple(found)


def _collect_widened(
    current: ColumnSpec,
    evolved: ColumnSpec,
    path: tuple[str, ...],
    found: list[tuple[tuple[str, ...], ColumnSpec]],
) -> None:
    if current.type is ColumnType.STRUCT and evolved.type is ColumnType.STRUCT:
        by_name = {f.name: f for f in evolved.fields}
        for field in current.fields:
            if field.name in by_name:
                _collect_widened(field, by_name[field.name], (*path, field.name), found)
        return
    if current.type is ColumnType.LIST and current.element is not None and evolved.element is not None:
        _collect_widened(current.element, evolved.element, (*path, "element"), found)
        return
    if current.type is ColumnType.MAP and current.value is not None and evolved.value is not None:
        _collect_widened(current.value, evolved.value, (*path, "value"), found)
        return
    if current.type_name != evolved.type_name:
        found.append((path, evolved))


_TIME_AS: dict[TimeColumns, ColumnType] = {
    TimeColumns.LONG_MICROS: ColumnType.LONG,
    TimeColumns.STRING: ColumnType.STRING,
}


def with_time_as(
    columns: Sequence[ColumnSpec], choice: TimeColumns, current: Sequence[ColumnSpec] = ()
) -> tuple[ColumnSpec, ...]:
    """The columns a schema gives with every `time` (nested ones included) as `types.time` chooses:
    `long_micros` a `long` of microseconds since midnight, `string` its `HH:MM:SS.ffffff` text; `time`
    keeps them. A column `current` (the table's) already holds as `time` stays `time`: a table's
    column never changes type."""
    target = _TIME_AS.get(choice)
    if target is None:
        return tuple(columns)
    return tuple(_time_as(column, target, _named(current).get(column.name)) for column in columns)


def _named(columns: Sequence[ColumnSpec]) -> dict[str, ColumnSpec]:
    return {column.name: column for column in columns}


def _time_as(column: ColumnSpec, target: ColumnType, current: ColumnSpec | None) -> ColumnSpec:
    if column.type is ColumnType.TIME:
        kept = current is not None and current.type is ColumnType.TIME
        return column if kept else column.model_copy(update={"type": target})
    update: dict[str, object] = {}
    if column.fields:
        known = _named(current.fields) if current is not None else {}
        update["fields"] = tuple(_time_as(f, target, known.get(f.name)) for f in column.fields)
    for part in ("element", "value"):
        inner = getattr(column, part)
        if inner is not None:
            update[part] = _time_as(inner, target, getattr(current, part, None))
    return column.model_copy(update=update) if update else column
