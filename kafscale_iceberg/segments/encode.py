"""Encode Kafka v2 record batches and assemble KafScale segments, byte for byte as the broker does.

`encode_record_batch` writes what a producer sends (with the absolute base offset the broker
patches in); `build_segment` mirrors KafScale's `storage.BuildSegment`: header, the batches back to
back, footer with the body CRC-32C, and the sparse `.index` from `IndexBuilder.MaybeAdd`.
Not a hot path: used by the generator, the tests and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafscale_iceberg.segments.compression import SnappyFraming, compress
from kafscale_iceberg.segments.crc import crc32c
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.layout import (
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    BATCH_CRC_START,
    BATCH_HEADER_SIZE,
    BATCH_LOG_OVERHEAD,
    BATCH_MAGIC,
    DEFAULT_INDEX_INTERVAL,
    HEADER_SIZE,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    BatchHeader,
    Codec,
    IndexEntry,
    SegmentFooter,
    SegmentHeader,
    SegmentIndex,
    TimestampType,
    build_batch_header,
    build_footer,
    build_header,
    build_index,
    parse_batch_header,
)


@dataclass(frozen=True)
class SegmentFiles:
    """The two objects of one segment, ready to upload, and what they hold."""

    kfs: bytes
    index: bytes
    base_offset: int
    last_offset: int
    message_count: int


def encode_varint(value: int) -> bytes:
    """Kafka's zig-zag varint (varlong) encoding of a signed 64-bit `value`."""
    n = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + data


def _encode_record(record: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    parts = [
        b"\x00",  # attributes: unused in v2 records
        encode_varint(timestamp_delta),
        encode_varint(offset_delta),
        _encode_bytes(record.key),
        _encode_bytes(record.value),
        encode_varint(len(record.headers)),
    ]
    for key, value in record.headers:
        parts.append(_encode_bytes(key.encode("utf-8")))
        parts.append(_encode_bytes(value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def encode_record_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    codec: Codec = Codec.NONE,
    base_timestamp: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    control: bool = False,
    snappy_framing: SnappyFraming = SnappyFraming.XERIAL,
) -> bytes:
    """One Kafka RecordBatch v2 holding `records`, with a correct CRC-32C.

    Record offsets must increase (gaps allowed, as after compaction); `base_offset` defaults to the
    first record's offset and is written as the absolute batch base offset, as KafScale's broker
    patches it. `base_timestamp` defaults to the first record's timestamp; `maxTimestamp` is the
    largest record timestamp (for LOG_APPEND_TIME batches readers report it for every record).
    Raises `ValueError` for an empty batch, offsets that do not increase or do not fit the deltas,
    or timestamps whose deltas do not fit int64.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    base = records[0].offset if base_offset is None else base_offset
    first_ts = records[0].timestamp_ms if base_timestamp is None else base_timestamp
    previous = base - 1
    encoded = []
    for record in records:
        delta = record.offset - base
        if record.offset <= previous or not 0 <= delta <= INT32_MAX:
            raise ValueError(
                f"record offset {record.offset}: offsets must increase from base offset {base} "
                f"by at most {INT32_MAX}"
            )
        ts_delta = record.timestamp_ms - first_ts
        if not INT64_MIN <= ts_delta <= INT64_MAX or not INT64_MIN <= record.timestamp_ms <= INT64_MAX:
            raise ValueError(
                f"record timestamp {record.timestamp_ms}: its delta from {first_ts} must fit int64"
            )
        previous = record.offset
        encoded.append(_encode_record(record, delta, ts_delta))
    if not 0 <= base <= INT64_MAX - (previous - base):
        raise ValueError(f"base offset {base}: the batch's offsets must lie in 0..2^63-1")
    section = compress(codec, b"".join(encoded), snappy_framing=snappy_framing)
    attributes = int(codec)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_LOG_APPEND_TIME
    if control:
        attributes |= ATTR_CONTROL
    header = BatchHeader(
        base_offset=base,
        batch_length=BATCH_HEADER_SIZE - BATCH_LOG_OVERHEAD + len(section),
        partition_leader_epoch=partition_leader_epoch,
        magic=BATCH_MAGIC,
        crc=0,
        attributes=attributes,
        last_offset_delta=previous - base,
        base_timestamp=first_ts,
        max_timestamp=max(r.timestamp_ms for r in records),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=len(records),
    )
    unsigned = build_batch_header(header) + section
    crc = crc32c(memoryview(unsigned)[BATCH_CRC_START:])
    return unsigned[:17] + crc.to_bytes(4, "big") + unsigned[BATCH_CRC_START:]


def index_entries(
    batches: Sequence[tuple[int, int, int]], interval: int = DEFAULT_INDEX_INTERVAL
) -> tuple[IndexEntry, ...]:
    """The sparse-index entries KafScale's `IndexBuilder.MaybeAdd` writes for these batches.

    `batches` holds `(base_offset, position, record_count)` per batch in file order. The first batch
    always gets an entry; after that a batch gets one when the messages accumulated since the last
    entry reach `interval`; then the batch's record count is added to the running count.
    """
    entries: list[IndexEntry] = []
    accumulated = 0
    for base_offset, position, record_count in batches:
        if not entries or accumulated >= interval:
            entries.append(IndexEntry(base_offset, position))
            accumulated = 0
        accumulated += record_count
    return tuple(entries)


def build_segment(
    batches: Sequence[bytes], *, created_at_ms: int, index_interval: int = DEFAULT_INDEX_INTERVAL
) -> SegmentFiles:
    """The `.kfs` and `.index` bytes for `batches` (whole encoded batches, in offset order).

    Mirrors KafScale's `storage.BuildSegment`: header base offset from the first batch, message count
    = the batches' record counts (control batches included), footer last offset = last batch's base
    + lastOffsetDelta. Raises `ValueError` for no batches, a batch whose length field does not match
    its bytes, or `index_interval` < 1.
    """
    if not batches:
        raise ValueError("a segment needs at least one batch (KafScale never writes an empty one)")
    if index_interval < 1:
        raise ValueError(f"index_interval must be >= 1, got {index_interval}")
    headers = []
    position = HEADER_SIZE
    placed = []
    for i, batch in enumerate(batches):
        header = parse_batch_header(batch, 0, source=f"batch {i}")
        if header.size != len(batch):
            raise ValueError(f"batch {i}: its length field says {header.size} bytes, it has {len(batch)}")
        headers.append(header)
        placed.append((header.base_offset, position, header.record_count))
        position += len(batch)
    body = b"".join(batches)
    last = headers[-1]
    last_offset = last.base_offset + last.last_offset_delta
    message_count = sum(h.record_count for h in headers)
    kfs = b"".join(
        (
            build_header(SegmentHeader(headers[0].base_offset, message_count, created_at_ms)),
            body,
            build_footer(SegmentFooter(crc32c(body), last_offset)),
        )
    )
    index = build_index(SegmentIndex(index_interval, index_entries(placed, index_interval)))
    return SegmentFiles(
        kfs=kfs,
        index=index,
        base_offset=headers[0].base_offset,
        last_offset=last_offset,
        message_count=message_count,
    )
