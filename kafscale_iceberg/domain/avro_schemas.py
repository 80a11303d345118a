"""Table columns from an Avro schema (`value_format: avro`): the type mapping, written down.

The top-level record's fields become columns, in the schema's order; a top-level schema that is not a
record gives no columns (such values are `undecodable` dead letters), except a record key's
(`key_format: avro`), which is read as the one-field record `as_key_record` makes of it (column
`key_value`). Every column is optional: a field a newer schema version drops stays in the table,
null from then on (`domain/schema_evolution.py`).

| Avro | column |
|---|---|
| `boolean`, `int`, `long`, `float`, `double`, `string` | the same |
| `bytes`, `fixed` | `binary` |
| `enum` | `string` (the symbol) |
| `record` | `struct` of its fields |
| `array` | `list` |
| `map` | `map` (string keys) |
| `["null", T]` (either order) | optional T |
| any other union | `struct`, one optional field per branch, named by its type (`int`, a record's name) |
| `decimal(P,S)` on `bytes`/`fixed` | `decimal(P,S)` (P at most 38, else refused) |
| `uuid` on `string`/`fixed` | `uuid` |
| `date` | `date` |
| `time-millis`, `time-micros` | `time` (microseconds since midnight) |
| `timestamp-millis`, `timestamp-micros` | `timestamptz` |
| `local-timestamp-millis`, `local-timestamp-micros` | `timestamp` |
| `timestamp-nanos`, `local-timestamp-nanos` | `long` (nanoseconds; Iceberg v2 has no nanosecond type) |

A schema with `references` (named types other subjects define, Confluent's Avro references) is read
with each referenced definition put in place of its first use (`with_references`), so every reader
(the columns, fastavro, the Rust block reader) sees one self-contained schema.

A field named like a base field (`record_id`, `topic`, …, `value`, `headers`) or with the name of
an earlier field in another case never becomes a column (it stays in the `value` bytes), as for
inferred JSON columns. A recursive schema (a named type used inside itself) is refused with
`RecordSchemaError`, as is a schema that is not valid JSON.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence

from kafscale_iceberg.domain.debezium_types import avro_logical_type
from kafscale_iceberg.domain.runs import DECIMAL_MAX_PRECISION, KEY_VALUE_FIELD, ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES
from kafscale_iceberg.exceptions import RecordSchemaError

_PRIMITIVES: Mapping[str, ColumnType] = {
    "boolean": ColumnType.BOOLEAN,
    "int": ColumnType.INT,
    "long": ColumnType.LONG,
    "float": ColumnType.FLOAT,
    "double": ColumnType.DOUBLE,
    "string": ColumnType.STRING,
    "bytes": ColumnType.BINARY,
}
_LOGICAL: Mapping[str, ColumnType] = {
    "date": ColumnType.DATE,
    "time-millis": ColumnType.TIME,
    "time-micros": ColumnType.TIME,
    "timestamp-millis": ColumnType.TIMESTAMPTZ,
    "timestamp-micros": ColumnType.TIMESTAMPTZ,
    "local-timestamp-millis": ColumnType.TIMESTAMP,
    "local-timestamp-micros": ColumnType.TIMESTAMP,
    "timestamp-nanos": ColumnType.LONG,
    "local-timestamp-nanos": ColumnType.LONG,
    "uuid": ColumnType.UUID,
}


def parse_avro_schema(text: str, *, schema_name: str) -> object:
    """The schema's JSON; `RecordSchemaError` naming `schema_name` when it is not JSON."""
    try:
        return _with_debezium_types(json.loads(text))
    except json.JSONDecodeError as exc:
        raise RecordSchemaError(f"Avro schema {schema_name} is not JSON: {exc}") from None


def _with_debezium_types(schema: object) -> object:
    """`schema` with Debezium's temporal types (`connect.name` `io.debezium.time.*` on an int or a long,
    as Confluent's Avro converter writes them) given the logical type they mean
    (`domain/debezium_types.py`), so they are read as timestamps and dates, not integers."""
    if isinstance(schema, list):
        return [_with_debezium_types(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    found = {key: _with_debezium_types(value) for key, value in schema.items()}
    logical = avro_logical_type(found.get("type"), found.get("connect.name"))
    if logical is not None and "logicalType" not in found:
        found["logicalType"] = logical
    return found


def with_references(schema: object, referenced: Sequence[object]) -> object:
    """`schema` made self-contained: each named type of `referenced` (the referenced subjects'
    schemas, themselves self-contained) defined where `schema` first uses its name, by full name or
    by a short name in the enclosing namespace; later uses stay names, as Avro allows. A referenced
    type `schema` never uses is left out."""
    pending: dict[str, Mapping[str, object]] = {}
    for document in referenced:
        for member in document if isinstance(document, list) else [document]:
            if isinstance(member, Mapping) and member.get("type") in _NAMED_KINDS:
                definition = dict(member)
                if "." not in str(definition.get("name", "")) and "namespace" not in definition:
                    definition["namespace"] = ""  # the null namespace wherever it is put
                pending[_full_name(member, "")] = definition
    return _inlined(schema, "", pending, set())


_NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})


