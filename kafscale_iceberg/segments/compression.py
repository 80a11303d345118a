"""Kafka record-batch compression: gzip, snappy, lz4 and zstd, through `cramjam`.

Formats, as the Java client writes them:
- gzip (1): a gzip stream (concatenated members accepted).
- snappy (2): the xerial framing of `snappy-java` (`\\x82SNAPPY\\x00`, a 4-byte version, a 4-byte
  compat field, then blocks of `[4-byte big-endian length][raw snappy block]`). librdkafka and others
  send plain raw snappy instead; both decode. The version and compat fields are not checked: some
  producers (Redpanda) write them little-endian.
- lz4 (3): the LZ4 frame format, written with independent blocks as Kafka requires.
- zstd (4): zstd frames.

Decompression writes into a caller-provided buffer and never beyond it, so the caller bounds the
output (a small batch can expand to gigabytes); `DecompressedSizeError` says the output did not fit.
"""

from __future__ import annotations

import struct
from enum import Enum
from typing import Any

import cramjam

from kafscale_iceberg.exceptions import DecompressedSizeError, SegmentFormatError
from kafscale_iceberg.segments.layout import BytesLike, Codec

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_SIZE = 16
# snappy-java's default block size, which the Java client keeps.
XERIAL_BLOCK_SIZE = 32 * 1024
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_VERSION = 1
_XERIAL_COMPAT = 1
_BLOCK_LENGTH = struct.Struct(">i")
# cramjam's message when `decompress_into` runs out of output space.
_OUTPUT_FULL = "failed to write whole buffer"


class SnappyFraming(Enum):
    """How a snappy batch payload is framed."""

    XERIAL = "xerial"
    RAW = "raw"


def compress(codec: Codec, data: bytes, *, snappy_framing: SnappyFraming = SnappyFraming.XERIAL) -> bytes:
    """Compress a batch's record section with `codec` (NONE returns `data` unchanged)."""
    if codec is Codec.NONE:
        return data
    if codec is Codec.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Codec.SNAPPY:
        if snappy_framing is SnappyFraming.RAW:
            return bytes(cramjam.snappy.compress_raw(data))
        return _xerial_compress(data)
    if codec is Codec.LZ4:
        # Kafka's Java reader decodes each LZ4 block on its own: blocks must not be linked.
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    return bytes(cramjam.zstd.compress(data))


def _xerial_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPAT)]
    view = memoryview(data)
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def decompress_into(codec: Codec, data: BytesLike, out: Any, *, source: str, position: int) -> int:
    """Decompress `data` into the writable uint8 buffer `out`; returns the number of bytes written.

    `position` is the batch's byte position in the `.kfs`, named in errors. Raises
    `DecompressedSizeError` when the output does not fit in `out` and `SegmentFormatError` when the
    data is not valid for `codec`. NONE copies `data`.
    """
    if codec is Codec.NONE:
        if len(data) > len(out):
            raise DecompressedSizeError(
                source, position, f"record section of {len(data)} bytes exceeds the {len(out)} bytes allowed"
            )
        out[: len(data)] = memoryview(data)
        return len(data)
    if codec is Codec.SNAPPY:
        if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
            return _xerial_decompress_into(data, out, source=source, position=position)
        return _raw_snappy_into(data, out, source=source, position=position, what="snappy data")
    module = {Codec.GZIP: cramjam.gzip, Codec.LZ4: cramjam.lz4, Codec.ZSTD: cramjam.zstd}[codec]
    try:
        return int(module.decompress_into(data, out))
    except cramjam.DecompressionError as exc:
        if _OUTPUT_FULL in str(exc):
            raise DecompressedSizeError(
                source, position, f"{codec.name.lower()} data expands beyond the {len(out)} bytes allowed"
            ) from None
        raise SegmentFormatError(source, position, f"corrupt {codec.name.lower()} data: {exc}") from None


def _raw_snappy_into(data: BytesLike, out: Any, *, source: str, position: int, what: str) -> int:
    try:
        size = int(cramjam.snappy.decompress_raw_len(data))
    except cramjam.DecompressionError as exc:
        raise SegmentFormatError(source, position, f"corrupt {what}: {exc}") from None
    if size > len(out):
        raise DecompressedSizeError(
            source, position, f"{what} declares {size} bytes, beyond the {len(out)} bytes allowed"
        )
    try:
        written = int(cramjam.snappy.decompress_raw_into(data, out[:size]))
    except cramjam.DecompressionError as exc:
        raise SegmentFormatError(source, position, f"corrupt {what}: {exc}") from None
    if written != size:
        raise SegmentFormatError(
            source, position, f"corrupt {what}: declares {size} bytes, decompressed to {written}"
        )
    return written


def _xerial_decompress_into(data: BytesLike, out: Any, *, source: str, position: int) -> int:
    if len(data) < XERIAL_HEADER_SIZE:
        raise SegmentFormatError(
            source,
            position,
            f"xerial snappy header: expected {XERIAL_HEADER_SIZE} bytes, found {len(data)}",
        )
    view = memoryview(data)
    cursor = XERIAL_HEADER_SIZE
    written = 0
    block = 0
    while cursor < len(view):
        if len(view) - cursor < _BLOCK_LENGTH.size:
            raise SegmentFormatError(
                source,
                position,
                f"xerial snappy block {block}: length needs 4 bytes, found {len(view) - cursor}",
            )
        (length,) = _BLOCK_LENGTH.unpack_from(view, cursor)
        cursor += _BLOCK_LENGTH.size
        if length < 0 or length > len(view) - cursor:
            raise SegmentFormatError(
                source,
                position,
                f"xerial snappy block {block}: length {length} exceeds the {len(view) - cursor} bytes left",
            )
        written += _raw_snappy_into(
            view[cursor : cursor + length],
            out[written:],
            source=source,
            position=position,
            what=f"xerial snappy block {block}",
        )
        cursor += length
        block += 1
    return written
