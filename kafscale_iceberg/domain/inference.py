"""Columns inferred from the records (`mappings[].schema.source: infer`): observations and their rules.

The Spark job's first stage observes, per task, the JSON kinds each top-level field of the records'
values held (`FieldObservation`, counted per kind, recursively for objects and arrays); the driver
merges the tasks' observations (`merge_observations`) and decides the columns the run writes
(`resolve_columns`): the table's current columns (their structs extended), then a new optional column for each
field the table lacks that has a type, in the order the fields first appeared (partition, offset,
then their order in that record).

Type rules (`inferred_column`):

- boolean -> `boolean`; integer -> `long`; any other number -> `double`; string -> `string` (never
  guessed to be a timestamp or a date: strings stay strings); object -> `struct` of its fields
  (recursively); array -> `list` of its elements' type.
- A field seen only as null, an empty object or an empty array (or an object whose fields are all
  such) has no type yet: it waits, outside the table, until a run sees it with one.
- Integers and other numbers in the same new field: `double` with `allow_type_widening`, else `long`
  (the other numbers are then conversion failures, counted per column). Iceberg cannot promote an
  existing `long` column to `double`, so this is decided once, when the column is created.
- Kinds that do not mix (a string and a number, an object and an array): the kind seen most often
  wins (ties: boolean, number, string, struct, list in that order); the other values are counted
  as conversion failures of the column, their records kept (`value` keeps the bytes).
- A field named like a base field (`record_id`, `topic`, `partition`, `offset`, `timestamp_ms`,
  `key`, `value`, `headers`) never becomes a column: the base field keeps its meaning, and the
  field stays in the `value` bytes. So do the `lfs_*` names when `lfs.store_metadata` adds them,
  and a field whose name is empty (`""`), at any depth.
- Names are compared ignoring case: a field whose name equals a column's, a base field's or an
  earlier field's in another case (`Tip` beside `tip`, `Key`) never becomes a column (nor a struct
  field beside its twin), because engines that fold case (Glue, Athena, Spark by default) could not
  tell the two apart; it stays in the `value` bytes and the job logs it (`case_clashes`).
- A column the table already has keeps its type; values of other kinds are conversion failures.
  A struct column (also as a list's element, at any depth) gains the fields new inside it as new
  optional fields (`extended_column`), its existing parts keeping their types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType

JsonKind = Literal["boolean", "integer", "number", "string", "object", "array"]
# The order a tie between kinds that do not mix is broken in (the first wins).
_KIND_ORDER: tuple[JsonKind, ...] = ("boolean", "integer", "number", "string", "object", "array")
MAX_DEPTH = 32
"""Objects and arrays nested deeper than this are observed as having no type (they wait)."""


class FieldObservation(BaseModel):
    """What one field held across the observed records: values per JSON kind, and for objects and
    arrays what their fields and elements held. `first` is where a top-level field first held a
    value (`[partition, offset, position in the record]`), which orders new columns."""

    model_config = ConfigDict(extra="forbid")

    kinds: dict[str, int] = Field(default_factory=dict)
    fields: dict[str, FieldObservation] = Field(default_factory=dict)
    element: FieldObservation | None = None
    first: tuple[int, int, int] | None = None

    def merged(self, other: FieldObservation) -> FieldObservation:
        """This observation and `other` together (neither is changed)."""
        kinds = dict(self.kinds)
        for kind, count in other.kinds.items():
            kinds[kind] = kinds.get(kind, 0) + count
        fields = dict(self.fields)
        for name, observed in other.fields.items():
            fields[name] = fields[name].merged(observed) if name in fields else observed
        element = self.element
        if other.element is not None:
            element = other.element if element is None else element.merged(other.element)
        firsts = [f for f in (self.first, other.first) if f is not None]
        return FieldObservation(
            kinds=kinds, fields=fields, element=element, first=min(firsts) if firsts else None
        )


class TableObservation(BaseModel):
    """The top-level fields of the records one table's rows come from, by name; for a self-described
    `value_format`, the columns of each schema the records were written with (`schemas`, keyed so
    that sorting the keys puts older schemas first: `id:0000000007`)."""

    model_config = ConfigDict(extra="forbid")

    fields: dict[str, FieldObservation] = Field(default_factory=dict)
    schemas: dict[str, tuple[ColumnSpec, ...]] = Field(default_factory=dict)

    def merged(self, other: TableObservation) -> TableObservation:
        """Both observations together."""
        fields = dict(self.fields)
        for name, observed in other.fields.items():
            fields[name] = fields[name].merged(observed) if name in fields else observed
        return TableObservation(fields=fields, schemas={**self.schemas, **other.schemas})


def merge_observations(
    observations: Iterable[Mapping[str, TableObservation]],
) -> dict[str, TableObservation]:
    """Per destination table identifier, every task's observation of it merged."""
    merged: dict[str, TableObservation] = {}
    for by_table in observations:
        for table, observed in by_table.items():
            merged[table] = merged[table].merged(observed) if table in merged else observed
    return merged


