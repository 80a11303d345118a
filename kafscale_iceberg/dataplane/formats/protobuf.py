"""`value_format: protobuf`: Protobuf in Confluent wire format, schemas from the registry by id.

After the wire header (`wire.py`) comes the message-index path, zig-zag varints: a count, then that
many indexes (the message's place in the schema file: a top-level message, then nested ones); the
single byte `0` stands for `[0]`, the file's first message. Then the payload.

Records are grouped by (schema id, message); each group's payloads are parsed by the runtime's
message class (upb, compiled, where the process imports protobuf with it: see `docs/benchmarks.md`)
and read into one Arrow struct array, column by column, by readers compiled once per message
(`domain/protobuf_schemas.py` gives the columns). Schemas are compiled by `protobuf_schemas.py`.

Values without the wire prefix are read with `value_subject`'s latest schema and its message
`value_message` (default: the file's first message) when the mapping names a subject, else are
`wire_format` dead letters. A schema id the registry does not have (404) makes its records
`unknown_schema` dead letters; a payload that does not parse, or a message index the schema does not
have, `undecodable` ones naming the schema id and message. A registry outage raises
`RegistryUnavailableError` (the run fails transiently; nothing is dead-lettered for it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from kafscale_iceberg.dataplane.formats.decoding import DecodedBatch, DecodedGroup
from kafscale_iceberg.dataplane.formats.protobuf_schemas import (
    ProtobufFile,
    compile_protobuf_schema,
    message_class,
)
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.dataplane.formats.wire import HEADER_BYTES, split_wire
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.domain.protobuf_schemas import (
    TIMESTAMP,
    TYPE_ENUM,
    TYPE_MESSAGE,
    WRAPPERS,
    is_map_entry,
    is_repeated,
    protobuf_columns,
)
from kafscale_iceberg.domain.runs import ColumnSpec
from kafscale_iceberg.exceptions import RecordSchemaError, SchemaNotFoundError

Reader = Callable[[Any], object]
"""Reads one column's value (as Arrow builds the column's type from it) out of a parsed message."""


@dataclass(frozen=True)
class ProtobufMessage:
    """What the decoder keeps per (schema id, message): its class, columns and column readers."""

    label: str
    parse: Callable[[bytes], Any]
    columns: tuple[ColumnSpec, ...]
    readers: tuple[Reader, ...]
    struct_type: pa.StructType


class ProtobufDecoder:
    """Decodes Protobuf records in Confluent wire format (see the module docstring)."""

    def __init__(
        self, schemas: SchemaCache, *, subject: str | None = None, message: str | None = None
    ) -> None:
        self._schemas = schemas
        self._subject = subject
        self._message = message
        self._files: dict[int, ProtobufFile | RecordSchemaError | SchemaNotFoundError] = {}
        self._messages: dict[tuple[int, tuple[int, ...] | str], ProtobufMessage | RecordSchemaError] = {}

    def decode(self, values: pa.Array) -> DecodedBatch:
        """See `ValueDecoder.decode`."""
        raw: list[bytes | None] = values.to_pylist()
        errors: dict[int, tuple[str, str]] = {}
        groups = []
        for message, positions, payloads in self._grouped(values, raw, errors).values():
            parsed: list[Any] = []
            kept: list[int] = []
            for position, payload in zip(positions, payloads, strict=True):
                try:
                    parsed.append(message.parse(payload))
                except DecodeError as exc:
                    errors[position] = (
                        "undecodable",
                        f"the payload does not decode with {message.label}: {exc or 'malformed bytes'}",
                    )
                    continue
                kept.append(position)
            if not kept:
                continue
            try:
                records = _records(message, parsed)
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, OverflowError) as exc:
                for position in kept:
                    errors[position] = (
                        "undecodable",
                        f"{message.label}: values do not fit its columns: {exc}",
                    )
                continue
            groups.append(
                DecodedGroup(
                    positions=np.asarray(kept, np.int64),
                    records=records,
                    columns=message.columns,
                    label=message.label,
                )
            )
        return DecodedBatch(count=len(raw), groups=tuple(groups), errors=errors)

    def schemas_of(
        self, values: pa.Array, offsets: pa.Array, *, partition: int
    ) -> dict[str, tuple[ColumnSpec, ...]]:
        """See `ValueDecoder.schemas_of`: keyed by schema id and message; payloads are not parsed."""
        found: dict[str, tuple[ColumnSpec, ...]] = {}
        grouped = self._grouped(values, values.to_pylist(), {})
        for (schema_id, where), (message, _positions, _payloads) in grouped.items():
            found[f"id:{schema_id:010d}:{where}"] = message.columns
        return found

    def _grouped(
        self, values: pa.Array, raw: list[bytes | None], errors: dict[int, tuple[str, str]]
    ) -> dict[tuple[int, str], tuple[ProtobufMessage, list[int], list[bytes]]]:
        """The batch's payloads by (schema id, message), errors for what has no message."""
        headers = split_wire(values)
        grouped: dict[tuple[int, str], tuple[ProtobufMessage, list[int], list[bytes]]] = {}

        def add(position: int, schema_id: int, where: tuple[int, ...] | str, payload: bytes) -> None:
            message = self._message_of(schema_id, where)
            if isinstance(message, Exception):
                kind = "unknown_schema" if isinstance(message, SchemaNotFoundError) else "undecodable"
                errors[position] = (kind, f"schema id {schema_id}: {message}")
                return
            key = (schema_id, message.label)
            entry = grouped.get(key)
            if entry is None:
                entry = grouped[key] = (message, [], [])
            entry[1].append(position)
            entry[2].append(payload)

        unprefixed = np.flatnonzero(headers.present & ~headers.prefixed).tolist()
        for position in unprefixed:
            if self._subject is None:
                first = int(headers.first_bytes[position])
                errors[position] = (
                    "wire_format",
                    f"no Confluent wire-format prefix (first byte 0x{first:02x}, expected 0x00 and a "
                    "4-byte schema id): set the mapping's value_subject (and value_message) to read such "
                    "values with its latest schema, or fix the producer's serializer",
                )
                continue
            try:
                latest = self._schemas.latest(self._subject)
            except SchemaNotFoundError as exc:
                errors[position] = ("unknown_schema", f"value_subject {self._subject!r}: {exc}")
                continue
            add(position, latest.schema_id, self._message or (0,), raw[position])  # type: ignore[arg-type]
        ids = headers.schema_ids
        for position in np.flatnonzero(headers.prefixed).tolist():
            value: bytes = raw[position]  # type: ignore[assignment]
            try:
                indexes, start = _message_indexes(value, HEADER_BYTES)
            except ValueError as exc:
                errors[position] = (
                    "wire_format",
                    f"schema id {int(ids[position])}: the message-index path after the wire header is "
                    f"malformed ({exc}): the producer did not use a Confluent Protobuf serializer",
                )
                continue
            add(position, int(ids[position]), indexes, value[start:])
        return grouped

    def _message_of(
        self, schema_id: int, where: tuple[int, ...] | str
    ) -> ProtobufMessage | RecordSchemaError | SchemaNotFoundError:
        key = (schema_id, where)
        found = self._messages.get(key)
        if found is not None:
            return found
        compiled = self._file(schema_id)
        if isinstance(compiled, Exception):
            return compiled
        try:
            descriptor = (
                compiled.message_named(where) if isinstance(where, str) else compiled.message_at(where)
            )
            found = _compile_message(compiled, descriptor)
        except RecordSchemaError as exc:
            found = exc
        self._messages[key] = found
        return found

    def _file(self, schema_id: int) -> ProtobufFile | RecordSchemaError | SchemaNotFoundError:
        found = self._files.get(schema_id)
        if found is not None:
            return found
        try:
            registered = self._schemas.by_id(schema_id)
            found = compile_protobuf_schema(registered, self._schemas)
        except SchemaNotFoundError as exc:
            return exc  # not remembered here: the cache remembers the 404
        except RecordSchemaError as exc:
            found = exc
        self._files[schema_id] = found
        return found


