"""A compiled Avro skip-validator: whether each payload is exactly one record of its schema.

A reader of an Avro container block cannot tell where one record ends: a record written with another
schema than the one its id names (a mis-registered id, a rebuilt registry) or damaged on the way
leaves bytes over, or takes the next record's, and the block reader (`polars-avro` 0.13) then spins
forever on the block, or silently reads a shifted record. So before a group's payloads are made a
block, one numba pass walks every payload by its schema, skipping values without building them, and
checks what the Avro specification asks of the bytes:

- `int`, `long`, an enum's symbol and a union's branch are zigzag varints of at most 5 (int) or 10
  bytes, an `int` within 32 bits, a symbol or branch within the schema's count;
- `bytes` and `string` lengths are not negative and stay within the payload, a `string` is UTF-8;
  `fixed`, `float` (4) and `double` (8) have their bytes; a `boolean` is the byte 0 or 1;
- a `decimal(P,S)` (on `bytes` or `fixed`) has at most P digits: a reader would put more in the
  column unchecked, and a Parquet decimal(P,S) cannot hold them;
- arrays and maps are blocks of items (a negative count is followed by the block's byte size, which
  must be what its items take), ending with a zero count;
- nothing is left over after the record.

It also notes a record with a map holding a key twice (`DUPLICATE_KEYS`): valid Avro, but the block
reader would land both entries, so such a record is read by fastavro, which keeps the last value.

A payload that passes is exactly one record (the readers then read it as fastavro does, as the
property tests check); one that fails is an `undecodable` dead letter with `reason`, which names the
field, the byte and what is wrong. Named types are put in place from fastavro's parsed schema; records
are their fields one after another, so a schema becomes one flat program (`compile_skip_program`),
made once per schema id, that the walker runs with a stack of its arrays, maps and unions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from kafscale_iceberg.dataplane.json_scan import utf8_valid
from kafscale_iceberg.exceptions import RecordSchemaError

# Program operations, one per value (records have none: their fields follow one another).
BOOLEAN = 0
INT = 1
LONG = 2
FLOAT = 3
DOUBLE = 4
BYTES = 5
STRING = 6
FIXED = 7
"""`arg`: the size."""
ENUM = 8
"""`arg`: the number of symbols."""
BLOCKS = 9
"""An array (or a map: its item is a string key then the value); the item's program follows, to `end`."""
UNION = 10
"""`arg`: the number of branches; each branch follows as a `BRANCH`, the next at the branch's `end`."""
BRANCH = 11
KEY = 12
"""A map's key: a string, compared with the map's other keys."""

# Record status.
OK = 0
ENDS_EARLY = 1
LEFT_OVER = 2
BAD_VARINT = 3
INT_RANGE = 4
BAD_BOOLEAN = 5
BAD_LENGTH = 6
BAD_UTF8 = 7
BAD_INDEX = 8
BAD_COUNT = 9
BLOCK_SIZE = 10
DECIMAL_DIGITS = 11
DUPLICATE_KEYS = 12
"""Not a failure: exactly one record, but a map of it has a key twice. The block reader would land
both entries (Iceberg's maps hold a key once); fastavro keeps the last, as Java's reader does."""

ZERO_WIDTH_ITEMS = 1 << 20
"""Most items an array block of values without bytes (`null`, an empty record) may claim: such a
count costs no bytes, so without a bound a damaged one would keep the readers busy for ever."""

_PROBLEMS = {
    ENDS_EARLY: "the payload ends early",
    BAD_VARINT: "a varint longer than 10 bytes",
    INT_RANGE: "an int beyond 32 bits",
    BAD_BOOLEAN: "a boolean byte that is neither 0 nor 1",
    BAD_LENGTH: "a negative length",
    BAD_UTF8: "a string that is not UTF-8",
    BAD_COUNT: "an impossible block count",
    BLOCK_SIZE: "a block whose byte size is not what its items take",
}
_TENS = [10**digits for digits in range(39)]
_TEN_HIGH = np.array([ten >> 64 for ten in _TENS], np.uint64)
_TEN_LOW = np.array([ten & (2**64 - 1) for ten in _TENS], np.uint64)


