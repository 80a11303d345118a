"""`value_format: protobuf`: Protobuf in Confluent wire format, schemas from the registry by id.

After the wire header (`wire.py`) comes the message-index path, zig-zag varints: a count, then that
many indexes (the message's place in the schema file: a top-level message, then nested ones); the
single byte `0` stands for `[0]`, the file's first message. Then the payload.

Records are grouped by (schema id, message). When the run's columns of the message are all flat, a
compiled wire reader (`protobuf_reader.py`, `protobuf_wire.py`) reads them from the payload bytes and
builds the struct array without the protobuf runtime; what it refuses (other messages, and single
records it is not sure of) is parsed by the runtime's message class (upb, compiled, where the process
imports protobuf with it: see `docs/benchmarks.md`) and read into one Arrow struct array, column by
column, by readers compiled once per message (`domain/protobuf_schemas.py` gives the columns).
Schemas are compiled by `protobuf_schemas.py`.

Values without the wire prefix are read with `value_subject`'s latest schema and its message
`value_message` (default: the file's first message) when the mapping names a subject, else are
`wire_format` dead letters. A schema id the registry does not have (404) makes its records
`unknown_schema` dead letters; a payload that does not parse, a message index the schema does not
have, or a value its column cannot hold (a `Timestamp` the runtime refuses to convert: see
`domain/protobuf_schemas.py`), `undecodable` ones naming the schema id and message (and the
field). A registry outage raises `RegistryUnavailableError` (the run fails transiently; nothing
is dead-lettered for it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch, DecodedGroup
from kafscale_iceberg.dataplane.formats.protobuf_reader import WireReader, timestamp_valid
from kafscale_iceberg.dataplane.formats.protobuf_schemas import (
    ProtobufFile,
    compile_protobuf_schema,
    message_class,
)
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.dataplane.formats.wire import CONFLUENT_MISSING, HEADER_BYTES, split_wire
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.domain.protobuf_schemas import (
    TIMESTAMP,
    TIMESTAMP_SECONDS,
    TYPE_ENUM,
    TYPE_MESSAGE,
    WRAPPERS,
    is_map_entry,
    is_repeated,
    protobuf_columns,
)
from kafscale_iceberg.domain.record_schemas import SchemaId, schema_id_label
from kafscale_iceberg.domain.runs import ColumnSpec
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES
from kafscale_iceberg.exceptions import RecordSchemaError, SchemaNotFoundError

Reader = Callable[[Any], object]
"""Reads one column's value (as Arrow builds the column's type from it) out of a parsed message."""
Builder = Callable[[Sequence[Any]], pa.Array]
"""Builds one column's array out of a group's parsed messages."""


@dataclass(frozen=True)
class ProtobufMessage:
    """What the decoder keeps per (schema id, message): its class, columns and column readers."""

    label: str
    parse: Callable[[bytes], Any]
    columns: tuple[ColumnSpec, ...]
    builders: tuple[Builder, ...]
    struct_type: pa.StructType
    reader: WireReader | None
    """The compiled wire reader of the read columns, when the message is one it reads exactly."""


class ProtobufDecoder:
    """Decodes Protobuf records in Confluent wire format (see the module docstring)."""

    def __init__(
        self,
        schemas: SchemaCache,
        *,
        subject: str | None = None,
        message: str | None = None,
        columns: Sequence[str] = (),
        part: str = "value",
    ) -> None:
        """`columns`: the run's column names; only those fields are read out of the messages (all
        when empty). The groups still name every column their schema gives. `part`: what is decoded
        (`value`, or `key` for a decoded `key_format`), as messages name its keys."""
        self._part = part
        self._wanted = frozenset(columns)
        self._schemas = schemas
        self._subject = subject
        self._message = message
        self._files: dict[SchemaId, ProtobufFile | RecordSchemaError | SchemaNotFoundError] = {}
        self._messages: dict[tuple[SchemaId, tuple[int, ...] | str], ProtobufMessage | RecordSchemaError] = {}

    def decode(self, values: pa.Array) -> DecodedBatch:
        """See `ValueDecoder.decode`."""
        errors: dict[int, tuple[str, str]] = {}
        groups = []
        layout = self._layout_of(values)
        for message, positions, starts in self._grouped(values, layout, errors).values():
            kept, records = self._read(message, layout, positions, starts, errors)
            if len(kept):
                groups.append(DecodedGroup.of(message, kept, records))
        return DecodedBatch(count=len(values), groups=tuple(groups), errors=errors)

    def _read(
        self,
        message: ProtobufMessage,
        layout: _Layout,
        positions: np.ndarray,
        starts: np.ndarray,
        errors: dict[int, tuple[str, str]],
    ) -> tuple[np.ndarray, pa.StructArray]:
        """A group's records: what the compiled wire reader settles, the rest parsed by the runtime
        (`_parsed`); the positions kept (ascending) and their records."""
        if message.reader is None:
            return self._parsed(message, layout, positions, starts, errors)
        settled, records = message.reader.read(layout.array, starts, layout.ends[positions])
        if settled.all():
            return positions, records
        rest = ~settled
        kept, parsed = self._parsed(message, layout, positions[rest], starts[rest], errors)
        joined = np.concatenate([positions[settled], kept])
        order = np.argsort(joined, kind="stable")
        return joined[order], pa.concat_arrays([records, parsed]).take(pa.array(order))

    def _parsed(
        self,
        message: ProtobufMessage,
        layout: _Layout,
        positions: np.ndarray,
        starts: np.ndarray,
        errors: dict[int, tuple[str, str]],
    ) -> tuple[np.ndarray, pa.StructArray]:
        """Records parsed by the runtime's message class and read column by column (the general path)."""
        ends = layout.ends[positions]
        data = layout.data
        parse = message.parse
        try:
            parsed = [parse(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
            kept = positions
        except (DecodeError, UnicodeDecodeError):
            parsed, kept = self._one_by_one(message, layout, positions, starts, errors)
        try:
            return kept, _records(message, parsed)
        except _VALUE_ERRORS:
            pass
        fitting: list[Any] = []
        fitted: list[int] = []
        for position, one in zip(kept.tolist(), parsed, strict=True):  # which records do not fit
            try:
                _records(message, [one])
            except _VALUE_ERRORS as exc:
                errors[position] = ("undecodable", f"{message.label}: a value does not fit its column: {exc}")
                continue
            fitting.append(one)
            fitted.append(position)
        return np.asarray(fitted, np.int64), _records(message, fitting)

    @staticmethod
    def _one_by_one(
        message: ProtobufMessage,
        layout: _Layout,
        positions: np.ndarray,
        starts: np.ndarray,
        errors: dict[int, tuple[str, str]],
    ) -> tuple[list[Any], np.ndarray]:
        """A group with a payload that does not parse: record by record, the failures noted."""
        parsed: list[Any] = []
        kept: list[int] = []
        for position, start in zip(positions.tolist(), starts.tolist(), strict=True):
            try:
                parsed.append(message.parse(layout.data[start : int(layout.ends[position])]))
            except (DecodeError, UnicodeDecodeError) as exc:
                errors[position] = (
                    "undecodable",
                    f"the payload does not decode with {message.label}: {exc or 'malformed bytes'}",
                )
                continue
            kept.append(position)
        return parsed, np.asarray(kept, np.int64)

    def schemas_of(
        self, values: pa.Array, offsets: pa.Array, *, partition: int
    ) -> dict[str, tuple[ColumnSpec, ...]]:
        """See `ValueDecoder.schemas_of`: keyed by schema id and message; payloads are not parsed."""
        found: dict[str, tuple[ColumnSpec, ...]] = {}
        for (schema_id, where), (message, _positions, _starts) in self._grouped(
            values, self._layout_of(values), {}
        ).items():
            found[f"{self._schemas.order_key(schema_id)}:{where}"] = message.columns
        return found

    def _layout_of(self, values: pa.Array) -> _Layout:
        """Where each value's bytes are (the Glue decoder's: its payloads, inflated)."""
        return _Layout.of(values)

    def _grouped(self, values: pa.Array, layout: _Layout, errors: dict[int, tuple[str, str]]) -> Grouped:
        """The batch's records by (schema id, message): positions (ascending) and where each payload
        starts; errors for what has no message. The common message-index paths (`[0]`, `[n]` for a
        small n) are read for the whole batch at once, the others value by value."""
        headers = split_wire(values)
        pieces: Pieces = {}

        def add(
            schema_id: int, where: tuple[int, ...] | str, positions: np.ndarray, starts: np.ndarray
        ) -> None:
            self._add_piece(pieces, errors, schema_id, where, positions, starts)

        unprefixed = np.flatnonzero(headers.present & ~headers.prefixed)
        self._add_unprefixed(
            pieces, errors, unprefixed, layout.starts[unprefixed], headers.first_bytes, CONFLUENT_MISSING
        )
        prefixed = np.flatnonzero(headers.prefixed)
        ids = headers.schema_ids[prefixed]
        at = layout.starts[prefixed] + HEADER_BYTES
        room = layout.ends[prefixed] - at
        data = layout.array
        last = max(len(data) - 1, 0)
        data = data if len(data) else np.zeros(1, np.uint8)
        byte0 = np.where(room > 0, data[np.minimum(at, last)].astype(np.int64), -1)
        byte1 = np.where(room > 1, data[np.minimum(at + 1, last)].astype(np.int64), -1)
        only_first = byte0 == 0  # the single byte 0: `[0]`
        one_index = (byte0 == 2) & (byte1 >= 0) & (byte1 < 0x80)  # count 1, one small index
        code = np.where(only_first, 0, np.where(one_index, byte1 + 1, -1))
        fast = code >= 0
        keys = ids[fast] * 256 + code[fast]
        for key in np.unique(keys).tolist():
            chosen = np.flatnonzero(fast)[keys == key]
            schema_id, small = divmod(key, 256)
            path: tuple[int, ...] = (0,) if small == 0 else (((small - 1) >> 1) ^ -((small - 1) & 1),)
            add(schema_id, path, prefixed[chosen], at[chosen] + (1 if small == 0 else 2))
        for index in np.flatnonzero(~fast).tolist():
            position = int(prefixed[index])
            schema_id = int(ids[index])
            try:
                path, start = _message_indexes(layout.data, int(at[index]), int(layout.ends[position]))
            except ValueError as exc:
                errors[position] = (
                    "wire_format",
                    f"schema id {schema_id}: the message-index path after the wire header is "
                    f"malformed ({exc}): the producer did not use a Confluent Protobuf serializer",
                )
                continue
            add(schema_id, path, np.asarray([position]), np.asarray([start]))
        return _assembled(pieces)

    def _add_piece(
        self,
        pieces: Pieces,
        errors: dict[int, tuple[str, str]],
        schema_id: SchemaId,
        where: tuple[int, ...] | str,
        positions: np.ndarray,
        starts: np.ndarray,
    ) -> None:
        """Records of one (schema id, message) added to `pieces`, or to `errors` naming why not."""
        message = self._message_of(schema_id, where)
        if isinstance(message, Exception):
            kind = "unknown_schema" if isinstance(message, SchemaNotFoundError) else "undecodable"
            for position in positions.tolist():
                errors[position] = (kind, f"{schema_id_label(schema_id)}: {message}")
            return
        entry = pieces.setdefault((schema_id, message.label), (message, [], []))
        entry[1].append(positions)
        entry[2].append(starts)

    def _add_unprefixed(
        self,
        pieces: Pieces,
        errors: dict[int, tuple[str, str]],
        unprefixed: np.ndarray,
        starts: np.ndarray,
        first_bytes: np.ndarray,
        missing: str,
    ) -> None:
        """Values without the header: read with `value_subject`'s latest schema and `value_message`,
        or `wire_format` dead letters (`missing`: the header expected, formatted with `first`)."""
        if not len(unprefixed):
            return
        if self._subject is None:
            for position in unprefixed.tolist():
                errors[position] = (
                    "wire_format",
                    f"{missing.format(first=int(first_bytes[position]))}: set the mapping's "
                    f"{self._part}_subject (and {self._part}_message) to read such {self._part}s with its "
                    "latest schema, or fix the producer's serializer",
                )
            return
        try:
            latest = self._schemas.latest(self._subject)
        except SchemaNotFoundError as exc:
            for position in unprefixed.tolist():
                errors[position] = ("unknown_schema", f"{self._part}_subject {self._subject!r}: {exc}")
            return
        self._add_piece(pieces, errors, latest.schema_id, self._message or (0,), unprefixed, starts)

    def _message_of(
        self, schema_id: SchemaId, where: tuple[int, ...] | str
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
            found = _compile_message(compiled, descriptor, self._wanted, key=self._part == "key")
        except RecordSchemaError as exc:
            found = exc
        self._messages[key] = found
        return found

    def _file(self, schema_id: SchemaId) -> ProtobufFile | RecordSchemaError | SchemaNotFoundError:
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


Pieces = dict[tuple[SchemaId, str], tuple[ProtobufMessage, list[np.ndarray], list[np.ndarray]]]
"""A batch's records as they are grouped: (schema id, message label) -> message, position and start parts."""
Grouped = dict[tuple[SchemaId, str], tuple[ProtobufMessage, np.ndarray, np.ndarray]]
"""A batch's records by (schema id, message label): the message, positions (ascending), payload starts."""


def _assembled(pieces: Pieces) -> Grouped:
    """`pieces` with each group's parts joined, in position order."""
    grouped = {}
    for key, (message, position_parts, start_parts) in pieces.items():
        positions = np.concatenate(position_parts).astype(np.int64)
        starts = np.concatenate(start_parts).astype(np.int64)
        order = np.argsort(positions, kind="stable")
        grouped[key] = (message, positions[order], starts[order])
    return grouped


@dataclass(frozen=True)
class _Layout:
    """A binary array's values as one bytes object: each value is `data[starts[i]:ends[i]]`."""

    data: bytes
    array: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, values: pa.Array) -> _Layout:
        if pa.types.is_large_binary(values.type):
            values = values.cast(pa.binary())
        count = len(values)
        offsets_buffer, data_buffer = values.buffers()[1], values.buffers()[2]
        offsets = (
            np.frombuffer(offsets_buffer, np.int32, count + 1, values.offset * 4).astype(np.int64)
            if count
            else np.zeros(1, np.int64)
        )
        data = data_buffer.to_pybytes() if data_buffer is not None else b""
        return cls(data, np.frombuffer(data, np.uint8), offsets[:-1], offsets[1:])


def _message_indexes(value: bytes, start: int, end: int) -> tuple[tuple[int, ...], int]:
    """The message-index path at `start` of `value` (which ends at `end`) and where the payload begins."""
    if start < end and value[start] == 0:
        return (0,), start + 1
    count, at = _zigzag(value, start, end)
    if count <= 0 or count > 100:
        raise ValueError(f"an index count of {count}")
    indexes = []
    for _ in range(count):
        index, at = _zigzag(value, at, end)
        indexes.append(index)
    return tuple(indexes), at


def _zigzag(value: bytes, at: int, end: int) -> tuple[int, int]:
    result, at = read_varint(value, at, end)
    return (result >> 1) ^ -(result & 1), at


def read_varint(value: bytes, at: int, end: int, *, most_bytes: int = 10) -> tuple[int, int]:
    """The unsigned varint at `at` of `value` (which ends at `end`) and where the bytes after it start;
    `ValueError` when it runs past `end` or is longer than `most_bytes`."""
    result = shift = 0
    while True:
        if at >= end:
            raise ValueError("the value ends inside a varint")
        byte = value[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, at
        shift += 7
        if shift >= 7 * most_bytes:
            raise ValueError(f"a varint longer than {most_bytes} bytes")


def _compile_message(
    compiled: ProtobufFile, descriptor: Any, wanted: frozenset[str], *, key: bool = False
) -> ProtobufMessage:
    """`descriptor` ready to read with; a key's fields named like base fields are columns too (they
    become `key_<field>`: a `google.protobuf.StringValue` key's `value` is `key_value`)."""
    label = f"{compiled.registered.label} message {descriptor.full_name}"
    reserved = () if key else BASE_FIELD_NAMES
    columns = protobuf_columns(descriptor, schema_name=compiled.registered.label, reserved=reserved)
    read = [c for c in columns if not wanted or c.name in wanted]
    struct_type = pa.struct([pa.field(c.name, column_arrow_type(c)) for c in read])
    builders = tuple(
        _column_builder(descriptor.fields_by_name[c.name], field.type)
        for c, field in zip(read, struct_type, strict=True)
    )
    reader = WireReader.of(descriptor, struct_type)
    return ProtobufMessage(
        label, message_class(descriptor).FromString, columns, builders, struct_type, reader
    )


_VALUE_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, OverflowError)
"""What building a column raises for a value it cannot hold."""


def _records(message: ProtobufMessage, parsed: Sequence[Any]) -> pa.StructArray:
    """The parsed messages as one struct array typed by the message's columns, column by column;
    a value a column cannot hold raises `ValueError` naming the field."""
    arrays = []
    for build, field in zip(message.builders, message.struct_type, strict=True):
        try:
            arrays.append(build(parsed))
        except _VALUE_ERRORS as exc:
            raise ValueError(f"field {field.name}: {exc}") from exc
    if not arrays:
        return pa.array([{}] * len(parsed), message.struct_type)
    return pa.StructArray.from_arrays(arrays, fields=list(message.struct_type))


def _column_builder(field: Any, arrow_type: pa.DataType) -> Builder:
    """How a top-level field's column is built: a singular `Timestamp` from its seconds and nanos
    in bulk (numpy), every other field value by value (`_field_reader`)."""
    if not is_repeated(field) and field.type == TYPE_MESSAGE and field.message_type.full_name == TIMESTAMP:
        name = field.name
        get = operator.attrgetter(name)
        parts = operator.attrgetter("seconds", "nanos")

        def timestamps(parsed: Sequence[Any]) -> pa.Array:
            pairs = np.array([parts(get(m)) for m in parsed], np.int64).reshape(len(parsed), 2)
            missing = np.array([not m.HasField(name) for m in parsed], bool)
            invalid = np.flatnonzero(~missing & ~timestamp_valid(pairs[:, 0], pairs[:, 1]))
            if invalid.size:
                _timestamp(get(parsed[int(invalid[0])]))  # raises, as the runtime words it
            micros = pairs[:, 0] * 1_000_000 + pairs[:, 1] // 1000
            return pa.array(micros, arrow_type, mask=missing if missing.any() else None)

        return timestamps
    read = _field_reader(field)
    return lambda parsed: pa.array([read(m) for m in parsed], arrow_type)


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
    """A `google.protobuf.Timestamp` as microseconds since the epoch (what Arrow's `timestamp[us]` takes);
    `ValueError` (the runtime's, from `ToDatetime`) for one that is not valid (`TIMESTAMP_SECONDS`)."""
    seconds, nanos = int(value.seconds), int(value.nanos)
    low, high = TIMESTAMP_SECONDS
    if not (low <= seconds <= high and 0 <= nanos <= 999_999_999):
        check = getattr(value, "ToDatetime", None)  # the runtime's check, in its words
        if check is not None:
            check()
        raise ValueError(f"Timestamp is not valid: seconds {seconds}, nanos {nanos}")
    return seconds * 1_000_000 + nanos // 1000
