"""A compiled Protobuf wire reader: a message's flat columns read straight from the payload bytes.

One numba pass over a group's payloads walks each message's fields on the wire and, for the columns
the run reads, records each field's raw value (a varint, the bits of a fixed-width value, or the
byte span of a string) per record; the columns are then built with numpy and Arrow kernels
(`protobuf_columns.py`). No Python object is made per record, and the protobuf runtime is not used
per record at all (so it is as fast under protobuf's pure-Python runtime as under upb).

What is not read is still checked, as the runtime's parser checks it: every tag, varint and length
on the wire, UTF-8 in `string` fields, and nested messages field by field (to `MAX_DEPTH`), so a
payload that does not parse is never landed. The walker settles only what it knows exactly: any
record it is not sure of (a malformed or truncated field, a wire type the field does not have, a
group, invalid UTF-8, nesting deeper than `MAX_DEPTH`) is marked `FALLBACK` and left to the general
path (`protobuf.py`: the runtime parses it and names what failed). Protobuf's merge rules hold: the
last value of a field wins, a message field seen twice merges, and setting a oneof member clears the
others (a member set again after another starts afresh).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from kafscale_iceberg.dataplane.json_scan import utf8_length

MAX_DEPTH = 64
"""Nesting the walker checks itself; deeper messages go to the runtime (whose limit is 100)."""
LOOKUP = 64
"""Field numbers below this are found by table; others by a search over the message's fields."""

# Record status.
OK = 0
FALLBACK = 1

# Field kinds: how a field's value is laid on the wire.
VARINT = 0
FIXED64 = 1
FIXED32 = 2
STRING = 3
"""Length-delimited, UTF-8 checked."""
BYTES = 4
MESSAGE = 5
GROUP = 6

# How a read message field is read (`inner`): a Timestamp's seconds and nanos, or a wrapper's value
# (field 1) of one of the kinds above.
TIMESTAMP_FIELDS = -1

_WIRE_OF_KIND = (0, 1, 5, 2, 2, 2, 3)


@njit(cache=True, nogil=True)
def _varint(buf: Any, pos: int, end: int) -> tuple[Any, int]:
    """The varint at `pos` (as int64 bits) and the position after it; -1 when it is cut or too long."""
    result: Any = 0
    shift = 0
    while pos < end and shift < 63:
        byte = np.int64(buf[pos])
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    # The tenth byte (kept out of the loop: a branch there makes the loop several times slower).
    if pos >= end or buf[pos] > 1:
        return 0, -1
    return result | (np.int64(buf[pos]) << 63), pos + 1


@njit(cache=True, nogil=True)
def _fixed(buf: Any, pos: int, width: int) -> Any:
    """`width` little-endian bytes at `pos` as int64 bits."""
    result: Any = 0
    for i in range(width):
        result |= np.int64(buf[pos + i]) << (8 * i)
    return result


@njit(cache=True, nogil=True)
def _utf8_valid(buf: Any, pos: int, end: int) -> bool:
    while pos < end:
        if buf[pos] < 0x80:
            pos += 1
            continue
        step = utf8_length(buf, pos, end)
        if step == 0:
            return False
        pos += step
    return True


