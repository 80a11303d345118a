"""Corrupt input: every truncation and every byte flip ends in a typed error or correct data, never else."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafscale_iceberg.exceptions import SegmentFormatError
from kafscale_iceberg.segments.decode import DecodedSegment, Record, decode_segment
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.layout import Codec

SOURCE = "s3://bucket/prod/orders/0/segment-00000000000000000040.kfs"
# Header bytes no reader interprets: flags (6-7), createdAt (20-27), reserved (28-31).
UNCHECKED_HEADER_BYTES = set(range(6, 8)) | set(range(20, 32))


def _small_segment() -> bytes:
    """Three batches, mixed codecs, null and empty keys, headers with null values: ~600 bytes."""
    batches = [
        encode_record_batch(
            [
                Record(40, 1_000, b"k", b'{"a":1}', (("trace", b"1"), ("none", None))),
                Record(41, 999, None, b""),
            ]
        ),
        encode_record_batch(
            [Record(42, 2_000, b"", b'{"pizza":"margherita"}' * 3), Record(43, 2_001, b"k", None)],
            codec=Codec.GZIP,
        ),
        encode_record_batch(
            [Record(44 + i, 3_000 + i, b"key", b'{"n":%d}' % i, (("h", b"v"),)) for i in range(4)],
            codec=Codec.SNAPPY,
        ),
    ]
    return build_segment(batches, created_at_ms=5).kfs


SEGMENT = _small_segment()
EXPECTED = decode_segment(SEGMENT, source=SOURCE, partition=0).records


def _check_names_source_and_position(error: SegmentFormatError, data: bytes) -> None:
    assert error.source == SOURCE
    assert SOURCE in str(error)
    assert -16 <= error.position <= len(data), error


def _decode(data: bytes, *, verify_crc: bool) -> DecodedSegment | None:
    """Decode, or None on a typed error; any other exception escapes and fails the test."""
    try:
        return decode_segment(data, source=SOURCE, partition=0, verify_crc=verify_crc)
    except SegmentFormatError as error:
        _check_names_source_and_position(error, data)
        return None


@pytest.mark.parametrize("verify_crc", [True, False])
def test_every_truncation_is_a_typed_error(verify_crc: bool) -> None:
    assert len(SEGMENT) > 300
    for length in range(len(SEGMENT)):
        with pytest.raises(SegmentFormatError):
            decode_segment(SEGMENT[:length], source=SOURCE, verify_crc=verify_crc)


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_with_crc_verification_no_byte_flip_yields_wrong_data(mask: int) -> None:
    accepted = set()
    for position in range(len(SEGMENT)):
        corrupt = bytearray(SEGMENT)
        corrupt[position] ^= mask
        decoded = _decode(bytes(corrupt), verify_crc=True)
        if decoded is not None:
            assert decoded.records.equals(EXPECTED), position
            accepted.add(position)
    assert accepted <= UNCHECKED_HEADER_BYTES


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_without_crc_verification_byte_flips_still_end_in_typed_errors_or_data(mask: int) -> None:
    for position in range(len(SEGMENT)):
        corrupt = bytearray(SEGMENT)
        corrupt[position] ^= mask
        _decode(bytes(corrupt), verify_crc=False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(SEGMENT) - 1), st.integers(0, 255)), min_size=1, max_size=6))
def test_random_overwrites_without_crc_never_escape_as_untyped_errors(edits: list[tuple[int, int]]) -> None:
    corrupt = bytearray(SEGMENT)
    for position, value in edits:
        corrupt[position] = value
    _decode(bytes(corrupt), verify_crc=False)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_rejected_with_typed_errors(data: bytes) -> None:
    _decode(b"KAFS\x00\x01" + data, verify_crc=False)
    _decode(data, verify_crc=True)