def _message_indexes(value: bytes, start: int) -> tuple[tuple[int, ...], int]:
    """The message-index path at `start` of `value` and where the payload begins."""
    if start < len(value) and value[start] == 0:
        return (0,), start + 1
    count, at = _zigzag(value, start)
    if count <= 0 or count > 100:
        raise ValueError(f"an index count of {count}")
    indexes = []
    for _ in range(count):
        index, at = _zigzag(value, at)
        indexes.append(index)
    return tuple(indexes), at


def _zigzag(value: bytes, at: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if at >= len(value):
            raise ValueError("the value ends inside a varint")
        byte = value[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), at


def _compile_message(compiled: ProtobufFile, descriptor: Any) -> ProtobufMessage:
    label = f"{compiled.registered.label} message {descriptor.full_name}"
    columns = protobuf_columns(descriptor, schema_name=compiled.registered.label)
    readers = tuple(_field_reader(descriptor.fields_by_name[c.name]) for c in columns)
    struct_type = pa.struct([pa.field(c.name, column_arrow_type(c)) for c in columns])
    return ProtobufMessage(label, message_class(descriptor).FromString, columns, readers, struct_type)


def _records(message: ProtobufMessage, parsed: Sequence[Any]) -> pa.StructArray:
    """The parsed messages as one struct array typed by the message's columns, column by column."""
    arrays = [
        pa.array([read(m) for m in parsed], field.type)
        for read, field in zip(message.readers, message.struct_type, strict=True)
    ]
    if not arrays:
        return pa.array([{}] * len(parsed), message.struct_type)
    return pa.StructArray.from_arrays(arrays, fields=list(message.struct_type))


def _field_reader(field: Any) -> Reader:
    """How a field's column value is read from a message (presence, repetition, maps)."""
    name = field.name
    get = operator.attrgetter(name)
    if is_repeated(field):
        if field.type == TYPE_MESSAGE and is_map_entry(field.message_type):
            entry = field.message_type
            key_of = _key_text
            value_of = _element_reader(entry.fields_by_name["value"])
            return lambda m: [(key_of(k), value_of(v)) for k, v in get(m).items()]
        element = _element_reader(field)
        if element is _same:
            return lambda m: list(get(m))
        return lambda m: [element(v) for v in get(m)]
    convert = _element_reader(field)
    if field.has_presence:
        if convert is _same:
            return lambda m: get(m) if m.HasField(name) else None
        return lambda m: convert(get(m)) if m.HasField(name) else None
    if convert is _same:
        return get
    return lambda m: convert(get(m))


def _same(value: object) -> object:
    return value


def _key_text(key: object) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _element_reader(field: Any) -> Callable[[Any], object]:
    """How one value of a field (an element, for repeated fields) becomes its column's value."""
    if field.type == TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda number: names.get(number) or str(number)
    if field.type != TYPE_MESSAGE:
        return _same
    message = field.message_type
    full = message.full_name
    if full == TIMESTAMP:
        return _timestamp
    if full in WRAPPERS:
        return operator.attrgetter("value")
    parts = [(f.name, _field_reader(f)) for f in message.fields]
    return lambda m: {n: read(m) for n, read in parts}


def _timestamp(value: Any) -> int:
    """A `google.protobuf.Timestamp` as microseconds since the epoch (what Arrow's `timestamp[us]` takes)."""
    return int(value.seconds) * 1_000_000 + int(value.nanos) // 1000
