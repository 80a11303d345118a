"""`value_format: connect_json`: Kafka Connect's JSON envelope, `{"schema": …, "payload": …}`.

Each record carries its schema; records with the same schema (compared as canonical JSON) form one
group, whose columns are `domain/connect_schemas.connect_columns` of it. The payload is read by its
own schema: `bytes` from base64, `Decimal` from base64 (big-endian two's complement of the unscaled
value) or from a JSON number (`decimal.format: NUMERIC`, read exactly, never through float64),
`Date` as days, `Time` as milliseconds of the day, `Timestamp` as epoch milliseconds.

Dead letters (`ErrorKind`): a value that is not JSON is `invalid_json`; JSON that is not an object
with `schema` and `payload` is `wire_format`; a schema that gives no columns Iceberg can hold
(`RecordSchemaError`) or a payload that does not fit its own schema (a string in an `int32` field, a
non-optional field null, an `int8` out of range) is `undecodable`, with the field's path. A null
payload (a tombstone) or a null or empty value is no error: every column is null.

Record keys (`key_format: connect_json`, `part="key"`): a key whose envelope schema is not a struct
(`{"type": "string"}`, what JsonConverter writes for a string key) is read as a struct of the one
field `KEY_VALUE_FIELD` (column `key_value`); a key's fields named like base fields are columns too
(they become `key_<field>`).
"""

from __future__ import annotations

import base64
import binascii
import decimal
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch, DecodedGroup
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.domain import debezium_types
from kafscale_iceberg.domain.connect_schemas import (
    DATE,
    DECIMAL,
    TIME,
    TIMESTAMP,
    connect_columns,
    decimal_scale,
)
from kafscale_iceberg.domain.decimals import fit_decimal, from_unscaled
from kafscale_iceberg.domain.runs import (
    DECIMAL_MAX_PRECISION,
    KEY_VALUE_FIELD,
    ColumnSpec,
    ConversionSettings,
)
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES
from kafscale_iceberg.exceptions import RecordSchemaError

if TYPE_CHECKING:
    from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache

_RANGES = {"int8": 2**7, "int16": 2**15, "int32": 2**31, "int64": 2**63}
_Read = Callable[[object, str], object]


class _MismatchError(ValueError):
    """A payload value that does not fit its schema (the message names the field's path)."""


class ConnectJsonDecoder:
    """Decodes Kafka Connect JSON envelopes; compiles each distinct schema once per task."""

    def __init__(self, *, part: str = "value") -> None:
        """`part`: `key` when it decodes record keys (see the module docstring)."""
        self._key = part == "key"
        self._decoder: Any = msgspec.json.Decoder(float_hook=decimal.Decimal)
        self._encoder = msgspec.json.Encoder(order="sorted")
        self._compiled: dict[bytes, tuple[tuple[ColumnSpec, ...], _Read, str] | RecordSchemaError] = {}

    def decode(self, values: pa.Array) -> DecodedBatch:
        """See `ValueDecoder.decode`."""
        raw = values.to_pylist()
        errors: dict[int, tuple[str, str]] = {}
        rows: dict[bytes, tuple[list[int], list[object]]] = {}
        for position, value in enumerate(raw):
            if not value:
                continue
            try:
                document = self._decoder.decode(value)
            except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                errors[position] = ("invalid_json", f"not JSON: {exc}")
                continue
            if not isinstance(document, dict) or "schema" not in document or "payload" not in document:
                errors[position] = (
                    "wire_format",
                    "not a Kafka Connect envelope: expected a JSON object with 'schema' and 'payload' "
                    "(JsonConverter with schemas.enable=true)",
                )
                continue
            payload = document["payload"]
            if payload is None:
                continue
            key = self._encoder.encode(document["schema"])
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compiled[key] = _compile(document["schema"], key=self._key)
            if isinstance(compiled, RecordSchemaError):
                errors[position] = ("undecodable", str(compiled))
                continue
            _columns, read, label = compiled
            try:
                converted = read(payload, "")
            except _MismatchError as exc:
                errors[position] = ("undecodable", f"the payload does not fit {label}: {exc}")
                continue
            group = rows.setdefault(key, ([], []))
            group[0].append(position)
            group[1].append(converted)
        groups = []
        for key, (positions, records) in rows.items():
            compiled = self._compiled[key]
            assert not isinstance(compiled, RecordSchemaError)
            columns, _read, label = compiled
            struct_type = pa.struct([pa.field(c.name, column_arrow_type(c, storage=True)) for c in columns])
            groups.append(
                DecodedGroup(
                    positions=np.asarray(positions, np.int64),
                    records=pa.array(records, struct_type),
                    columns=columns,
                    label=label,
                )
            )
        return DecodedBatch(count=len(raw), groups=tuple(groups), errors=errors)

    def schemas_of(
        self, values: pa.Array, offsets: pa.Array, *, partition: int
    ) -> dict[str, tuple[ColumnSpec, ...]]:
        """See `ValueDecoder.schemas_of`: keyed by where each schema was first seen (partition, offset)."""
        batch = self.decode(values)
        found: dict[str, tuple[ColumnSpec, ...]] = {}
        for group in batch.groups:
            offset = offsets[int(group.positions[0])].as_py()
            found[f"at:{partition:010d}:{offset:020d}"] = group.columns
        return found


