"""The compiled record walker: Kafka v2 records of many batches -> column arrays, no object per record.

One numba kernel, compiled on first use and cached on disk (`cache=True`; numba honours
`NUMBA_CACHE_DIR`): `scan_records` walks the uncompressed record sections of every batch of a
segment, laid out in one byte buffer, and returns the offset and timestamp of every record and the
positions and lengths of every key, value and header. The caller copies those slices into Arrow.

The kernels never raise: a malformed record stops the walk and is reported as a `ScanError`
code with the buffer position and the value found there, which the caller turns into a
`SegmentFormatError` naming the `.kfs` position. Everything here is bounds-checked against the batch
and record ends, so no input can read outside the buffer or loop without consuming bytes.

Setting `NUMBA_DISABLE_JIT=1` runs the same code as plain Python (slowly): the benchmark uses that
to measure what the compiled path buys.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import numpy as np
from numba import njit

# A record is at least attributes, timestampDelta, offsetDelta, keyLength, valueLength and
# headerCount: six one-byte fields, after its length varint.
MIN_RECORD_BODY = 6
MIN_RECORD_SIZE = 1 + MIN_RECORD_BODY
# A header is at least its key length and value length varints.
MIN_HEADER_SIZE = 2

_TRUNCATED = -1
_OVERLONG = -2


class ScanError(IntEnum):
    """Why `scan_records` stopped; `OK` when every batch was walked completely."""

    OK = 0
    VARINT_TRUNCATED = 1
    VARINT_OVERLONG = 2
    RECORD_LENGTH = 3
    OFFSET_DELTA = 4
    KEY_LENGTH = 5
    VALUE_LENGTH = 6
    HEADER_COUNT = 7
    HEADER_KEY_LENGTH = 8
    HEADER_VALUE_LENGTH = 9
    RECORD_SIZE_MISMATCH = 10
    MISSING_RECORDS = 11
    TRAILING_BYTES = 12
    TIMESTAMP_OVERFLOW = 13


@njit(cache=True, nogil=True)
def _read_varint(buf: Any, pos: int, end: int, bits: int) -> tuple[int, int]:
    """Zig-zag varint of at most `bits` bits at `pos`; returns (value, next position).

    The next position is `_TRUNCATED` when the bytes end before the varint does and `_OVERLONG`
    when it has more bytes, or a last byte with more bits, than `bits` allows.
    """
    result = 0
    shift = 0
    while True:
        if pos >= end:
            return 0, _TRUNCATED
        byte = int(buf[pos])
        pos += 1
        if shift + 7 > bits and (byte >> (bits - shift)) != 0:
            return 0, _OVERLONG
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    # Logical shift right by one on a 64-bit pattern, then undo the zig-zag.
    return ((result >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(result & 1), pos


@njit(cache=True, nogil=True)
def scan_records(
    buf: Any,
    starts: Any,
    ends: Any,
    counts: Any,
    base_offsets: Any,
    base_timestamps: Any,
    max_timestamps: Any,
    log_append_time: Any,
    last_offset_deltas: Any,
    total_records: int,
) -> tuple[Any, ...]:
    """Walk the records of every batch; batch `b` occupies `buf[starts[b]:ends[b]]`.

    Returns `(error, error_batch, error_position, found, offsets, timestamps, key_pos, key_len,
    value_pos, value_len, header_ends, header_key_pos, header_key_len, header_value_pos,
    header_value_len)`. Lengths are -1 for null. `header_ends[i + 1]` is the number of
    headers of records `0..i`. On error only the error fields are meaningful.
    """
    offsets = np.empty(total_records, np.int64)
    timestamps = np.empty(total_records, np.int64)
    key_pos = np.empty(total_records, np.int64)
    key_len = np.empty(total_records, np.int64)
    value_pos = np.empty(total_records, np.int64)
    value_len = np.empty(total_records, np.int64)
    header_ends = np.zeros(total_records + 1, np.int64)
    capacity = 16
    hk_pos = np.empty(capacity, np.int64)
    hk_len = np.empty(capacity, np.int64)
    hv_pos = np.empty(capacity, np.int64)
    hv_len = np.empty(capacity, np.int64)
    n_headers = 0
    r = 0
    error = 0
    err_batch = 0
    err_pos = 0
    found = 0
    for b in range(starts.shape[0]):
        pos = starts[b]
        end = ends[b]
        base_offset = base_offsets[b]
        base_ts = base_timestamps[b]
        last_delta = last_offset_deltas[b]
        previous_delta = -1
        err_batch = b
        for i in range(counts[b]):
            if pos >= end:
                error = ScanError.MISSING_RECORDS
                err_pos = pos
                found = i
                break
            record_start = pos
            length, pos = _read_varint(buf, pos, end, 32)
            if pos < 0:
                error = ScanError.VARINT_TRUNCATED if pos == _TRUNCATED else ScanError.VARINT_OVERLONG
                err_pos = record_start
                break
            if length < MIN_RECORD_BODY or length > end - pos:
                error = ScanError.RECORD_LENGTH
                err_pos = record_start
                found = length
                break
            record_end = pos + length
            pos += 1  # attributes: unused by Kafka v2 records
            field = pos
            ts_delta, pos = _read_varint(buf, pos, record_end, 64)
            if pos < 0:
                error = ScanError.VARINT_TRUNCATED if pos == _TRUNCATED else ScanError.VARINT_OVERLONG
                err_pos = field
                break
            field = pos
            offset_delta, pos = _read_varint(buf, pos, record_end, 32)
            if pos < 0:
                error = ScanError.VARINT_TRUNCATED if pos == _TRUNCATED else ScanError.VARINT_OVERLONG
                err_pos = field
                break
            if offset_delta <= previous_delta or offset_delta > last_delta:
                error = ScanError.OFFSET_DELTA
                err_pos = field
                found = offset_delta
                break
            previous_delta = offset_delta
            if log_append_time[b]:
                timestamp = max_timestamps[b]
            else:
                timestamp = base_ts + ts_delta
                # Two's-complement overflow: the sum's sign differs from both operands' signs.
                if ((base_ts ^ timestamp) & (ts_delta ^ timestamp)) < 0:
                    error = ScanError.TIMESTAMP_OVERFLOW
                    err_pos = field
                    found = ts_delta
                    break
            field = pos
            klen, pos = _read_varint(buf, pos, record_end, 32)
            if pos < 0:
                error = ScanError.VARINT_TRUNCATED if pos == _TRUNCATED else ScanError.VARINT_OVERLONG
                err_pos = field
                break
            if klen < -1 or klen > record_end - pos:
                error = ScanError.KEY_LENGTH
                err_pos = field
                found = klen
                break
            key_pos[r] = pos
            key_len[r] = klen
            if klen > 0:
                pos += klen
            field = pos
            vlen, pos = _read_varint(buf, pos, record_end, 32)
            if pos < 0:
                error = ScanError.VARINT_TRUNCATED if pos == _TRUNCATED else ScanError.VARINT_OVERLONG
                err_pos = field
                break
            if vlen < -1 or vlen > record_end - pos:
                error = ScanError.VALUE_LENGTH
                err_pos = field
                found = vlen
                break
            value_pos[r] = pos
            value_len[r] = vlen
            if vlen > 0:
                pos += vlen
            field = pos
            hcount, pos = _read_varint(buf, pos, record_end, 32)
            if pos < 0:
                error = ScanError.VARINT_TRUNCATED if pos == _TRUNCATED else ScanError.VARINT_OVERLONG
                err_pos = field
                break
            if hcount < 0 or hcount * MIN_HEADER_SIZE > record_end - pos:
                error = ScanError.HEADER_COUNT
                err_pos = field
                found = hcount
                break
            if n_headers + hcount > capacity:
                capacity = max(2 * capacity, n_headers + hcount)
                hk_pos = _grown(hk_pos, capacity)
                hk_len = _grown(hk_len, capacity)
                hv_pos = _grown(hv_pos, capacity)
                hv_len = _grown(hv_len, capacity)
            for _h in range(hcount):
                field = pos
                hklen, pos = _read_varint(buf, pos, record_end, 32)
                if pos < 0:
                    error = ScanError.VARINT_TRUNCATED if pos == _TRUNCATED else ScanError.VARINT_OVERLONG
                    err_pos = field
                    break
                if hklen < 0 or hklen > record_end - pos:
                    error = ScanError.HEADER_KEY_LENGTH
                    err_pos = field
                    found = hklen
                    break
                hk_pos[n_headers] = pos
                hk_len[n_headers] = hklen
                pos += hklen
                field = pos
                hvlen, pos = _read_varint(buf, pos, record_end, 32)
                if pos < 0:
                    error = ScanError.VARINT_TRUNCATED if pos == _TRUNCATED else ScanError.VARINT_OVERLONG
                    err_pos = field
                    break
                if hvlen < -1 or hvlen > record_end - pos:
                    error = ScanError.HEADER_VALUE_LENGTH
                    err_pos = field
                    found = hvlen
                    break
                hv_pos[n_headers] = pos
                hv_len[n_headers] = hvlen
                if hvlen > 0:
                    pos += hvlen
                n_headers += 1
            if error != 0:
                break
            if pos != record_end:
                error = ScanError.RECORD_SIZE_MISMATCH
                err_pos = record_start
                found = length - (record_end - pos)
                break
            offsets[r] = base_offset + offset_delta
            timestamps[r] = timestamp
            r += 1
            header_ends[r] = n_headers
        if error != 0:
            break
        if pos != end:
            error = ScanError.TRAILING_BYTES
            err_pos = pos
            found = end - pos
            break
    return (
        error,
        err_batch,
        err_pos,
        found,
        offsets,
        timestamps,
        key_pos,
        key_len,
        value_pos,
        value_len,
        header_ends,
        hk_pos[:n_headers],
        hk_len[:n_headers],
        hv_pos[:n_headers],
        hv_len[:n_headers],
    )


@njit(cache=True, nogil=True)
def _grown(array: Any, capacity: int) -> Any:
    grown = np.empty(capacity, array.dtype)
    grown[: array.shape[0]] = array
    return grown
