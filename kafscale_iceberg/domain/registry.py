"""Table columns from a JSON Schema, as KafScale's processor derives them for `schema.source: registry`.

The Go processor's columns, unchanged (so a table it created keeps exactly its columns): top-level
`properties` only; integer -> long, number -> double, boolean -> boolean, string -> string (also
with a `format`: the Go processor's column is a string, and a table it created has it so); for a
type list the first non-null entry wins; `required` comes from the top-level list; sorted by name.

Then the nested properties the Go processor skips, as new columns after its own (sorted by name):
an `object` with `properties` is a `struct` of them (recursively), an `array` with typed `items` a
`list` of that type. Inside them, `format: date-time` is a `timestamp` and `format: date` a `date`
(no table of the Go processor has these columns, so nothing of it changes). An object without
properties or an array without typed items stays in `value` only, as in Go.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from kafscale_iceberg.domain.runs import NESTED_TYPES, ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES

_JSON_TYPES = {
    "integer": ColumnType.LONG,
    "number": ColumnType.DOUBLE,
    "boolean": ColumnType.BOOLEAN,
    "string": ColumnType.STRING,
}
_STRING_FORMATS = {"date-time": ColumnType.TIMESTAMP, "date": ColumnType.DATE}
# Nested properties deeper than this stay inside their parent's JSON (a recursive `$ref`-free guard).
_MAX_DEPTH = 32


def columns_from_json_schema(
    schema: Mapping[str, object], *, reserved: Collection[str] = BASE_FIELD_NAMES
) -> tuple[ColumnSpec, ...]:
    """The mapping columns a registry schema defines (see the module docstring).

    `reserved`: the field names that never become columns (the base fields'; none for a record key,
    whose columns are prefixed `key_`)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return ()
    required_list = schema.get("required")
    required = set(required_list) if isinstance(required_list, list) else set()
    scalars: list[ColumnSpec] = []
    nested: list[ColumnSpec] = []
    for name in sorted(properties):
        if name in reserved:
            continue  # a base field already carries it
        column = _column(str(name), properties[name], depth=0, top_level=True)
        if column is None:
            continue
        column = column.model_copy(update={"required": name in required})
        (nested if column.type in NESTED_TYPES else scalars).append(column)
    return (*scalars, *nested)


def _column(name: str, prop: object, *, depth: int, top_level: bool) -> ColumnSpec | None:
    if not isinstance(prop, Mapping) or depth > _MAX_DEPTH:
        return None
    declared = prop.get("type")
    names = declared if isinstance(declared, list) else [declared]
    first = next((n for n in names if n != "null"), None)
    if first == "object":
        fields = _struct_fields(prop.get("properties"), depth=depth + 1)
        return ColumnSpec(name=name, type=ColumnType.STRUCT, fields=fields) if fields else None
    if first == "array":
        element = _column("element", prop.get("items"), depth=depth + 1, top_level=False)
        return ColumnSpec(name=name, type=ColumnType.LIST, element=element) if element is not None else None
    column_type = _JSON_TYPES.get(first) if isinstance(first, str) else None
    if column_type is None:
        return None
    if column_type is ColumnType.STRING and not top_level:
        column_type = _STRING_FORMATS.get(str(prop.get("format")), column_type)
    return ColumnSpec(name=name, type=column_type)


def _struct_fields(properties: object, *, depth: int) -> tuple[ColumnSpec, ...]:
    if not isinstance(properties, Mapping):
        return ()
    fields = (_column(str(n), properties[n], depth=depth, top_level=False) for n in properties)
    return tuple(f for f in fields if f is not None)
