"""Byte layouts of KafScale segment files: the `.kfs` header and footer, the `.index`, the batch header.

Pure `struct` code with no third-party imports: the router Lambda imports this module to check a
segment's 16-byte footer from a ranged GET, and must not load numpy, pyarrow or numba. All integers
are big-endian. Layouts follow KafScale's `pkg/storage` (`segment.go`, `index.go`) and Kafka's
RecordBatch v2; see `docs/` and the format reference for the field tables.

Parsers raise `TruncatedSegmentError` when the bytes end early and `SegmentFormatError` for a wrong
magic, version or value; both name the source and the byte position. Builders raise `ValueError` for
values that do not fit their fields (a programming error, not corrupt data).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from kafscale_iceberg.exceptions import SegmentFormatError, TruncatedSegmentError

SEGMENT_MAGIC = b"KAFS"
SEGMENT_VERSION = 1
HEADER_SIZE = 32
FOOTER_MAGIC = b"END!"
FOOTER_SIZE = 16
INDEX_MAGIC = b"IDX\x00"
INDEX_VERSION = 1
INDEX_HEADER_SIZE = 16
INDEX_ENTRY_SIZE = 12
# KafScale's broker hard-codes this (`IndexIntervalMessages: 100`).
DEFAULT_INDEX_INTERVAL = 100

# Kafka RecordBatch v2.
BATCH_MAGIC = 2
BATCH_HEADER_SIZE = 61
# baseOffset + batchLength precede what batchLength counts.
BATCH_LOG_OVERHEAD = 12
# The batch CRC-32C covers bytes [21, end): attributes onwards.
BATCH_CRC_START = 21
ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

BytesLike = bytes | bytearray | memoryview
"""What the parsers and decoders accept: any contiguous bytes."""

_HEADER = struct.Struct(">4sHHqiqI")
_FOOTER = struct.Struct(">Iq4s")
_INDEX_HEADER = struct.Struct(">4sHiiH")
_INDEX_ENTRY = struct.Struct(">qi")
BATCH_HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
"""The 61-byte batch header, fields in `BatchHeader` order."""


class Codec(IntEnum):
    """Kafka compression codec ids (RecordBatch attributes bits 0-2); 5-7 are undefined."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """RecordBatch attributes bit 3: whose clock the record timestamps come from."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """The 32-byte `.kfs` header. `flags` and `reserved` are written 0 and read by nobody."""

    base_offset: int
    message_count: int
    created_at_ms: int
    version: int = SEGMENT_VERSION
    flags: int = 0
    reserved: int = 0


@dataclass(frozen=True, slots=True)
class SegmentFooter:
    """The 16-byte `.kfs` footer: CRC-32C of the body and the offset of the last record."""

    body_crc: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """A sparse-index entry: a batch base offset and the batch's absolute byte position in the `.kfs`."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """A parsed `.index`: the interval it was built with and its entries in file order."""

    interval: int
    entries: tuple[IndexEntry, ...]


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte Kafka RecordBatch v2 header (`batch_length` counts the bytes after its own field)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def codec_id(self) -> int:
        """Bits 0-2 of the attributes: a `Codec` value, or 5-7 for an undefined codec."""
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        """CREATE_TIME unless attributes bit 3 says the broker stamped LogAppendTime."""
        if self.attributes & ATTR_LOG_APPEND_TIME:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_control(self) -> bool:
        """Attributes bit 5: a transaction marker batch, not user data."""
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def size(self) -> int:
        """Bytes of the whole batch, including the 12-byte offset/length prefix."""
        return BATCH_LOG_OVERHEAD + self.batch_length


def _require_length(data: BytesLike, size: int, what: str, *, source: str, position: int) -> None:
    if len(data) < size:
        raise TruncatedSegmentError(
            source, position + len(data), f"{what} needs {size} bytes, found {len(data)}"
        )


def _require_magic(found: bytes, expected: bytes, what: str, *, source: str, position: int) -> None:
    if found != expected:
        raise SegmentFormatError(source, position, f"{what} magic: expected {expected!r}, found {found!r}")


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} {value} is outside {low}..{high}")


def parse_header(data: BytesLike, *, source: str) -> SegmentHeader:
    """Parse the header from the first 32 bytes of `data` (a whole `.kfs` or just its head).

    Raises `TruncatedSegmentError` under 32 bytes, `SegmentFormatError` for a magic other than
    `KAFS`, a version other than 1, or a negative message count. `flags`, `reserved` and
    `created_at_ms` are returned as found: KafScale writes them and no reader interprets them.
    """
    _require_length(data, HEADER_SIZE, "segment header", source=source, position=0)
    magic, version, flags, base_offset, count, created_at, reserved = _HEADER.unpack_from(data, 0)
    _require_magic(magic, SEGMENT_MAGIC, "segment header", source=source, position=0)
    if version != SEGMENT_VERSION:
        raise SegmentFormatError(source, 4, f"segment version: expected {SEGMENT_VERSION}, found {version}")
    if count < 0:
        raise SegmentFormatError(source, 16, f"segment message count: expected >= 0, found {count}")
    return SegmentHeader(
        base_offset=base_offset,
        message_count=count,
        created_at_ms=created_at,
        version=version,
        flags=flags,
        reserved=reserved,
    )


def build_header(header: SegmentHeader) -> bytes:
    """The 32 header bytes for `header`. Raises `ValueError` when a field does not fit."""
    _check_range("message count", header.message_count, 0, INT32_MAX)
    _check_range("base offset", header.base_offset, INT64_MIN, INT64_MAX)
    _check_range("created_at_ms", header.created_at_ms, INT64_MIN, INT64_MAX)
    return _HEADER.pack(
        SEGMENT_MAGIC,
        header.version,
        header.flags,
        header.base_offset,
        header.message_count,
        header.created_at_ms,
        header.reserved,
    )