def decoder(settings: ConversionSettings, schemas: SchemaCache | None, *, part: str) -> ConnectJsonDecoder:
    """`value_format: connect_json`'s decoder (its `ValueFormatSpec.decoder`; each record carries its
    schema, so neither the settings nor a registry are read)."""
    del settings, schemas
    return ConnectJsonDecoder(part=part)


def _compile(
    schema: object, *, key: bool = False
) -> tuple[tuple[ColumnSpec, ...], _Read, str] | RecordSchemaError:
    name = schema.get("name") if isinstance(schema, Mapping) else None
    label = f"its envelope schema {name}" if isinstance(name, str) else "its envelope schema"
    if key and isinstance(schema, Mapping) and schema.get("type") != "struct":
        return _compile_whole_key(schema, label)
    try:
        reserved = () if key else BASE_FIELD_NAMES
        columns = connect_columns(schema, schema_name=str(name or "(unnamed)"), reserved=reserved)
        if not columns:
            raise RecordSchemaError(f"Kafka Connect schema {name or '(unnamed)'}: not a struct with fields")
        assert isinstance(schema, Mapping)
        reads = {field["field"]: _reader(field) for field in schema.get("fields", ())}
    except RecordSchemaError as exc:
        return exc
    names = [c.name for c in columns]

    def read(payload: object, path: str) -> object:
        if not isinstance(payload, dict):
            raise _MismatchError(f"the payload is {_kind(payload)}, not a struct")
        return {n: reads[n](payload.get(n), n) for n in names}

    return columns, read, label


def _compile_whole_key(
    schema: Mapping[str, Any], label: str
) -> tuple[tuple[ColumnSpec, ...], _Read, str] | RecordSchemaError:
    """A key schema that is not a struct, read as a struct of the one field `KEY_VALUE_FIELD`."""
    wrapper = {"type": "struct", "fields": [{**schema, "field": KEY_VALUE_FIELD}]}
    compiled = _compile(wrapper, key=True)
    if isinstance(compiled, RecordSchemaError):
        return compiled
    columns, read, _label = compiled
    return columns, lambda payload, path: read({KEY_VALUE_FIELD: payload}, path), label


def _reader(schema: Mapping[str, Any]) -> _Read:
    """A function from a payload value to what Arrow builds the column from (`_MismatchError` if it does
    not fit the schema)."""
    optional = bool(schema.get("optional", False)) or "default" in schema
    logical = schema.get("name")
    kind = schema.get("type")
    inner: _Read
    if logical == DECIMAL:
        parameters = schema.get("parameters") or {}
        precision = int(str(parameters.get("connect.decimal.precision", DECIMAL_MAX_PRECISION)))
        inner = _decimal_reader(precision, decimal_scale(schema))
    elif logical == DATE:
        inner = _date
    elif logical == TIMESTAMP:
        inner = _timestamp
    elif logical in debezium_types.MICROS_PER_UNIT:
        inner = _micros_reader(debezium_types.MICROS_PER_UNIT[str(logical)])
    elif logical == debezium_types.DATE:
        inner = _date
    elif logical in debezium_types.TIME_MICROS_PER_UNIT:
        inner = _time_of_day(debezium_types.TIME_MICROS_PER_UNIT[str(logical)], str(logical))
    elif logical == TIME:
        inner = _time
    elif kind in _RANGES:
        inner = _integer_reader(kind)
    elif kind in ("float32", "float64"):
        inner = _float
    elif kind == "boolean":
        inner = _typed(bool, "a boolean")
    elif kind == "string":
        inner = _typed(str, "a string")
    elif kind == "bytes":
        inner = _bytes
    elif kind == "struct":
        parts = {f["field"]: _reader(f) for f in schema.get("fields", ())}

        def inner(value: object, path: str) -> object:
            if not isinstance(value, dict):
                raise _MismatchError(f"field {path}: {_kind(value)} is not a struct")
            return {n: read(value.get(n), f"{path}.{n}") for n, read in parts.items()}
    elif kind == "array":
        element = _reader(schema["items"])

        def inner(value: object, path: str) -> object:
            if not isinstance(value, list):
                raise _MismatchError(f"field {path}: {_kind(value)} is not an array")
            return [element(e, f"{path}[{i}]") for i, e in enumerate(value)]
    elif kind == "map":
        entry = _reader(schema["values"])

        def inner(value: object, path: str) -> object:
            if isinstance(value, dict):
                pairs = list(value.items())
            elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
                pairs = [(p[0], p[1]) for p in value]  # non-string keys: an array of [key, value]
            else:
                raise _MismatchError(f"field {path}: {_kind(value)} is not a map")
            return [(str(k), entry(v, f"{path}[{k!r}]")) for k, v in pairs]
    else:
        raise RecordSchemaError(f"Kafka Connect schema: unknown type {kind!r}")

    def read(value: object, path: str) -> object:
        if value is None:
            if optional:
                return None
            raise _MismatchError(f"field {path} is null but not optional")
        return inner(value, path)

    return read


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float | decimal.Decimal) else "null"
    )


