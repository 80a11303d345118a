"""Table columns from a Protobuf message (`value_format: protobuf`): the type mapping, written down.

The message's fields become columns, in declaration order (oneof members included, each an optional
column: the member that is set has a value, the others are null). Every column is optional: a field
a newer schema version drops stays in the table, null from then on (`domain/schema_evolution.py`).

| Protobuf | column |
|---|---|
| `bool`, `string`, `float`, `double` | the same |
| `int32`, `sint32`, `sfixed32` | `int` |
| `int64`, `sint64`, `sfixed64`, `uint32`, `fixed32` | `long` |
| `uint64`, `fixed64` | `decimal(20,0)` (every value fits: no wrap-around into negative longs) |
| `bytes` | `binary` |
| enum | `string` (the value's name; a number the schema does not name, its digits) |
| message | `struct` of its fields |
| `repeated T` | `list` of T |
| `map<K, V>` | `map` (keys as strings) |
| `google.protobuf.Timestamp` | `timestamptz` (microseconds; nanoseconds below are cut; see below) |
| wrappers (`google.protobuf.Int32Value`, `StringValue`, ...) | the optional scalar they wrap, as above |

A scalar without presence (proto3's plain fields) that a producer left at its default reads as that
default (0, "", false), as every Protobuf reader does; a field with presence (proto3 `optional`, a
oneof member, a message, a wrapper, proto2 `optional`) that is not set is null. A message without
fields (`google.protobuf.Empty`) gives no column: Iceberg has no empty struct. A field named like a
base field (`record_id`, `topic`, ..., `value`, `headers`) or like an earlier field in another case
never becomes a column, as for Avro. A recursive message (one used inside itself, as
`google.protobuf.Struct` is) is refused with `RecordSchemaError` naming the field. A `Timestamp`
value outside `TIMESTAMP_SECONDS` (or with nanos outside 0..999999999) is no timestamp: the runtime
parses it but refuses to convert it (`ToDatetime`), and so its record is `undecodable`, naming the
field, never a wrapped or nulled value.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES
from kafscale_iceberg.exceptions import RecordSchemaError

# `FieldDescriptor.TYPE_*` (descriptor.proto's numbers; the module stays free of the runtime).
TYPE_DOUBLE, TYPE_FLOAT, TYPE_INT64, TYPE_UINT64, TYPE_INT32, TYPE_FIXED64, TYPE_FIXED32 = 1, 2, 3, 4, 5, 6, 7
TYPE_BOOL, TYPE_STRING, TYPE_GROUP, TYPE_MESSAGE, TYPE_BYTES, TYPE_UINT32, TYPE_ENUM = (
    8,
    9,
    10,
    11,
    12,
    13,
    14,
)
TYPE_SFIXED32, TYPE_SFIXED64, TYPE_SINT32, TYPE_SINT64 = 15, 16, 17, 18

UINT64 = ColumnSpec(name="value", type=ColumnType.DECIMAL, precision=20, scale=0)
"""What an unsigned 64-bit value becomes: `decimal(20,0)` holds 2^64 - 1."""

SCALARS: Mapping[int, ColumnSpec] = {
    TYPE_DOUBLE: ColumnSpec(name="value", type=ColumnType.DOUBLE),
    TYPE_FLOAT: ColumnSpec(name="value", type=ColumnType.FLOAT),
    TYPE_INT64: ColumnSpec(name="value", type=ColumnType.LONG),
    TYPE_SINT64: ColumnSpec(name="value", type=ColumnType.LONG),
    TYPE_SFIXED64: ColumnSpec(name="value", type=ColumnType.LONG),
    TYPE_UINT64: UINT64,
    TYPE_FIXED64: UINT64,
    TYPE_INT32: ColumnSpec(name="value", type=ColumnType.INT),
    TYPE_SINT32: ColumnSpec(name="value", type=ColumnType.INT),
    TYPE_SFIXED32: ColumnSpec(name="value", type=ColumnType.INT),
    TYPE_UINT32: ColumnSpec(name="value", type=ColumnType.LONG),
    TYPE_FIXED32: ColumnSpec(name="value", type=ColumnType.LONG),
    TYPE_BOOL: ColumnSpec(name="value", type=ColumnType.BOOLEAN),
    TYPE_STRING: ColumnSpec(name="value", type=ColumnType.STRING),
    TYPE_BYTES: ColumnSpec(name="value", type=ColumnType.BINARY),
    TYPE_ENUM: ColumnSpec(name="value", type=ColumnType.STRING),
}

TIMESTAMP = "google.protobuf.Timestamp"
TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)
"""A valid `Timestamp`'s seconds (0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z), nanos being 0 to
999999999: what `timestamp.proto` defines and the runtime's `ToDatetime` checks. The wire carries any
int64 (whose microseconds would wrap past about +-9.2e12 seconds); such a value is no timestamp."""
WRAPPERS: Mapping[str, int] = {
    "google.protobuf.DoubleValue": TYPE_DOUBLE,
    "google.protobuf.FloatValue": TYPE_FLOAT,
    "google.protobuf.Int64Value": TYPE_INT64,
    "google.protobuf.UInt64Value": TYPE_UINT64,
    "google.protobuf.Int32Value": TYPE_INT32,
    "google.protobuf.UInt32Value": TYPE_UINT32,
    "google.protobuf.BoolValue": TYPE_BOOL,
    "google.protobuf.StringValue": TYPE_STRING,
    "google.protobuf.BytesValue": TYPE_BYTES,
}
"""The wrappers: each becomes the optional scalar it wraps (its `value` field)."""


def protobuf_columns(
    message: Any, *, schema_name: str, reserved: Collection[str] = BASE_FIELD_NAMES
) -> tuple[ColumnSpec, ...]:
    """The columns a message descriptor (`google.protobuf.descriptor.Descriptor`) gives (see the
    module docstring). Raises `RecordSchemaError` naming `schema_name` and the field for a recursive
    message.

    `reserved`: the field names that never become columns (the base fields'; none for a record key,
    whose columns are prefixed `key_`)."""
    mapper = _ProtobufMapper(schema_name, message.full_name)
    taken = {name.casefold() for name in reserved}
    columns: list[ColumnSpec] = []
    mapper.open.add(message.full_name)
    for field in message.fields:
        if field.name.casefold() in taken:
            continue
        taken.add(field.name.casefold())
        column = mapper.column(field.name, field, path=(field.name,))
        if column is not None:
            columns.append(column.model_copy(update={"number": field.number}))
    return tuple(columns)


def is_repeated(field: Any) -> bool:
    """Whether a field descriptor is `repeated` (protobuf 7 has `is_repeated`, older ones `label`)."""
    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == 3  # LABEL_REPEATED


def is_map_entry(message: Any) -> bool:
    """Whether a message descriptor is the entry type of a `map<,>` field."""
    return bool(message.GetOptions().map_entry)


class _ProtobufMapper:
    """The messages open while one schema is mapped (to refuse recursion)."""

    def __init__(self, schema_name: str, top: str) -> None:
        self._schema_name = schema_name
        self._top = top
        self.open: set[str] = set()

    def column(
        self, name: str, field: Any, *, path: Sequence[str], in_list: bool = False
    ) -> ColumnSpec | None:
        repeated = is_repeated(field) and not in_list
        if repeated and field.type == TYPE_MESSAGE and is_map_entry(field.message_type):
            entry = field.message_type
            value = self.column("value", entry.fields_by_name["value"], path=(*path, "value"))
            if value is None:
                raise self._error(path, "is a map whose values are messages without fields")
            return ColumnSpec(name=name, type=ColumnType.MAP, value=value)
        if repeated:
            element = self.column("element", field, path=(*path, "element"), in_list=True)
            if element is None:
                return None
            return ColumnSpec(name=name, type=ColumnType.LIST, element=element)
        if field.type == TYPE_GROUP:
            raise self._error(path, "is a proto2 group, which protobuf mappings do not read")
        if field.type != TYPE_MESSAGE:
            return SCALARS[field.type].model_copy(update={"name": name})
        message = field.message_type
        full = message.full_name
        if full == TIMESTAMP:
            return ColumnSpec(name=name, type=ColumnType.TIMESTAMPTZ)
        if full in WRAPPERS:
            return SCALARS[WRAPPERS[full]].model_copy(update={"name": name})
        if full in self.open:
            raise self._error(path, f"uses the message {full!r} inside itself: recursive schemas are refused")
        self.open.add(full)
        parts = [
            p.model_copy(update={"number": f.number})
            for f in message.fields
            if (p := self.column(f.name, f, path=(*path, f.name))) is not None
        ]
        self.open.discard(full)
        if not parts:
            return None
        return ColumnSpec(name=name, type=ColumnType.STRUCT, fields=tuple(parts))

    def _error(self, path: Sequence[str], problem: str) -> RecordSchemaError:
        return RecordSchemaError(
            f"Protobuf schema {self._schema_name} (message {self._top}): field {'.'.join(path)} {problem}"
        )
