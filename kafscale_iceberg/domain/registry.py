"""Table columns from a JSON Schema, as KafScale's processor derives them for `schema.source: registry`.

Top-level `properties` only: integer -> long, number -> double, boolean -> boolean, string -> string;
for a type list the first non-null entry wins; object and array properties are skipped (they stay
in `value`); `required` comes from the top-level list; columns are sorted by name.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES

_JSON_TYPES = {
    "integer": ColumnType.LONG,
    "number": ColumnType.DOUBLE,
    "boolean": ColumnType.BOOLEAN,
    "string": ColumnType.STRING,
}


def columns_from_json_schema(schema: Mapping[str, object]) -> tuple[ColumnSpec, ...]:
    """The mapping columns a registry schema defines (see the module docstring)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return ()
    required_list = schema.get("required")
    required = set(required_list) if isinstance(required_list, list) else set()
    columns = []
    for name in sorted(properties):
        if name in BASE_FIELD_NAMES:
            continue  # a base field already carries it
        column_type = _column_type(properties[name])
        if column_type is not None:
            columns.append(ColumnSpec(name=name, type=column_type, required=name in required))
    return tuple(columns)


def _column_type(prop: object) -> ColumnType | None:
    if not isinstance(prop, Mapping):
        return None
    declared = prop.get("type")
    names = declared if isinstance(declared, list) else [declared]
    first = next((n for n in names if n != "null"), None)
    return _JSON_TYPES.get(first) if isinstance(first, str) else None