def parse_footer(last16: BytesLike, *, source: str, file_size: int | None = None) -> SegmentFooter:
    """Parse the footer from the last 16 bytes of a `.kfs` (e.g. a `Range: bytes=-16` GET).

    `last16` may be longer (a whole file); only its last 16 bytes are read. Error positions are
    absolute when `file_size` is given, else counted from the end of the file (negative).
    Raises `TruncatedSegmentError` under 16 bytes and `SegmentFormatError` when the magic is not
    `END!` (the segment is incomplete or not a segment).
    """
    end = len(last16) if file_size is None else file_size
    base = end - FOOTER_SIZE
    _require_length(last16, FOOTER_SIZE, "segment footer", source=source, position=base)
    crc, last_offset, magic = _FOOTER.unpack_from(last16, len(last16) - FOOTER_SIZE)
    if file_size is None:
        base = -FOOTER_SIZE
    _require_magic(magic, FOOTER_MAGIC, "segment footer", source=source, position=base + 12)
    return SegmentFooter(body_crc=crc, last_offset=last_offset)


def build_footer(footer: SegmentFooter) -> bytes:
    """The 16 footer bytes for `footer`. Raises `ValueError` when a field does not fit."""
    _check_range("body CRC", footer.body_crc, 0, 2**32 - 1)
    _check_range("last offset", footer.last_offset, INT64_MIN, INT64_MAX)
    return _FOOTER.pack(footer.body_crc, footer.last_offset, FOOTER_MAGIC)


def parse_index(data: BytesLike, *, source: str) -> SegmentIndex:
    """Parse a whole `.index` file.

    Raises `TruncatedSegmentError` when the file is shorter than its entry count says and
    `SegmentFormatError` for a wrong magic or version, a negative count or interval, bytes after the
    last entry, or entries that do not move forward (offsets and positions strictly increasing,
    positions at or after the 32-byte segment header).
    """
    _require_length(data, INDEX_HEADER_SIZE, "index header", source=source, position=0)
    magic, version, count, interval, _reserved = _INDEX_HEADER.unpack_from(data, 0)
    _require_magic(magic, INDEX_MAGIC, "index header", source=source, position=0)
    if version != INDEX_VERSION:
        raise SegmentFormatError(source, 4, f"index version: expected {INDEX_VERSION}, found {version}")
    if count < 0:
        raise SegmentFormatError(source, 6, f"index entry count: expected >= 0, found {count}")
    if interval < 0:
        raise SegmentFormatError(source, 10, f"index interval: expected >= 0, found {interval}")
    expected_size = INDEX_HEADER_SIZE + INDEX_ENTRY_SIZE * count
    if len(data) < expected_size:
        raise TruncatedSegmentError(
            source, len(data), f"index of {count} entries needs {expected_size} bytes, found {len(data)}"
        )
    if len(data) > expected_size:
        raise SegmentFormatError(
            source,
            expected_size,
            f"index of {count} entries is {expected_size} bytes, found {len(data) - expected_size} more",
        )
    entries = tuple(
        IndexEntry(offset, position)
        for offset, position in _INDEX_ENTRY.iter_unpack(memoryview(data)[INDEX_HEADER_SIZE:expected_size])
    )
    previous = IndexEntry(INT64_MIN, HEADER_SIZE - 1)
    for i, entry in enumerate(entries):
        if entry.offset <= previous.offset or entry.position <= previous.position:
            raise SegmentFormatError(
                source,
                INDEX_HEADER_SIZE + INDEX_ENTRY_SIZE * i,
                f"index entry {i}: expected offset > {previous.offset} and position > "
                f"{previous.position}, found offset {entry.offset} at position {entry.position}",
            )
        previous = entry
    return SegmentIndex(interval=interval, entries=entries)


def build_index(index: SegmentIndex) -> bytes:
    """The `.index` bytes for `index`, as KafScale's `IndexBuilder.BuildBytes` writes them."""
    _check_range("index interval", index.interval, 0, INT32_MAX)
    parts = [_INDEX_HEADER.pack(INDEX_MAGIC, INDEX_VERSION, len(index.entries), index.interval, 0)]
    for entry in index.entries:
        _check_range("index position", entry.position, 0, INT32_MAX)
        parts.append(_INDEX_ENTRY.pack(entry.offset, entry.position))
    return b"".join(parts)


def parse_batch_header(data: BytesLike, position: int, *, source: str) -> BatchHeader:
    """Parse the 61-byte RecordBatch header starting at `position` of `data` (a whole `.kfs` or body).

    Only checks that 61 bytes are there; the caller validates magic, length and CRC, since what is
    acceptable depends on where the batch sits.
    """
    available = len(data) - position
    if available < BATCH_HEADER_SIZE:
        raise TruncatedSegmentError(
            source,
            position + max(available, 0),
            f"record batch header needs {BATCH_HEADER_SIZE} bytes, found {max(available, 0)}",
        )
    return BatchHeader(*BATCH_HEADER_STRUCT.unpack_from(data, position))


def build_batch_header(header: BatchHeader) -> bytes:
    """The 61 header bytes for `header` (its `crc` as given; compute it over bytes [21, end))."""
    return BATCH_HEADER_STRUCT.pack(
        header.base_offset,
        header.batch_length,
        header.partition_leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.record_count,
    )