@dataclass(frozen=True)
class SkipProgram:
    """A schema as the walker runs it: per operation its kind, argument, end and field name."""

    ops: np.ndarray
    args: np.ndarray
    ends: np.ndarray
    digits: np.ndarray
    """Per `BYTES` or `FIXED` operation that is a decimal, its precision (0: not a decimal)."""
    widths: np.ndarray
    """Per `BLOCKS`: the fewest bytes an item takes (0: `ZERO_WIDTH_ITEMS` bounds its counts)."""
    depth: int
    """Most arrays, maps and unions open at once."""
    fields: tuple[str, ...]

    def check(
        self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Walk the payloads `buf[starts[i]:ends[i]]`: per payload its status (`OK`,
        `DUPLICATE_KEYS` or what is wrong), the operation it failed at and the byte (from the
        payload's start)."""
        return check_records(
            buf,
            starts,
            ends,
            (self.ops, self.args, self.ends, self.digits, self.widths),
            max(self.depth, 1),
        )

    def reason(self, status: int, op: int, at: int, size: int) -> str:
        """What is wrong with a payload of `size` bytes the walk refused (`check`'s three values: the
        status, the operation and the byte where the value it could not read starts)."""
        if status == LEFT_OVER:
            left = size - at
            bytes_left = f"{left} byte{'s' if left > 1 else ''}"
            return f"{bytes_left} left over after the record (it ends at byte {at} of {size})"
        known = 0 <= op < len(self.fields)
        where = f"field `{self.fields[op]}`: " if known and self.fields[op] else ""
        problem = _PROBLEMS.get(status, "malformed")
        if status == BAD_INDEX and known:
            of = "branches" if self.ops[op] == UNION else "symbols"
            problem = f"an index beyond its {self.args[op]} {of}"
        elif status == DECIMAL_DIGITS and known:
            problem = f"a decimal of more digits than its precision {self.digits[op]}"
        return f"{where}{problem} (at byte {at} of {size})"


_PRIMITIVE_OPS: Mapping[str, int | None] = {
    "null": None,
    "boolean": BOOLEAN,
    "int": INT,
    "long": LONG,
    "float": FLOAT,
    "double": DOUBLE,
    "bytes": BYTES,
    "string": STRING,
}
_WIDTHS = {BOOLEAN: 1, INT: 1, LONG: 1, FLOAT: 4, DOUBLE: 8, BYTES: 1, STRING: 1, KEY: 1, ENUM: 1, BLOCKS: 1}


class _Compiler:
    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.ops: list[int] = []
        self.args: list[int] = []
        self.ends: list[int] = []
        self.digits: list[int] = []
        self.fields: list[str] = []
        self.depth = 0
        self.open: list[str] = []

    def emit(self, op: int, arg: int, field: str, digits: int = 0) -> int:
        self.ops.append(op)
        self.args.append(arg)
        self.ends.append(len(self.ops))
        self.digits.append(digits)
        self.fields.append(field)
        return len(self.ops) - 1

    def value(self, schema: object, field: str, depth: int) -> None:
        self.depth = max(self.depth, depth)
        if isinstance(schema, str):
            if schema in _PRIMITIVE_OPS:
                op = _PRIMITIVE_OPS[schema]
                if op is not None:
                    self.emit(op, 0, field)
                return
            if schema in self.open:
                raise RecordSchemaError(f"the recursive type {schema} cannot be read")
            if schema not in self.named:
                raise RecordSchemaError(f"the type {schema} is not defined")
            self.open.append(schema)
            self.value(self.named[schema], field, depth)
            self.open.pop()
            return
        if isinstance(schema, list):
            self.union(schema, field, depth)
            return
        if not isinstance(schema, Mapping):
            raise RecordSchemaError(f"{schema!r} is not an Avro type")
        kind = schema.get("type")
        digits = schema.get("precision") if schema.get("logicalType") == "decimal" else None
        if not isinstance(digits, int) or not 0 < digits <= 38:
            digits = 0
        if kind in ("record", "error"):
            name = str(schema.get("name"))
            self.open.append(name)
            for f in schema.get("fields", ()):
                self.value(f["type"], f"{field}.{f['name']}" if field else str(f["name"]), depth)
            self.open.pop()
        elif kind == "enum":
            self.emit(ENUM, len(schema.get("symbols", ())), field)
        elif kind == "fixed":
            self.emit(FIXED, int(schema["size"]), field, digits)
        elif kind == "bytes":
            self.emit(BYTES, 0, field, digits)
        elif kind in ("array", "map"):
            at = self.emit(BLOCKS, 0, field)
            if kind == "map":
                self.emit(KEY, 0, f"{field} (a key)")
                self.value(schema["values"], f"{field}{{}}", depth + 1)
            else:
                self.value(schema["items"], f"{field}[]", depth + 1)
            self.ends[at] = len(self.ops)
        else:
            self.value(kind, field, depth)

    def union(self, branches: Sequence[object], field: str, depth: int) -> None:
        at = self.emit(UNION, len(branches), field)
        for branch in branches:
            start = self.emit(BRANCH, 0, field)
            self.value(branch, field, depth + 1)
            self.ends[start] = len(self.ops)
        self.ends[at] = len(self.ops)


def compile_skip_program(parsed: Mapping[str, Any] | Sequence[object] | str) -> SkipProgram:
    """The walker's program for fastavro's parsed schema `parsed` (named types by full name). Raises
    `RecordSchemaError` for a recursive schema."""
    named = parsed.get("__named_schemas", {}) if isinstance(parsed, Mapping) else {}
    compiler = _Compiler(named)
    compiler.value(parsed, "", 1)
    ops = np.asarray(compiler.ops, np.int64)
    ends = np.asarray(compiler.ends, np.int64)
    widths = np.zeros(len(ops), np.int64)
    for at in np.flatnonzero(ops == BLOCKS).tolist():
        widths[at] = _least_width(compiler.ops, compiler.args, compiler.ends, at + 1, int(ends[at]))
    return SkipProgram(
        ops=ops,
        args=np.asarray(compiler.args, np.int64),
        ends=ends,
        digits=np.asarray(compiler.digits, np.int64),
        widths=widths,
        depth=compiler.depth,
        fields=tuple(compiler.fields),
    )


def _least_width(ops: list[int], args: list[int], ends: list[int], start: int, stop: int) -> int:
    """The fewest bytes the values of program `[start, stop)` take."""
    width = 0
    at = start
    while at < stop:
        op = ops[at]
        if op == UNION:
            branch = at + 1
            least: list[int] = []
            while branch < ends[at]:
                least.append(_least_width(ops, args, ends, branch + 1, ends[branch]))
                branch = ends[branch]
            width += 1 + min(least, default=0)  # the branch's index, then the branch
            at = ends[at]
            continue
        width += args[at] if op == FIXED else _WIDTHS.get(op, 0)
        at = ends[at]
    return width


@njit(cache=True, nogil=True)
def _long(buf: Any, pos: int, end: int) -> tuple[Any, int, int]:
    """The zigzag varint at `pos`: (value, position after, status). (Not `protobuf_wire._varint`
    and a zigzag: called across modules, it made the whole check twice as slow.)"""
    if pos < end and buf[pos] < 0x80:  # one byte: most lengths, counts, indexes
        first = np.int64(buf[pos])
        return (first >> 1) ^ -(first & 1), pos + 1, OK
    bits: Any = 0
    shift = 0
    while pos < end and shift < 63:
        byte = np.int64(buf[pos])
        pos += 1
        bits |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (bits >> 1) ^ -(bits & 1), pos, OK
        shift += 7
    if pos >= end:
        return 0, pos, ENDS_EARLY
    if buf[pos] > 1:  # the tenth byte holds the 64th bit only
        return 0, pos + 1, BAD_VARINT
    bits |= np.int64(buf[pos]) << 63
    return ((bits >> 1) & 0x7FFF_FFFF_FFFF_FFFF) ^ -(bits & 1), pos + 1, OK


@njit(cache=True, nogil=True)
def _decimal_fits(buf: Any, start: int, stop: int, digits: int) -> bool:
    """Whether the big-endian two's-complement integer `buf[start:stop]` has at most `digits` digits."""
    if start == stop:
        return True
    negative = buf[start] >= 0x80
    pad = 0xFF if negative else 0
    while stop - start > 16 and buf[start] == pad:
        start += 1
    if stop - start > 16 or (stop - start == 16 and (buf[start] >= 0x80) != negative):
        return False  # beyond 128 bits, so beyond 38 digits
    high = np.uint64(0xFFFF_FFFF_FFFF_FFFF) if negative else np.uint64(0)
    low = high
    for i in range(start, stop):
        high = (high << np.uint64(8)) | (low >> np.uint64(56))
        low = (low << np.uint64(8)) | np.uint64(buf[i])
    if negative:  # its magnitude
        low = ~low + np.uint64(1)
        high = ~high + (np.uint64(1) if low == 0 else np.uint64(0))
    fits: bool = high < _TEN_HIGH[digits] or (high == _TEN_HIGH[digits] and low < _TEN_LOW[digits])
    return fits


@njit(cache=True, nogil=True)
def _block_count(buf: Any, pos: int, end: int, width: int) -> tuple[Any, int, int, int]:
    """An array or map block's header at `pos`: (items, where its items end or -1 when its byte size
    is not given, position after, status)."""
    count, pos, status = _long(buf, pos, end)
    if status != OK:
        return 0, -1, pos, status
    stop = -1
    if count < 0:
        if count == -(2**63):
            return 0, -1, pos, BAD_COUNT
        count = -count
        size, pos, status = _long(buf, pos, end)
        if status != OK:
            return 0, -1, pos, status
        if size < 0 or size > end - pos:
            return 0, -1, pos, BLOCK_SIZE
        stop = pos + size
    if (width > 0 and count > (end - pos) // width) or (width == 0 and count > ZERO_WIDTH_ITEMS):
        return 0, -1, pos, BAD_COUNT
    return count, stop, pos, OK


@njit(cache=True, nogil=True)
def _open(frames: Any, level: int, op: int, items: int, stop: int, outer: int, keys: int) -> int:
    """Open an array or map block of `items` (ending at `stop`, -1: unknown) or a union's branch
    (`items` 0) at `level`, the program to end at `outer` after it and a map's keys to start at
    `keys`; the next level."""
    frames[level, 0] = op
    frames[level, 1] = items
    frames[level, 2] = stop
    frames[level, 3] = outer
    frames[level, 4] = keys
    return level + 1


@njit(cache=True, nogil=True)
def _seen_key(buf: Any, start: int, stop: int, key_spans: Any, first: int, last: int) -> bool:
    """Whether `buf[start:stop]` is one of the keys `key_spans[first:last]` (start, end)."""
    size = stop - start
    for k in range(first, last):
        other = key_spans[k, 0]
        if key_spans[k, 1] - other != size:
            continue
        same = True
        for i in range(size):
            if buf[start + i] != buf[other + i]:
                same = False
                break
        if same:
            return True
    return False


@njit(cache=True, nogil=True)
def check_records(
    buf: Any,
    starts: Any,
    ends: Any,
    program: tuple[Any, Any, Any, Any, Any],
    depth: int,
) -> tuple[Any, Any, Any]:
    """See `SkipProgram.check`; `program`: its operations, arguments, ends, digits and widths."""
    ops, args, op_ends, digits, widths = program
    count = starts.shape[0]
    statuses = np.zeros(count, np.uint8)
    failed_ops = np.full(count, -1, np.int64)
    failed_at = np.zeros(count, np.int64)
    program_end = ops.shape[0]
    # Open arrays, maps and unions (`_open`): their operation, items left in the block, where the
    # block's items end (-1: unknown), where the program was to end before it, and where its keys
    # start in `key_spans` (the keys of the maps open, each map's after its outer map's).
    frames = np.zeros((depth, 5), np.int64)
    key_spans = np.zeros((max(int((ends - starts).max()) if count else 0, 1), 2), np.int64)
    for r in range(count):
        keys = 0
        duplicate = False
        pos = starts[r]
        end = ends[r]
        pc = 0
        stop_pc = program_end
        level = 0
        status = OK
        op = -1
        begin = pos
        while True:
            begin = pos
            if pc == stop_pc:
                if level == 0:
                    break
                top = level - 1
                op = frames[top, 0]
                if ops[op] == UNION:
                    level = top
                    pc = op_ends[op]
                    stop_pc = frames[top, 3]
                    continue
                frames[top, 1] -= 1
                if frames[top, 1] > 0:
                    pc = op + 1
                    continue
                if frames[top, 2] >= 0 and frames[top, 2] != pos:
                    status = BLOCK_SIZE
                    break
                items, block_stop, pos, status = _block_count(buf, pos, end, widths[op])
                if status != OK:
                    break
                if items == 0:
                    level = top
                    pc = op_ends[op]
                    stop_pc = frames[top, 3]
                    keys = frames[top, 4]  # a map's keys are forgotten when it ends
                else:
                    frames[top, 1] = items
                    frames[top, 2] = block_stop
                    pc = op + 1
                continue
            op = pc
            kind = ops[op]
            if kind == BOOLEAN:
                if pos >= end:
                    status = ENDS_EARLY
                elif buf[pos] > 1:
                    status = BAD_BOOLEAN
                pos += 1
            elif kind in (INT, LONG, ENUM):
                start = pos
                value, pos, status = _long(buf, pos, end)
                if status == OK and kind == INT and (pos - start > 5 or not -(2**31) <= value < 2**31):
                    status = INT_RANGE
                elif status == OK and kind == ENUM and (value < 0 or value >= args[op]):
                    status = BAD_INDEX
            elif kind in (FLOAT, DOUBLE, FIXED):
                size = 4 if kind == FLOAT else 8 if kind == DOUBLE else args[op]
                if size > end - pos:
                    status = ENDS_EARLY
                elif digits[op] > 0 and not _decimal_fits(buf, pos, pos + size, digits[op]):
                    status = DECIMAL_DIGITS
                pos += size
            elif kind in (BYTES, STRING, KEY):
                size, pos, status = _long(buf, pos, end)
                if status == OK and size < 0:
                    status = BAD_LENGTH
                elif status == OK and size > end - pos:
                    status = ENDS_EARLY
                elif status == OK and kind != BYTES and not utf8_valid(buf, pos, pos + size):
                    status = BAD_UTF8
                elif status == OK and kind == KEY:
                    if _seen_key(buf, pos, pos + size, key_spans, frames[level - 1, 4], keys):
                        duplicate = True
                    key_spans[keys, 0] = pos
                    key_spans[keys, 1] = pos + size
                    keys += 1
                elif status == OK and digits[op] > 0 and not _decimal_fits(buf, pos, pos + size, digits[op]):
                    status = DECIMAL_DIGITS
                pos += size
            elif kind == BLOCKS:
                items, block_stop, pos, status = _block_count(buf, pos, end, widths[op])
                if status == OK and items > 0:
                    level = _open(frames, level, op, items, block_stop, stop_pc, keys)
                    stop_pc = op_ends[op]
                    pc = op + 1
                    continue
            elif kind == UNION:
                index, pos, status = _long(buf, pos, end)
                if status == OK and (index < 0 or index >= args[op]):
                    status = BAD_INDEX
                if status == OK:
                    branch = op + 1
                    for _ in range(index):
                        branch = op_ends[branch]
                    if op_ends[branch] > branch + 1:
                        level = _open(frames, level, op, 0, -1, stop_pc, keys)
                        stop_pc = op_ends[branch]
                        pc = branch + 1
                        continue
            if status != OK:
                break
            pc = op_ends[op]
        if status == OK and pos != end:
            status = LEFT_OVER
            op = -1
            begin = pos
        if status == OK and duplicate:
            statuses[r] = DUPLICATE_KEYS
        if status != OK:
            statuses[r] = status
            failed_ops[r] = op
            failed_at[r] = begin - starts[r]
    return statuses, failed_ops, failed_at