def _inlined(
    schema: object, namespace: str, pending: Mapping[str, Mapping[str, object]], defined: set[str]
) -> object:
    if isinstance(schema, str):
        for full in (f"{namespace}.{schema}" if namespace and "." not in schema else schema, schema):
            if full in pending and full not in defined:
                defined.add(full)
                return _inlined(pending[full], "", pending, defined)
        return schema
    if isinstance(schema, list):
        return [_inlined(branch, namespace, pending, defined) for branch in schema]
    if not isinstance(schema, Mapping):
        return schema
    kind = schema.get("type")
    if kind in _NAMED_KINDS:
        defined.add(_full_name(schema, namespace))
        if kind in {"enum", "fixed"}:
            return schema
        inner = _namespace(schema, namespace)
        fields = schema.get("fields")
        return {
            **schema,
            "fields": [
                {**f, "type": _inlined(f.get("type"), inner, pending, defined)}
                if isinstance(f, Mapping)
                else f
                for f in (fields if isinstance(fields, list) else ())
            ],
        }
    if kind == "array":
        return {**schema, "items": _inlined(schema.get("items"), namespace, pending, defined)}
    if kind == "map":
        return {**schema, "values": _inlined(schema.get("values"), namespace, pending, defined)}
    return {**schema, "type": _inlined(kind, namespace, pending, defined)}


def as_key_record(schema: object) -> object:
    """A key schema that is not a record (`"string"`, `"long"`, `["null", "string"]`, an enum, an
    array, ...) as a record of one field `KEY_VALUE_FIELD` of that type; a record as it is.

    Avro encodes a record as its fields one after the other, so a record of one field has exactly the
    bytes of that field's value: the key's payload reads unchanged with the wrapper (every reader, the
    fast block reader too)."""
    if isinstance(schema, Mapping) and schema.get("type") in ("record", "error"):
        return schema
    return {"type": "record", "name": "KafscaleKey", "fields": [{"name": KEY_VALUE_FIELD, "type": schema}]}


def avro_columns(
    schema: object, *, schema_name: str, reserved: Collection[str] = BASE_FIELD_NAMES
) -> tuple[ColumnSpec, ...]:
    """The columns an Avro schema's top-level record gives (see the module docstring).

    `reserved`: the field names that never become columns (the base fields'; none for a record key,
    whose columns are prefixed `key_`).

    Raises `RecordSchemaError` naming `schema_name` (e.g. `id 7`) for a recursive schema or a decimal
    wider than 38 digits.
    """
    mapper = _AvroMapper(schema_name)
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        return ()
    mapper.named(schema, namespace="")
    fields = schema.get("fields")
    columns: list[ColumnSpec] = []
    taken = {name.casefold() for name in reserved}
    for field in fields if isinstance(fields, list) else ():
        name = str(field.get("name", ""))
        if not name or name.casefold() in taken:
            continue
        taken.add(name.casefold())
        column = mapper.column(name, field.get("type"), namespace=_namespace(schema, ""), path=(name,))
        columns.append(with_aliases(with_default(column, field), field))
    return tuple(columns)


_SCALAR_DEFAULTS: dict[ColumnType, type | tuple[type, ...]] = {
    ColumnType.STRING: str,
    ColumnType.BOOLEAN: bool,
    ColumnType.INT: int,
    ColumnType.LONG: int,
    ColumnType.FLOAT: (int, float),
    ColumnType.DOUBLE: (int, float),
}


def with_default(column: ColumnSpec, field: Mapping[str, object]) -> ColumnSpec:
    """`column` carrying the field's declared `default` when it is a scalar of the column's type (an
    enum's symbol too): what a record written with a schema without the field lands (Avro's schema
    resolution). Other defaults (bytes, logical types, records, arrays) are not carried: such a
    record's value stays null."""
    default = field.get("default")
    expected = _SCALAR_DEFAULTS.get(column.type)
    if (
        default is None
        or expected is None
        or isinstance(default, bool) != (column.type is ColumnType.BOOLEAN)
    ):
        return column
    if not isinstance(default, expected):
        return column
    return column.model_copy(update={"default": default})


def with_aliases(column: ColumnSpec, field: Mapping[str, object]) -> ColumnSpec:
    """`column` carrying the field's `aliases` (its former names): a column of one of those names is
    renamed to the field's, keeping its id and rows (`domain/schema_evolution.py`)."""
    aliases = field.get("aliases")
    if not isinstance(aliases, list):
        return column
    names = tuple(dict.fromkeys(a for a in aliases if isinstance(a, str) and a and a != column.name))
    return column.model_copy(update={"aliases": names}) if names else column


def _namespace(schema: Mapping[str, object], enclosing: str) -> str:
    name = str(schema.get("name", ""))
    if "." in name:
        return name.rsplit(".", 1)[0]
    namespace = schema.get("namespace")
    return str(namespace) if isinstance(namespace, str) else enclosing