def inferred_column(
    name: str, observed: FieldObservation, *, allow_type_widening: bool, depth: int = 0
) -> ColumnSpec | None:
    """The column a field's observation gives (see the module docstring); None while it has no type."""
    if depth > MAX_DEPTH:
        return None
    kinds = {k: c for k, c in observed.kinds.items() if c > 0}
    if not kinds:
        return None
    numbers = kinds.get("integer", 0) + kinds.get("number", 0)
    counts: dict[str, int] = {}
    for ordered in _KIND_ORDER:
        if ordered in ("integer", "number"):
            if numbers:
                counts["number"] = numbers
        elif ordered in kinds:
            counts[ordered] = kinds[ordered]
    # Candidates in the order of the rules: the most values first, ties broken by `_KIND_ORDER`.
    for kind in sorted(counts, key=lambda k: -counts[k]):
        column = _column_of_kind(
            name, kind, observed, kinds, allow_type_widening=allow_type_widening, depth=depth
        )
        if column is not None:
            return column
    return None


def _column_of_kind(
    name: str,
    kind: str,
    observed: FieldObservation,
    kinds: Mapping[str, int],
    *,
    allow_type_widening: bool,
    depth: int,
) -> ColumnSpec | None:
    if kind == "boolean":
        return ColumnSpec(name=name, type=ColumnType.BOOLEAN)
    if kind == "string":
        return ColumnSpec(name=name, type=ColumnType.STRING)
    if kind == "number":
        fractional = kinds.get("number", 0) > 0
        integral = kinds.get("integer", 0) > 0
        if fractional and (allow_type_widening or not integral):
            return ColumnSpec(name=name, type=ColumnType.DOUBLE)
        return ColumnSpec(name=name, type=ColumnType.LONG)
    if kind == "object":
        fields = _new_columns(
            observed.fields, set(), allow_type_widening=allow_type_widening, depth=depth + 1
        )
        return ColumnSpec(name=name, type=ColumnType.STRUCT, fields=fields) if fields else None
    if kind == "array":
        if observed.element is None:
            return None
        element = inferred_column(
            "element", observed.element, allow_type_widening=allow_type_widening, depth=depth + 1
        )
        return ColumnSpec(name=name, type=ColumnType.LIST, element=element) if element is not None else None
    return None


def _order_key(name: str, observed: FieldObservation) -> tuple[int, int, int, str]:
    first = observed.first if observed.first is not None else (2**31, 2**63, 0)
    return (*first, name)


def extended_column(
    column: ColumnSpec, observed: FieldObservation, *, allow_type_widening: bool, depth: int = 0
) -> ColumnSpec:
    """An existing column with the fields its records show that it lacks: a `struct` (also inside a
    `list`, at any depth) gains them as new optional fields after its own, by the type rules; every
    existing part keeps its type. Other columns are returned as they are."""
    if depth > MAX_DEPTH:
        return column
    if column.type is ColumnType.STRUCT:
        fields = [
            extended_column(
                f, observed.fields[f.name], allow_type_widening=allow_type_widening, depth=depth + 1
            )
            if f.name in observed.fields
            else f
            for f in column.fields
        ]
        taken = {f.name for f in column.fields}
        fields += _new_columns(
            observed.fields, taken, allow_type_widening=allow_type_widening, depth=depth + 1
        )
        return column.model_copy(update={"fields": tuple(fields)})
    if column.type is ColumnType.LIST and column.element is not None and observed.element is not None:
        element = extended_column(
            column.element, observed.element, allow_type_widening=allow_type_widening, depth=depth + 1
        )
        return column.model_copy(update={"element": element})
    return column


def resolve_columns(
    current: Sequence[ColumnSpec],
    observed: TableObservation | None,
    *,
    allow_type_widening: bool,
    reserved: Iterable[str] = (),
) -> tuple[ColumnSpec, ...]:
    """The columns a run writes: `current` (the table's, as they are), then a new optional column per
    observed field the table lacks that has a type, in the order the fields first appeared. Fields
    named in `reserved` (the base fields, the `lfs_*` ones) never become columns."""
    if observed is None:
        return tuple(current)
    current = tuple(
        extended_column(c, observed.fields[c.name], allow_type_widening=allow_type_widening)
        if c.name in observed.fields
        else c
        for c in current
    )
    taken = {c.name for c in current} | set(reserved)
    return (*current, *_new_columns(observed.fields, taken, allow_type_widening=allow_type_widening))


def _new_columns(
    observed: Mapping[str, FieldObservation], taken: set[str], *, allow_type_widening: bool, depth: int = 0
) -> tuple[ColumnSpec, ...]:
    """A column (or struct field) per observed field with a type, in the order the fields first
    appeared, except those whose name is empty or equals one of `taken` ignoring case (`case_clash`)."""
    folded = {name.casefold() for name in taken}
    new: list[ColumnSpec] = []
    for name, field in sorted(observed.items(), key=lambda item: _order_key(item[0], item[1])):
        if not name or name.casefold() in folded:
            continue
        column = inferred_column(name, field, allow_type_widening=allow_type_widening, depth=depth)
        if column is not None:
            new.append(column)
            folded.add(name.casefold())
    return tuple(new)


def case_clashes(
    columns: Sequence[ColumnSpec], observed: TableObservation | None, reserved: Iterable[str] = ()
) -> tuple[str, ...]:
    """The observed top-level fields left out of `columns` because a column or a `reserved` name has
    their name in another case (`Tip` beside `tip`), sorted (to be logged)."""
    if observed is None:
        return ()
    names = {c.name for c in columns} | set(reserved)
    folded = {name.casefold() for name in names}
    return tuple(sorted(n for n in observed.fields if n not in names and n.casefold() in folded))
