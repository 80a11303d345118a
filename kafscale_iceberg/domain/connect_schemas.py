"""Table columns from a Kafka Connect schema (`value_format: connect_json`): the type mapping.

Kafka Connect's `JsonConverter` (`schemas.enable=true`, also Debezium's default) writes each record
as `{"schema": …, "payload": …}`. The top-level `struct`'s fields become columns, every one optional
(a field a newer version drops stays, null from then on); a top-level schema that is not a struct
gives no columns (the values stay in `value`).

| Connect | column |
|---|---|
| `int8`, `int16`, `int32` | `int` |
| `int64` | `long` |
| `float32`, `float64` | `float`, `double` |
| `boolean`, `string` | the same |
| `bytes` (base64 in the JSON) | `binary` |
| `struct` | `struct` of its fields |
| `array` | `list` |
| `map` | `map` (keys as strings) |
| `…connect.data.Decimal` (`scale`, `connect.decimal.precision`) | `decimal(P,S)` (P 38 if not given) |
| `…connect.data.Date` | `date` |
| `…connect.data.Time` | `time` (its milliseconds since midnight, as microseconds) |
| `…connect.data.Timestamp` | `timestamptz` |

Debezium's `io.debezium.time.Timestamp`, `MicroTimestamp` and `Date` are `timestamp`, `timestamp` and
`date` (`domain/debezium_types.py`); other named types are their physical type. Base
field names and case twins never become columns, as for Avro (`domain/avro_schemas.py`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from kafscale_iceberg.domain import debezium_types
from kafscale_iceberg.domain.runs import DECIMAL_MAX_PRECISION, ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES
from kafscale_iceberg.exceptions import RecordSchemaError

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"

_PHYSICAL: Mapping[str, ColumnType] = {
    "int8": ColumnType.INT,
    "int16": ColumnType.INT,
    "int32": ColumnType.INT,
    "int64": ColumnType.LONG,
    "float32": ColumnType.FLOAT,
    "float64": ColumnType.DOUBLE,
    "boolean": ColumnType.BOOLEAN,
    "string": ColumnType.STRING,
    "bytes": ColumnType.BINARY,
}
_MAX_DEPTH = 32


def connect_columns(
    schema: object, *, schema_name: str, reserved: Collection[str] = BASE_FIELD_NAMES
) -> tuple[ColumnSpec, ...]:
    """The columns a Connect schema's top-level struct gives (see the module docstring).

    `reserved`: the field names that never become columns (the base fields'; none for a record key,
    whose columns are prefixed `key_`).

    Raises `RecordSchemaError` naming `schema_name` for a schema that is not one (a field without a
    type, a decimal wider than 38 digits, nesting deeper than 32).
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "struct":
        return ()
    taken = {name.casefold() for name in reserved}
    columns: list[ColumnSpec] = []
    for name, field in _fields(schema, schema_name, ()):
        if name.casefold() in taken:
            continue
        taken.add(name.casefold())
        columns.append(_column(name, field, schema_name, (name,)))
    return tuple(columns)


def decimal_scale(schema: Mapping[str, object]) -> int:
    """A Connect `Decimal`'s scale (its `scale` parameter, 0 when absent)."""
    parameters = schema.get("parameters")
    if isinstance(parameters, Mapping):
        return int(str(parameters.get("scale", "0")))
    return 0


def _fields(
    schema: Mapping[str, object], schema_name: str, path: Sequence[str]
) -> list[tuple[str, Mapping[str, object]]]:
    fields = schema.get("fields")
    found: list[tuple[str, Mapping[str, object]]] = []
    seen: set[str] = set()
    for field in fields if isinstance(fields, list) else ():
        if not isinstance(field, Mapping) or not isinstance(field.get("field"), str):
            raise _error(schema_name, path, "has a field without a name")
        name = str(field["field"])
        if name and name.casefold() not in seen:
            seen.add(name.casefold())
            found.append((name, field))
    return found


def _column(name: str, schema: Mapping[str, object], schema_name: str, path: Sequence[str]) -> ColumnSpec:
    if len(path) > _MAX_DEPTH:
        raise _error(schema_name, path, f"is nested deeper than {_MAX_DEPTH}")
    logical = schema.get("name")
    kind = schema.get("type")
    if logical == DECIMAL:
        parameters = schema.get("parameters")
        precision = DECIMAL_MAX_PRECISION
        if isinstance(parameters, Mapping) and "connect.decimal.precision" in parameters:
            precision = int(str(parameters["connect.decimal.precision"]))
        scale = decimal_scale(schema)
        if precision > DECIMAL_MAX_PRECISION or scale > precision:
            raise _error(
                schema_name, path, f"is decimal({precision},{scale}): Iceberg holds at most 38 digits"
            )
        return ColumnSpec(name=name, type=ColumnType.DECIMAL, precision=precision, scale=scale)
    if logical == DATE:
        return ColumnSpec(name=name, type=ColumnType.DATE)
    if logical == TIMESTAMP:
        return ColumnSpec(name=name, type=ColumnType.TIMESTAMPTZ)
    if logical == TIME:
        return ColumnSpec(name=name, type=ColumnType.TIME)
    if isinstance(logical, str) and logical in debezium_types.COLUMN_TYPES:
        return ColumnSpec(name=name, type=debezium_types.COLUMN_TYPES[logical])
    if isinstance(kind, str) and kind in _PHYSICAL:
        return ColumnSpec(name=name, type=_PHYSICAL[kind])
    if kind == "struct":
        parts = tuple(_column(n, f, schema_name, (*path, n)) for n, f in _fields(schema, schema_name, path))
        if not parts:
            raise _error(schema_name, path, "is a struct without fields: Iceberg has no empty struct")
        return ColumnSpec(name=name, type=ColumnType.STRUCT, fields=parts)
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            raise _error(schema_name, path, "is an array without items")
        return ColumnSpec(
            name=name,
            type=ColumnType.LIST,
            element=_column("element", items, schema_name, (*path, "element")),
        )
    if kind == "map":
        values = schema.get("values")
        if not isinstance(values, Mapping):
            raise _error(schema_name, path, "is a map without values")
        return ColumnSpec(
            name=name, type=ColumnType.MAP, value=_column("value", values, schema_name, (*path, "value"))
        )
    raise _error(schema_name, path, f"has an unknown type {kind!r}")


def _error(schema_name: str, path: Sequence[str], problem: str) -> RecordSchemaError:
    where = f"field {'.'.join(path)}" if path else "the schema"
    return RecordSchemaError(f"Kafka Connect schema {schema_name}: {where} {problem}")