def _full_name(schema: Mapping[str, object], enclosing: str) -> str:
    name = str(schema.get("name", ""))
    if "." in name:
        return name
    namespace = _namespace(schema, enclosing)
    return f"{namespace}.{name}" if namespace else name


class _AvroMapper:
    """One schema's named types (to resolve references and to refuse recursion) while it is mapped."""

    def __init__(self, schema_name: str) -> None:
        self._schema_name = schema_name
        self._named: dict[str, Mapping[str, object]] = {}
        self._open: set[str] = set()

    def named(self, schema: Mapping[str, object], *, namespace: str) -> str:
        full = _full_name(schema, namespace)
        self._named.setdefault(full, schema)
        self._named.setdefault(str(schema.get("name", "")), schema)
        return full

    def column(self, name: str, avro: object, *, namespace: str, path: Sequence[str]) -> ColumnSpec:
        if isinstance(avro, list):
            branches = [b for b in avro if b != "null"]
            if len(branches) == 1:
                return self.column(name, branches[0], namespace=namespace, path=path)
            fields = tuple(
                self.column(_branch_name(b), b, namespace=namespace, path=(*path, _branch_name(b)))
                for b in branches
            )
            return ColumnSpec(name=name, type=ColumnType.STRUCT, fields=fields)
        if isinstance(avro, str):
            if avro in _PRIMITIVES:
                return ColumnSpec(name=name, type=_PRIMITIVES[avro])
            reference = self._named.get(avro) or self._named.get(f"{namespace}.{avro}")
            if reference is None:
                raise self._error(path, f"names the unknown type {avro!r}")
            return self.column(name, reference, namespace=namespace, path=path)
        if not isinstance(avro, Mapping):
            raise self._error(path, f"has a type that is not a schema: {avro!r}")
        logical = avro.get("logicalType")
        kind = avro.get("type")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = avro.get("precision"), avro.get("scale", 0)
            if not isinstance(precision, int) or not isinstance(scale, int):
                raise self._error(path, "is a decimal without an integer precision and scale")
            if precision > DECIMAL_MAX_PRECISION:
                raise self._error(path, f"is decimal({precision},{scale}): Iceberg holds at most 38 digits")
            if kind == "fixed":
                self.named(avro, namespace=namespace)
            return ColumnSpec(name=name, type=ColumnType.DECIMAL, precision=precision, scale=scale)
        if isinstance(logical, str) and logical in _LOGICAL and kind in ("int", "long", "string", "fixed"):
            if kind == "fixed":
                self.named(avro, namespace=namespace)
            return ColumnSpec(name=name, type=_LOGICAL[logical])
        if kind == "record":
            full = self.named(avro, namespace=namespace)
            if full in self._open:
                raise self._error(
                    path, f"uses the record {full!r} inside itself: recursive schemas are refused"
                )
            self._open.add(full)
            inner_namespace = _namespace(avro, namespace)
            declared: object = avro.get("fields")
            parts: list[ColumnSpec] = []
            seen: set[str] = set()
            field: Mapping[str, object]
            for field in declared if isinstance(declared, list) else ():
                field_name = str(field.get("name", ""))
                if not field_name or field_name.casefold() in seen:
                    continue
                seen.add(field_name.casefold())
                part = self.column(
                    field_name, field.get("type"), namespace=inner_namespace, path=(*path, field_name)
                )
                parts.append(with_aliases(with_default(part, field), field))
            self._open.discard(full)
            if not parts:
                raise self._error(path, f"is the record {full!r} without fields: Iceberg has no empty struct")
            return ColumnSpec(name=name, type=ColumnType.STRUCT, fields=tuple(parts))
        if kind == "enum":
            self.named(avro, namespace=namespace)
            return ColumnSpec(name=name, type=ColumnType.STRING)
        if kind == "fixed":
            self.named(avro, namespace=namespace)
            return ColumnSpec(name=name, type=ColumnType.BINARY)
        if kind == "array":
            element = self.column("element", avro.get("items"), namespace=namespace, path=(*path, "element"))
            return ColumnSpec(name=name, type=ColumnType.LIST, element=element)
        if kind == "map":
            value = self.column("value", avro.get("values"), namespace=namespace, path=(*path, "value"))
            return ColumnSpec(name=name, type=ColumnType.MAP, value=value)
        if isinstance(kind, str | list | Mapping):
            return self.column(name, kind, namespace=namespace, path=path)
        raise self._error(path, f"has an unknown type {kind!r}")

    def _error(self, path: Sequence[str], problem: str) -> RecordSchemaError:
        return RecordSchemaError(f"Avro schema {self._schema_name}: field {'.'.join(path)} {problem}")


def _branch_name(branch: object) -> str:
    """The struct field a union branch becomes: its type's name (`int`, `string`, a record's name)."""
    if isinstance(branch, str):
        return branch.rsplit(".", 1)[-1]
    if isinstance(branch, Mapping):
        name = branch.get("name")
        if isinstance(name, str):
            return name.rsplit(".", 1)[-1]
        logical = branch.get("logicalType")
        kind = branch.get("type")
        return str(logical or kind)
    return str(branch)