@njit(cache=True, nogil=True)
def _length(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """A length prefix at `pos`: (where the content starts, where it ends), or (-1, -1)."""
    size, pos = _varint(buf, pos, end)
    if pos < 0 or size < 0 or size > end - pos:
        return -1, -1
    return pos, pos + size


@njit(cache=True, nogil=True)
def _skip(buf: Any, pos: int, end: int, wire: int) -> int:
    """Past an unknown field's value of wire type `wire`; -1 when malformed (or a group)."""
    if wire == 0:
        return _varint(buf, pos, end)[1]
    if wire == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wire == 5:
        return pos + 4 if pos + 4 <= end else -1
    if wire == 2:
        return _length(buf, pos, end)[1]
    return -1


@njit(cache=True, nogil=True)
def _scalar_end(buf: Any, pos: int, end: int, kind: int, wire: int, repeated: bool) -> int:
    """Past a non-message field's value, checked; -1 when it is not what the field's kind allows."""
    if wire == _WIRE_OF_KIND[kind]:
        if kind == VARINT:
            return _varint(buf, pos, end)[1]
        if kind == FIXED64:
            return pos + 8 if pos + 8 <= end else -1
        if kind == FIXED32:
            return pos + 4 if pos + 4 <= end else -1
        if kind == STRING:
            start, stop = _length(buf, pos, end)
            return stop if start >= 0 and _utf8_valid(buf, start, stop) else -1
        if kind == BYTES:
            return _length(buf, pos, end)[1]
        return -1
    if wire == 2 and repeated and kind <= FIXED32:  # packed
        start, stop = _length(buf, pos, end)
        if start < 0:
            return -1
        if kind == FIXED64:
            return stop if (stop - start) % 8 == 0 else -1
        if kind == FIXED32:
            return stop if (stop - start) % 4 == 0 else -1
        while start < stop:
            start = _varint(buf, start, stop)[1]
            if start < 0:
                return -1
        return stop
    return -1


@njit(cache=True, nogil=True)
def _far_field(message: int, number: int, first: Any, counts: Any, numbers: Any) -> Any:
    """The field of `message` numbered `number` (>= LOOKUP), or -1."""
    found = -1
    for f in range(first[message], first[message] + counts[message]):
        if numbers[f] == number:
            found = f
    return found


@njit(cache=True, nogil=True)
def _tag(buf: Any, pos: int, end: int) -> tuple[int, int, int]:
    """A field's tag at `pos`: (field number, wire type, position after it); position -1 if invalid."""
    tag, pos = _varint(buf, pos, end)
    if pos < 0 or tag < 8 or tag > 0xFFFFFFFF:
        return 0, 0, -1
    return tag >> 3, tag & 7, pos


@njit(cache=True, nogil=True)
def _read_value(
    buf: Any, pos: int, end: int, kind: int, wire: int, values: Any, aux: Any, slot: int, r: int
) -> int:
    """A read scalar field's value into `values`/`aux` (a string's span); the position after it or -1."""
    if wire != _WIRE_OF_KIND[kind] or kind >= MESSAGE:
        return -1
    if kind == VARINT:
        value, pos = _varint(buf, pos, end)
        if pos >= 0:
            values[slot, r] = value
        return pos
    if kind in (FIXED64, FIXED32):
        width = 8 if kind == FIXED64 else 4
        if pos + width > end:
            return -1
        values[slot, r] = _fixed(buf, pos, width)
        return pos + width
    start, stop = _length(buf, pos, end)
    if start < 0 or (kind == STRING and not _utf8_valid(buf, start, stop)):
        return -1
    values[slot, r] = start
    aux[slot, r] = stop
    return stop


@njit(cache=True, nogil=True)
def _read_inner(buf: Any, pos: int, end: int, inner: int, values: Any, aux: Any, slot: int, r: int) -> bool:
    """A read Timestamp (`inner` = TIMESTAMP_FIELDS: seconds, nanos) or wrapper (its value, of kind
    `inner`) message field; fields it does not set keep their values (a message seen twice merges)."""
    while pos < end:
        number, wire, pos = _tag(buf, pos, end)
        if pos < 0:
            return False
        if inner == TIMESTAMP_FIELDS and number <= 2:
            if wire != 0:
                return False
            value, pos = _varint(buf, pos, end)
            if number == 1:
                values[slot, r] = value
            else:
                aux[slot, r] = value
        elif inner != TIMESTAMP_FIELDS and number == 1:
            pos = _read_value(buf, pos, end, inner, wire, values, aux, slot, r)
        else:
            pos = _skip(buf, pos, end, wire)
        if pos < 0:
            return False
    return True


@njit(cache=True, nogil=True)
def scan_messages(
    buf: Any,
    starts: Any,
    ends: Any,
    tables: tuple[Any, Any, Any, Any, Any, Any, Any],
    slots: Any,
    inners: Any,
    oneofs: Any,
    slot_fields: Any,
    oneof_count: int,
) -> tuple[Any, Any, Any, Any]:
    """Walk the messages `buf[starts[i]:ends[i]]` of the tables' message 0 (see the module docstring).

    `tables`: per message its field lookup, first field and field count; per field its number, kind,
    whether repeated, and message (for message fields). Per field of message 0: its slot (-1: not
    read), how a read message field is read (`inners`) and its oneof (-1: none); per slot its field.
    Returns `(status[n], values[slots, n], aux[slots, n], seen[slots, n])`: per read field its raw
    value (varint or fixed bits; a string's start; a Timestamp's seconds), `aux` (a string's end; a
    Timestamp's nanos) and whether it was set.
    """
    lookup, first, counts, numbers, kinds, repeated, subs = tables
    count = starts.shape[0]
    width = slot_fields.shape[0]
    status = np.zeros(count, np.uint8)
    values = np.zeros((width, count), np.int64)
    aux = np.zeros((width, count), np.int64)
    seen = np.zeros((width, count), np.uint8)
    last = np.full(max(oneof_count, 1), -1, np.int64)
    # Nested messages not read are checked on a stack (their message, where they end); level 0 is
    # the record's message, whose fields come first in the tables (field f is its field f).
    messages = np.zeros(MAX_DEPTH, np.int64)
    stops = np.zeros(MAX_DEPTH, np.int64)
    for r in range(count):
        pos = starts[r]
        stops[0] = ends[r]
        level = 0
        last[:] = -1
        while True:
            stop = stops[level]
            if pos == stop:
                if level == 0:
                    break
                level -= 1
                continue
            number, wire, pos = _tag(buf, pos, stop)
            if pos < 0:
                break
            message = messages[level]
            # Inline, not a call: a call taking the tables costs more than the rest of the field.
            f = (
                lookup[message, number]
                if number < LOOKUP
                else _far_field(message, number, first, counts, numbers)
            )
            if f < 0:
                pos = _skip(buf, pos, stop, wire)
                if pos < 0:
                    break
                continue
            slot = slots[f] if level == 0 else -1
            if level == 0 and oneofs[f] >= 0 and last[oneofs[f]] != f:
                last[oneofs[f]] = f  # a member set after another starts afresh
                if slot >= 0:
                    values[slot, r] = 0
                    aux[slot, r] = 0
            kind = kinds[f]
            if kind == MESSAGE:
                start, inner_end = _length(buf, pos, stop) if wire == 2 else (-1, -1)
                if start < 0:
                    pos = -1
                elif slot >= 0:
                    pos = (
                        inner_end
                        if _read_inner(buf, start, inner_end, inners[f], values, aux, slot, r)
                        else -1
                    )
                elif level + 1 < MAX_DEPTH:
                    level += 1
                    messages[level] = subs[f]
                    stops[level] = inner_end
                    pos = start
                else:
                    pos = -1
            elif slot >= 0:
                pos = _read_value(buf, pos, stop, kind, wire, values, aux, slot, r)
            else:
                pos = _scalar_end(buf, pos, stop, kind, wire, repeated[f])
            if pos < 0:
                break
            if slot >= 0:
                seen[slot, r] = 1
        if pos != ends[r]:
            status[r] = FALLBACK
            continue
        for slot in range(width):
            group = oneofs[slot_fields[slot]]
            if group >= 0 and last[group] != slot_fields[slot]:
                seen[slot, r] = 0
    return status, values, aux, seen