def _integer_reader(kind: str) -> _Read:
    bound = _RANGES[kind]

    def read(value: object, path: str) -> object:
        if type(value) is not int or not -bound <= value < bound:
            raise _MismatchError(f"field {path}: {value!r} is not an {kind}")
        return value

    return read


def _float(value: object, path: str) -> object:
    if type(value) is int or type(value) is decimal.Decimal:
        return float(value)
    raise _MismatchError(f"field {path}: {_kind(value)} is not a number")


def _typed(kind: type, described: str) -> _Read:
    def read(value: object, path: str) -> object:
        if type(value) is not kind:
            raise _MismatchError(f"field {path}: {_kind(value)} is not {described}")
        return value

    return read


def _bytes(value: object, path: str) -> object:
    if type(value) is not str:
        raise _MismatchError(f"field {path}: {_kind(value)} is not base64 bytes")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise _MismatchError(f"field {path}: {value[:40]!r} is not base64") from None


def _decimal_reader(precision: int, scale: int) -> _Read:
    """A Connect `Decimal` exactly (`domain/decimals.py`: never rounded; what does not fit is a mismatch)."""

    def read(value: object, path: str) -> object:
        if type(value) is str:
            unscaled = int.from_bytes(_bytes(value, path), "big", signed=True)  # type: ignore[arg-type]
            number = from_unscaled(unscaled, scale)
        elif type(value) is int or type(value) is decimal.Decimal:
            number = decimal.Decimal(value)
        else:
            raise _MismatchError(f"field {path}: {_kind(value)} is not a Decimal")
        exact = fit_decimal(number, precision, scale)
        if exact is None:
            raise _MismatchError(f"field {path}: {number} does not fit decimal({precision},{scale})")
        return exact

    return read


def _date(value: object, path: str) -> object:
    """Days since 1970-01-01 (int32, as Connect writes them); the range tables hold is checked with
    every other date's (`dataplane/datetimes.py`), a counted conversion failure of the column."""
    if type(value) is not int or not -_RANGES["int32"] <= value < _RANGES["int32"]:
        raise _MismatchError(f"field {path}: {value!r} is not a Date (days since 1970-01-01, an int32)")
    return value


def _micros_reader(factor: int) -> _Read:
    """A Debezium timestamp (`domain/debezium_types.py`) as microseconds since the epoch."""

    def read(value: object, path: str) -> object:
        if type(value) is not int or not -(2**63) // factor <= value < 2**63 // factor:
            raise _MismatchError(f"field {path}: {value!r} is not a Debezium timestamp (an epoch integer)")
        return value * factor

    return read


_MILLIS_PER_DAY = 86_400_000


def _time(value: object, path: str) -> object:
    if type(value) is not int or not 0 <= value < _MILLIS_PER_DAY:
        raise _MismatchError(f"field {path}: {value!r} is not a Time (milliseconds since midnight)")
    return value * 1000


def _time_of_day(factor: int, name: str) -> _Read:
    """A Debezium time of day (`domain/debezium_types.py`) as microseconds since midnight."""

    def read(value: object, path: str) -> object:
        if type(value) is not int or not 0 <= value * factor < _MILLIS_PER_DAY * 1000:
            raise _MismatchError(f"field {path}: {value!r} is not a {name} (a time of day)")
        return value * factor

    return read


def _timestamp(value: object, path: str) -> object:
    if type(value) is not int or not -(2**63) // 1000 <= value < 2**63 // 1000:
        raise _MismatchError(f"field {path}: {value!r} is not a Timestamp (epoch milliseconds)")
    return value * 1000
