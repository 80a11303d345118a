"""A message's flat columns read from the wire (`protobuf_wire.py`) and built as Arrow arrays.

`WireReader.of` compiles a message descriptor into the walker's tables, or refuses (None) a
message it cannot read exactly, which the general path (`protobuf.py`) then reads: a read column
that is repeated, a map or a nested message other than `Timestamp` and the wrappers; a read enum
that is closed (proto2: an unknown number is not a value there); any message in reach with a
required field (the runtime checks those). Everything else is read here: every scalar type, enums
(by name), `Timestamp`, the wrappers, oneof members, with presence as `domain/protobuf_schemas.py`
writes it down (a field without presence that is not set is its default; one with presence, null).
A record with a `Timestamp` that is not valid (`timestamp_valid`) is left to the general path,
which makes it an `undecodable` dead letter naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.formats import protobuf_wire as wire
from kafscale_iceberg.dataplane.json_scan import gather_spans
from kafscale_iceberg.domain.protobuf_schemas import (
    TIMESTAMP,
    TIMESTAMP_SECONDS,
    TYPE_BOOL,
    TYPE_BYTES,
    TYPE_DOUBLE,
    TYPE_ENUM,
    TYPE_FIXED32,
    TYPE_FIXED64,
    TYPE_FLOAT,
    TYPE_GROUP,
    TYPE_INT32,
    TYPE_INT64,
    TYPE_MESSAGE,
    TYPE_SFIXED32,
    TYPE_SFIXED64,
    TYPE_SINT32,
    TYPE_SINT64,
    TYPE_STRING,
    TYPE_UINT32,
    TYPE_UINT64,
    WRAPPERS,
    is_repeated,
)

_KIND = {
    TYPE_DOUBLE: wire.FIXED64,
    TYPE_FIXED64: wire.FIXED64,
    TYPE_SFIXED64: wire.FIXED64,
    TYPE_FLOAT: wire.FIXED32,
    TYPE_FIXED32: wire.FIXED32,
    TYPE_SFIXED32: wire.FIXED32,
    TYPE_INT64: wire.VARINT,
    TYPE_UINT64: wire.VARINT,
    TYPE_INT32: wire.VARINT,
    TYPE_UINT32: wire.VARINT,
    TYPE_SINT32: wire.VARINT,
    TYPE_SINT64: wire.VARINT,
    TYPE_BOOL: wire.VARINT,
    TYPE_ENUM: wire.VARINT,
    TYPE_STRING: wire.STRING,
    TYPE_BYTES: wire.BYTES,
    TYPE_MESSAGE: wire.MESSAGE,
    TYPE_GROUP: wire.GROUP,
}


@dataclass(frozen=True)
class _Column:
    """How one read column is built from its slot: the scalar type on the wire and its presence."""

    field_type: int
    """`TYPE_*` of the value (a wrapper's wrapped type); `TYPE_MESSAGE` for a Timestamp."""
    presence: bool
    enum_names: dict[int, str] | None
    arrow_type: pa.DataType


@dataclass(frozen=True)
class WireReader:
    """A message compiled for the walker: its tables and how each read column is built."""

    tables: tuple[Any, Any, Any, Any, Any, Any, Any]
    slots: np.ndarray
    inners: np.ndarray
    oneofs: np.ndarray
    slot_fields: np.ndarray
    oneof_count: int
    columns: tuple[_Column, ...]
    struct_type: pa.StructType

    @classmethod
    def of(cls, descriptor: Any, struct_type: pa.StructType) -> WireReader | None:
        """The reader of `struct_type`'s columns (fields of `descriptor` by name), or None when the
        message is not one the walker reads exactly (see the module docstring)."""
        messages = _reachable(descriptor)
        if messages is None:
            return None
        index = {m.full_name: i for i, m in enumerate(messages)}
        fields = [f for m in messages for f in m.fields]
        first = np.cumsum([0] + [len(m.fields) for m in messages])[:-1].astype(np.int64)
        lookup = np.full((len(messages), wire.LOOKUP), -1, np.int64)
        for m, message in enumerate(messages):
            for j, field in enumerate(message.fields):
                if field.number < wire.LOOKUP:
                    lookup[m, field.number] = first[m] + j
        tables = (
            lookup,
            first,
            np.array([len(m.fields) for m in messages], np.int64),
            np.array([f.number for f in fields], np.int64),
            np.array([_KIND[f.type] for f in fields], np.int64),
            np.array([is_repeated(f) for f in fields], np.bool_),
            np.array([index[f.message_type.full_name] if f.message_type else -1 for f in fields], np.int64),
        )
        top = list(descriptor.fields)
        oneof_names = [o.full_name for o in descriptor.oneofs]
        slots = np.full(len(top), -1, np.int64)
        inners = np.full(len(top), -1, np.int64)
        oneofs = np.array(
            [oneof_names.index(f.containing_oneof.full_name) if f.containing_oneof else -1 for f in top],
            np.int64,
        )
        columns: list[_Column] = []
        slot_fields: list[int] = []
        for arrow_field in struct_type:
            field = descriptor.fields_by_name[arrow_field.name]
            column = _column(field, arrow_field.type)
            if column is None:
                return None
            slots[field.index] = len(columns)
            if field.type == TYPE_MESSAGE:
                inner = column.field_type
                inners[field.index] = wire.TIMESTAMP_FIELDS if inner == TYPE_MESSAGE else _KIND[inner]
            columns.append(column)
            slot_fields.append(field.index)
        return cls(
            tables=tables,
            slots=slots,
            inners=inners,
            oneofs=oneofs,
            slot_fields=np.array(slot_fields, np.int64),
            oneof_count=len(oneof_names),
            columns=tuple(columns),
            struct_type=struct_type,
        )

    def read(
        self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> tuple[np.ndarray, pa.StructArray]:
        """The payloads `data[starts[i]:ends[i]]` read: per payload whether it was settled here, and
        the settled ones' records (in order) as one struct array of the reader's columns."""
        status, values, aux, seen = wire.scan_messages(
            data,
            starts,
            ends,
            self.tables,
            self.slots,
            self.inners,
            self.oneofs,
            self.slot_fields,
            self.oneof_count,
        )
        settled = status == wire.OK
        for slot, column in enumerate(self.columns):
            if column.field_type == TYPE_MESSAGE:  # an invalid Timestamp: left to the general path
                valid = timestamp_valid(values[slot], aux[slot].astype(np.int32))
                settled &= valid | (seen[slot] == 0)
        everything = bool(settled.all())
        arrays = []
        for slot, column in enumerate(self.columns):
            raw, more, present = values[slot], aux[slot], seen[slot].astype(bool)
            if not everything:
                raw, more, present = raw[settled], more[settled], present[settled]
            arrays.append(_build(column, data, raw, more, present))
        count = int(settled.sum())
        if not arrays:
            return settled, pa.array([{}] * count, self.struct_type)
        return settled, pa.StructArray.from_arrays(arrays, fields=list(self.struct_type))


def timestamp_valid(seconds: np.ndarray, nanos: np.ndarray) -> np.ndarray:
    """Per value: whether a `Timestamp`'s seconds and nanos (int64 as read) are a valid one
    (`domain/protobuf_schemas.TIMESTAMP_SECONDS`, nanos 0..999999999): only those have microseconds."""
    low, high = TIMESTAMP_SECONDS
    return (seconds >= low) & (seconds <= high) & (nanos >= 0) & (nanos <= 999_999_999)


def _reachable(descriptor: Any) -> list[Any] | None:
    """The message and every message its fields reach (it first); None if one has a required field."""
    found = [descriptor]
    names = {descriptor.full_name}
    at = 0
    while at < len(found):
        for field in found[at].fields:
            if field.is_required:
                return None
            inner = field.message_type
            if inner is not None and inner.full_name not in names:
                names.add(inner.full_name)
                found.append(inner)
        at += 1
    return found


def _column(field: Any, arrow_type: pa.DataType) -> _Column | None:
    """How a read field's column is built, or None when it is not flat (see the module docstring)."""
    if is_repeated(field) or field.type == TYPE_GROUP:
        return None
    if field.type == TYPE_MESSAGE:
        full = field.message_type.full_name
        if full == TIMESTAMP:
            return _Column(TYPE_MESSAGE, True, None, arrow_type)
        if full in WRAPPERS:
            return _Column(WRAPPERS[full], True, None, arrow_type)
        return None
    names = None
    if field.type == TYPE_ENUM:
        if field.enum_type.is_closed:
            return None
        names = {v.number: v.name for v in field.enum_type.values}
    return _Column(field.type, bool(field.has_presence), names, arrow_type)


def _build(
    column: _Column, data: np.ndarray, raw: np.ndarray, more: np.ndarray, present: np.ndarray
) -> pa.Array:
    """One column's array from its slot's raw values (see `protobuf_wire.scan_messages`)."""
    mask = ~present if column.presence and not present.all() else None
    kind = column.field_type
    if kind in (TYPE_STRING, TYPE_BYTES):
        spans = present if column.presence else np.ones(len(raw), np.bool_)  # unset and plain: ""
        offsets, content = gather_spans(data, raw, more, spans)
        validity = None if mask is None else pa.py_buffer(np.packbits(present, bitorder="little"))
        storage = pa.string() if kind == TYPE_STRING else pa.binary()
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(content)]
        return pa.Array.from_buffers(storage, len(raw), buffers).cast(column.arrow_type)
    if kind == TYPE_MESSAGE:  # Timestamp: seconds and nanos
        # Valid values only (see `read`): no wrap-around; nanos: the low 32 bits, as the runtime reads them.
        micros = raw * 1_000_000 + more.astype(np.int32) // 1000
        return pa.array(micros, column.arrow_type, mask=mask)
    if kind == TYPE_ENUM:
        numbers = raw.astype(np.int32)
        distinct, where = np.unique(numbers, return_inverse=True)
        assert column.enum_names is not None
        names = pa.array([column.enum_names.get(n) or str(n) for n in distinct.tolist()], pa.string())
        return names.take(pa.array(where.reshape(-1), pa.int64(), mask=mask))
    numbers = _numbers(kind, raw)
    if kind in (TYPE_UINT64, TYPE_FIXED64):
        return pa.array(numbers, pa.uint64(), mask=mask).cast(column.arrow_type)
    return pa.array(numbers, column.arrow_type, mask=mask)


def _numbers(kind: int, raw: np.ndarray) -> Any:
    """A scalar column's values from raw varints or fixed-width bits (as the runtime reads them)."""
    if kind in (TYPE_INT64, TYPE_SFIXED64):
        return raw
    if kind in (TYPE_INT32, TYPE_SFIXED32):
        return raw.astype(np.int32)  # the low 32 bits, as the runtime takes them
    if kind in (TYPE_UINT32, TYPE_FIXED32):
        return raw & 0xFFFFFFFF
    if kind in (TYPE_SINT32, TYPE_SINT64):
        bits = raw.view(np.uint64) & (0xFFFFFFFF if kind == TYPE_SINT32 else 0xFFFFFFFFFFFFFFFF)
        decoded = ((bits >> np.uint64(1)) ^ (np.uint64(0) - (bits & np.uint64(1)))).view(np.int64)
        return decoded.astype(np.int32) if kind == TYPE_SINT32 else decoded
    if kind == TYPE_BOOL:
        return raw != 0
    if kind == TYPE_DOUBLE:
        return raw.view(np.float64)
    if kind == TYPE_FLOAT:
        return raw.astype(np.uint32).view(np.float32)
    if kind in (TYPE_UINT64, TYPE_FIXED64):  # decimal(20,0), cast by Arrow: every value fits
        return raw.view(np.uint64)
    raise AssertionError(f"no wire reading for protobuf type {kind}")
