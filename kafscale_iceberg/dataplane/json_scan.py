"""A compiled JSON scanner: for every record value, where each mapping column's top-level value is.

One numba pass over all values of a batch validates each value as JSON (RFC 8259 grammar, UTF-8 in
strings, escapes) and, for the top-level keys named by the mapping's columns, records the kind of
value found and the byte span of its token. No Python object is made per record; the columns are
then built with Arrow kernels from the spans (`values.ValueScanner`).

Anything the scanner does not settle exactly is left to the per-record Python path (msgspec, then
the standard library with Go's replacement rules), by marking the record `FALLBACK`: a syntax error
(the Python path names it), invalid UTF-8, a key with escapes, a top-level value that is not an
object, nesting deeper than `MAX_DEPTH`. Duplicate keys: the last one wins, as in Go.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

MAX_DEPTH = 256

# Record status.
OK = 0
NO_VALUE = 1
FALLBACK = 2

# Value kinds per (record, column).
MISSING = 0
NULL = 1
TRUE = 2
FALSE = 3
INTEGER = 4  # integer grammar, at most 18 digits: always fits int64
NUMBER = 5  # any other number: fraction, exponent or 19+ digits
STRING = 6  # span = the content between the quotes, no escapes
ESCAPED_STRING = 7  # span = the content between the quotes, with escapes
CONTAINER = 8  # object or array; only the kind is recorded

_FAIL = -1

# Parser states.
_KEY_OR_END = 0
_KEY = 1
_COLON = 2
_VALUE = 3
_ELEMENT_OR_END = 4
_AFTER_VALUE = 5
_OBJECT = 1
_ARRAY = 2


@njit(cache=True, nogil=True)
def _skip_ws(buf: Any, pos: int, end: int) -> int:
    while pos < end:
        c = buf[pos]
        # Whitespace is 0x20, 0x0A, 0x0D, 0x09: everything above 0x20 ends it at once.
        if c > 0x20 or (c != 0x20 and c != 0x0A and c != 0x0D and c != 0x09):  # noqa: PLR1714
            break
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def utf8_length(buf: Any, pos: int, end: int) -> int:
    """Length of the valid UTF-8 sequence at `pos` (lead byte >= 0x80), or 0 if invalid."""
    c = buf[pos]
    if 0xC2 <= c <= 0xDF:
        need, low, high = 1, 0x80, 0xBF
    elif c == 0xE0:
        need, low, high = 2, 0xA0, 0xBF
    elif 0xE1 <= c <= 0xEC or c in (0xEE, 0xEF):
        need, low, high = 2, 0x80, 0xBF
    elif c == 0xED:
        need, low, high = 2, 0x80, 0x9F
    elif c == 0xF0:
        need, low, high = 3, 0x90, 0xBF
    elif 0xF1 <= c <= 0xF3:
        need, low, high = 3, 0x80, 0xBF
    elif c == 0xF4:
        need, low, high = 3, 0x80, 0x8F
    else:
        return 0
    if pos + need >= end:
        return 0
    second = buf[pos + 1]
    if second < low or second > high:
        return 0
    for i in range(2, need + 1):
        b = buf[pos + i]
        if b < 0x80 or b > 0xBF:
            return 0
    return need + 1


@njit(cache=True, nogil=True)
def utf8_valid(buf: Any, pos: int, end: int) -> bool:
    """Whether `buf[pos:end]` is valid UTF-8."""
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
def _is_hex(c: int) -> bool:
    return (0x30 <= c <= 0x39) or (0x41 <= c <= 0x46) or (0x61 <= c <= 0x66)


@njit(cache=True, nogil=True)
def _string_end(buf: Any, pos: int, end: int) -> tuple[int, bool]:
    """`pos` is at an opening quote; returns (position after the closing quote or _FAIL, escaped)."""
    pos += 1
    escaped = False
    while pos < end:
        c = buf[pos]
        if 0x23 <= c <= 0x7F and c != 0x5C:  # the usual byte: printable ASCII, no quote or backslash
            pos += 1
            continue
        if c == 0x22:
            return pos + 1, escaped
        if c == 0x5C:
            escaped = True
            if pos + 1 >= end:
                return _FAIL, escaped
            e = buf[pos + 1]
            if e == 0x75:  # \uXXXX
                if pos + 6 > end:
                    return _FAIL, escaped
                for i in range(2, 6):
                    if not _is_hex(buf[pos + i]):
                        return _FAIL, escaped
                pos += 6
            elif e in (0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74):
                pos += 2
            else:
                return _FAIL, escaped
        elif c < 0x20:
            return _FAIL, escaped
        elif c < 0x80:
            pos += 1
        else:
            n = utf8_length(buf, pos, end)
            if n == 0:
                return _FAIL, escaped
            pos += n
    return _FAIL, escaped


@njit(cache=True, nogil=True)
def _number_end(buf: Any, pos: int, end: int) -> tuple[int, bool]:
    """`pos` is at `-` or a digit; returns (position after the number or _FAIL, is a short integer)."""
    if buf[pos] == 0x2D:
        pos += 1
    if pos >= end:
        return _FAIL, False
    digits = 0
    if buf[pos] == 0x30:
        pos += 1
        digits = 1
    elif 0x31 <= buf[pos] <= 0x39:
        while pos < end and 0x30 <= buf[pos] <= 0x39:
            pos += 1
            digits += 1
    else:
        return _FAIL, False
    integer = digits <= 18
    if pos < end and buf[pos] == 0x2E:
        integer = False
        pos += 1
        start = pos
        while pos < end and 0x30 <= buf[pos] <= 0x39:
            pos += 1
        if pos == start:
            return _FAIL, False
    if pos < end and (buf[pos] == 0x65 or buf[pos] == 0x45):
        integer = False
        pos += 1
        if pos < end and (buf[pos] == 0x2B or buf[pos] == 0x2D):
            pos += 1
        start = pos
        while pos < end and 0x30 <= buf[pos] <= 0x39:
            pos += 1
        if pos == start:
            return _FAIL, False
    return pos, integer


@njit(cache=True, nogil=True)
def _integer_value(buf: Any, start: int, end: int) -> int:
    """The value of an integer token of at most 18 digits (so it cannot overflow)."""
    negative = buf[start] == 0x2D
    pos = start + 1 if negative else start
    value = 0
    while pos < end:
        value = value * 10 + (buf[pos] - 0x30)
        pos += 1
    return -value if negative else value


@njit(cache=True, nogil=True)
def _literal_end(buf: Any, pos: int, end: int, word: Any) -> int:
    n: int = word.shape[0]
    if pos + n > end:
        return _FAIL
    for i in range(n):
        if buf[pos + i] != word[i]:
            return _FAIL
    return pos + n


@njit(cache=True, nogil=True)
def _match_key(buf: Any, start: int, stop: int, names: Any, name_offsets: Any) -> int:
    length = stop - start
    for column in range(name_offsets.shape[0] - 1):
        a = name_offsets[column]
        if name_offsets[column + 1] - a != length:
            continue
        same = True
        for i in range(length):
            if buf[start + i] != names[a + i]:
                same = False
                break
        if same:
            return column
    return -1


@njit(cache=True, nogil=True)
def scan_values(
    buf: Any, starts: Any, ends: Any, names: Any, name_offsets: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """Scan values `buf[starts[i]:ends[i]]` (a start of -1 = null value) for the named top-level keys.

    `names` holds the column names' UTF-8 bytes back to back, `name_offsets` their boundaries.
    Returns `(status[n], kinds[c, n], token_starts[c, n], token_ends[c, n], integers[c, n])`;
    `integers` holds the value of `INTEGER` tokens.
    """
    count = starts.shape[0]
    columns = name_offsets.shape[0] - 1
    status = np.zeros(count, np.uint8)
    # Column-major: each column's values are contiguous for the Arrow kernels that follow.
    kinds = np.zeros((columns, count), np.uint8)
    token_starts = np.zeros((columns, count), np.int64)
    token_ends = np.zeros((columns, count), np.int64)
    integers = np.zeros((columns, count), np.int64)
    stack = np.zeros(MAX_DEPTH, np.uint8)
    word_true = np.array([0x74, 0x72, 0x75, 0x65], np.uint8)
    word_false = np.array([0x66, 0x61, 0x6C, 0x73, 0x65], np.uint8)
    word_null = np.array([0x6E, 0x75, 0x6C, 0x6C], np.uint8)
    for r in range(count):
        start = starts[r]
        end = ends[r]
        if start < 0 or start == end:
            status[r] = NO_VALUE
            continue
        pos = _skip_ws(buf, start, end)
        if pos >= end or buf[pos] != 0x7B:
            status[r] = FALLBACK
            continue
        pos += 1
        depth = 1
        stack[0] = _OBJECT
        state = _KEY_OR_END
        column = -1
        failed = False
        while True:
            pos = _skip_ws(buf, pos, end)
            if pos >= end:
                failed = True
                break
            c = buf[pos]
            if state in (_KEY_OR_END, _KEY):
                if c == 0x7D and state == _KEY_OR_END:
                    depth -= 1
                    pos += 1
                    state = _AFTER_VALUE
                elif c == 0x22:
                    key_end, escaped = _string_end(buf, pos, end)
                    if key_end == _FAIL or (escaped and depth == 1):
                        failed = True
                        break
                    if depth == 1:
                        column = _match_key(buf, pos + 1, key_end - 1, names, name_offsets)
                    pos = key_end
                    state = _COLON
                else:
                    failed = True
                    break
            elif state == _COLON:
                if c != 0x3A:
                    failed = True
                    break
                pos += 1
                state = _VALUE
            elif state in (_VALUE, _ELEMENT_OR_END):
                if state == _ELEMENT_OR_END and c == 0x5D:
                    depth -= 1
                    pos += 1
                    state = _AFTER_VALUE
                else:
                    was_top = depth == 1
                    top_member = was_top and column >= 0
                    kind = MISSING
                    value_start = pos
                    if c == 0x22:
                        value_end, escaped = _string_end(buf, pos, end)
                        if value_end == _FAIL:
                            failed = True
                            break
                        kind = ESCAPED_STRING if escaped else STRING
                        pos = value_end
                        if top_member:
                            kinds[column, r] = kind
                            token_starts[column, r] = value_start + 1
                            token_ends[column, r] = value_end - 1
                        state = _AFTER_VALUE
                    elif c in (0x7B, 0x5B):
                        if depth >= MAX_DEPTH:
                            failed = True
                            break
                        if top_member:
                            kinds[column, r] = CONTAINER
                            token_starts[column, r] = value_start
                            token_ends[column, r] = value_start
                        stack[depth] = _OBJECT if c == 0x7B else _ARRAY
                        depth += 1
                        pos += 1
                        state = _KEY_OR_END if c == 0x7B else _ELEMENT_OR_END
                    else:
                        if c == 0x74:
                            value_end = _literal_end(buf, pos, end, word_true)
                            kind = TRUE
                        elif c == 0x66:
                            value_end = _literal_end(buf, pos, end, word_false)
                            kind = FALSE
                        elif c == 0x6E:
                            value_end = _literal_end(buf, pos, end, word_null)
                            kind = NULL
                        elif c == 0x2D or (0x30 <= c <= 0x39):
                            value_end, integer = _number_end(buf, pos, end)
                            kind = INTEGER if integer else NUMBER
                        else:
                            value_end = _FAIL
                        if value_end == _FAIL:
                            failed = True
                            break
                        pos = value_end
                        if top_member:
                            kinds[column, r] = kind
                            token_starts[column, r] = value_start
                            token_ends[column, r] = value_end
                            if kind == INTEGER:
                                integers[column, r] = _integer_value(buf, value_start, value_end)
                        state = _AFTER_VALUE
                    if was_top:
                        column = -1
            else:  # _AFTER_VALUE
                container = stack[depth - 1]
                if c == 0x2C:
                    pos += 1
                    state = _KEY if container == _OBJECT else _VALUE
                elif (c == 0x7D and container == _OBJECT) or (c == 0x5D and container == _ARRAY):
                    depth -= 1
                    pos += 1
                else:
                    failed = True
                    break
            if depth == 0:
                # The top-level object closed: only whitespace may follow.
                if _skip_ws(buf, pos, end) != end:
                    failed = True
                break
        if failed:
            status[r] = FALLBACK
            for k in range(columns):
                kinds[k, r] = MISSING
    return status, kinds, token_starts, token_ends, integers


@njit(cache=True, nogil=True)
def gather_spans(buf: Any, starts: Any, ends: Any, valid: Any) -> tuple[Any, Any]:
    """Arrow binary buffers (int32 offsets, data) of `buf[starts[i]:ends[i]]` where `valid[i]`, else empty."""
    count = starts.shape[0]
    offsets = np.zeros(count + 1, np.int32)
    total = 0
    for i in range(count):
        if valid[i]:
            total += ends[i] - starts[i]
        offsets[i + 1] = total
    data = np.empty(total, np.uint8)
    at = 0
    for i in range(count):
        if valid[i]:
            for j in range(starts[i], ends[i]):
                data[at] = buf[j]
                at += 1
    return offsets, data
