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

Renames keep the column (its field id, its rows): a field whose name the columns lack is the column
it renames when its Avro `aliases` name the column, or when it has the column's Protobuf field number;
the column takes the new name and keeps the old one among its `aliases`, so records still written with
the old name land in it. A rename onto a name another column already has is refused
(`ColumnRenameError`), never merged into that column. A field named like one of a column's aliases (an
older schema version) lands in that column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, TimeColumns
from kafscale_iceberg.exceptions import ColumnRenameError

_WIDER: dict[tuple[ColumnType, ColumnType], ColumnType] = {
    (ColumnType.INT, ColumnType.LONG): ColumnType.LONG,
    (ColumnType.FLOAT, ColumnType.DOUBLE): ColumnType.DOUBLE,
}


def evolved_columns(
    current: Sequence[ColumnSpec],
    schemas: Iterable[Sequence[ColumnSpec]],
    *,
    reserved: Iterable[str] = (),
    pinned: Iterable[str] = (),
) -> tuple[ColumnSpec, ...]:
    """`current` evolved by each of `schemas` (columns from record schemas), in order; `reserved`
    names (base fields, `lfs_*`) never become columns; `pinned` columns (the mapping names them: its
    partitioning, its upsert key) are never renamed (a field renaming one becomes a new column)."""
    columns = tuple(c.model_copy(update={"required": False}) if c.required else c for c in current)
    reserved_names = {name.casefold() for name in reserved}
    for schema in schemas:
        columns = _merged_fields(columns, schema, reserved_names, frozenset(pinned))
    return columns


def _merged_fields(
    current: Sequence[ColumnSpec],
    incoming: Sequence[ColumnSpec],
    reserved: set[str],
    pinned: frozenset[str] = frozenset(),
) -> tuple[ColumnSpec, ...]:
    partners = _partners(current, incoming, pinned)
    merged = [
        c
        if c.name not in partners
        else merged_column(_renamed(c, partners[c.name], current), partners[c.name])
        for c in current
    ]
    claimed = {id(column) for column in partners.values()}
    taken = {c.name.casefold() for c in merged} | reserved
    for column in incoming:
        if id(column) in claimed or column.name.casefold() in taken:
            continue
        taken.add(column.name.casefold())
        merged.append(column.model_copy(update={"required": False}))
    return tuple(merged)


def _partners(
    current: Sequence[ColumnSpec], incoming: Sequence[ColumnSpec], pinned: frozenset[str]
) -> dict[str, ColumnSpec]:
    """Per current column's name, the incoming field that is it: the same name; else a field named
    like one of its aliases (an older version's name); else a field renaming it (its aliases name the
    column, or it has the column's Protobuf number) when no incoming field has the column's name and
    the column is not `pinned`."""
    names = {c.name for c in incoming}
    renamable = [c for c in current if c.name not in pinned]
    partners: dict[str, ColumnSpec] = {}
    for rule, columns in ((_same_name, current), (_former_name, current), (_renames, renamable)):
        for field in incoming:
            if any(field is partner for partner in partners.values()):
                continue
            column = next((c for c in columns if c.name not in partners and rule(c, field, names)), None)
            if column is not None:
                partners[column.name] = field
    for owner, field in partners.items():  # a field renaming a column onto another column's name
        stale = next((c for c in renamable if c.name not in partners and _renames(c, field, names)), None)
        if stale is not None:
            raise ColumnRenameError(stale.name, field.name, owner)
    return partners


def _same_name(column: ColumnSpec, field: ColumnSpec, _names: set[str]) -> bool:
    return column.name == field.name


def _former_name(column: ColumnSpec, field: ColumnSpec, names: set[str]) -> bool:
    return field.name in column.aliases and column.name not in names


def _renames(column: ColumnSpec, field: ColumnSpec, names: set[str]) -> bool:
    if column.name in names:
        return False
    same_number = field.number is not None and field.number == column.number
    return column.name in field.aliases or same_number


def _renamed(column: ColumnSpec, field: ColumnSpec, current: Sequence[ColumnSpec]) -> ColumnSpec:
    """`column` under `field`'s name when `field` renames it (its old name kept among its aliases);
    `ColumnRenameError` when another column already has that name in some case."""
    if field.name == column.name or field.name in column.aliases:
        return column
    clash = next(
        (c.name for c in current if c is not column and c.name.casefold() == field.name.casefold()), None
    )
    if clash is not None:
        raise ColumnRenameError(column.name, field.name, clash)
    aliases = tuple(dict.fromkeys((*column.aliases, column.name)))
    return column.model_copy(update={"name": field.name, "aliases": aliases})


def merged_column(current: ColumnSpec, incoming: ColumnSpec) -> ColumnSpec:
    """`current` widened and extended by `incoming` where the rules allow (else `current`), with
    `incoming`'s declared default when it has one its type takes (a newer schema's default wins),
    the aliases of both, and `incoming`'s Protobuf number when it has one."""
    merged = _merged_parts(current, incoming)
    update: dict[str, object] = {}
    fits = merged.type is incoming.type or _WIDER.get((incoming.type, merged.type)) is merged.type
    if incoming.default is not None and fits and merged.default != incoming.default:
        update["default"] = incoming.default
    aliases = tuple(a for a in dict.fromkeys((*merged.aliases, *incoming.aliases)) if a != merged.name)
    if aliases != merged.aliases:
        update["aliases"] = aliases
    if incoming.number is not None and incoming.number != merged.number:
        update["number"] = incoming.number
    return merged.model_copy(update=update) if update else merged


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
