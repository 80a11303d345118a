"""Segment byte layouts: the §2.7 worked example byte for byte, parse errors, and a light import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kafscale_iceberg.exceptions import SegmentFormatError, TruncatedSegmentError
from kafscale_iceberg.segments.crc import crc32c
from kafscale_iceberg.segments.decode import Record, decode_segment
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch, index_entries
from kafscale_iceberg.segments.layout import (
    IndexEntry,
    SegmentFooter,
    SegmentHeader,
    SegmentIndex,
    build_footer,
    build_header,
    build_index,
    parse_footer,
    parse_header,
    parse_index,
)


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


# kafscale-formats.md §2.7: one record, key "k1", value "v1", base offset 0, ts 1700000000000.
BATCH_27 = _hex(
    "0000000000000000 0000003c ffffffff 02 6ba48e85 0000 00000000 0000018bcfe56800 0000018bcfe56800 "
    "ffffffffffffffff ffff ffffffff 00000001 | 14 00 00 00 04 6b31 04 7631 00"
)
HEADER_27 = _hex("4b414653 0001 0000 0000000000000000 00000001 0000018bcfe56800 00000000")
FOOTER_27 = _hex("da042158 0000000000000000 454e4421")
INDEX_27 = _hex("49445800 0001 00000001 00000064 0000 0000000000000000 00000020")
TS_27 = 1700000000000


def test_crc32c_matches_the_standard_check_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_worked_example_batch_is_reproduced_byte_for_byte() -> None:
    assert encode_record_batch([Record(0, TS_27, b"k1", b"v1")]) == BATCH_27


def test_worked_example_segment_and_index_are_reproduced_byte_for_byte() -> None:
    files = build_segment([BATCH_27], created_at_ms=TS_27)
    assert files.kfs == HEADER_27 + BATCH_27 + FOOTER_27
    assert files.index == INDEX_27
    assert (files.base_offset, files.last_offset, files.message_count) == (0, 0, 1)


def test_worked_example_parses_back() -> None:
    kfs = HEADER_27 + BATCH_27 + FOOTER_27
    assert parse_header(kfs, source="s") == SegmentHeader(base_offset=0, message_count=1, created_at_ms=TS_27)
    assert parse_footer(kfs[-16:], source="s") == SegmentFooter(body_crc=0xDA042158, last_offset=0)
    assert parse_index(INDEX_27, source="s") == SegmentIndex(100, (IndexEntry(0, 32),))
    decoded = decode_segment(kfs, source="s", partition=0)
    assert decoded.records.to_pylist() == [
        {"partition": 0, "offset": 0, "timestamp_ms": TS_27, "key": b"k1", "value": b"v1", "headers": []}
    ]


def test_builders_and_parsers_are_inverse() -> None:
    header = SegmentHeader(base_offset=2**62, message_count=7, created_at_ms=-5)
    footer = SegmentFooter(body_crc=0xFFFFFFFF, last_offset=2**63 - 1)
    index = SegmentIndex(3, (IndexEntry(10, 32), IndexEntry(20, 4000)))
    assert parse_header(build_header(header), source="s") == header
    assert parse_footer(build_footer(footer), source="s") == footer
    assert parse_index(build_index(index), source="s") == index


def test_index_entries_follow_the_broker_maybe_add_rule() -> None:
    counts = [5, 100, 1, 99, 1, 250, 3, 100, 100]
    batches = [(1000 + i, 32 + 10 * i, count) for i, count in enumerate(counts)]
    # Running count since the last entry, checked before adding the batch: 0 5 105 | 1 100 | 1 251 | 3 103 |.
    expected = [0, 2, 4, 6, 8]
    assert index_entries(batches, 100) == tuple(IndexEntry(1000 + i, 32 + 10 * i) for i in expected)


@pytest.mark.parametrize(
    ("data", "position", "error"),
    [
        (b"KAFS", 4, TruncatedSegmentError),
        (b"KAFX" + HEADER_27[4:], 0, SegmentFormatError),
        (HEADER_27[:4] + b"\x00\x02" + HEADER_27[6:], 4, SegmentFormatError),
        (HEADER_27[:16] + b"\xff\xff\xff\xff" + HEADER_27[20:], 16, SegmentFormatError),
    ],
)
def test_header_errors_name_source_and_position(data: bytes, position: int, error: type[Exception]) -> None:
    with pytest.raises(error) as raised:
        parse_header(data, source="prod/orders/0/segment-00000000000000000000.kfs")
    assert isinstance(raised.value, SegmentFormatError)
    assert raised.value.position == position
    assert "prod/orders/0/segment-00000000000000000000.kfs" in str(raised.value)


def test_footer_without_end_magic_is_an_error_at_an_absolute_or_from_end_position() -> None:
    bad = FOOTER_27[:12] + b"END?"
    with pytest.raises(SegmentFormatError, match="END!") as raised:
        parse_footer(bad, source="k")
    assert raised.value.position == -4
    with pytest.raises(SegmentFormatError) as raised:
        parse_footer(bad, source="k", file_size=120)
    assert raised.value.position == 116
    with pytest.raises(TruncatedSegmentError):
        parse_footer(FOOTER_27[1:], source="k")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (INDEX_27[:10], "needs 16 bytes"),
        (b"IDX?" + INDEX_27[4:], "magic"),
        (INDEX_27[:4] + b"\x00\x02" + INDEX_27[6:], "version"),
        (INDEX_27[:-1], "needs 28 bytes"),
        (INDEX_27 + b"\x00", "1 more"),
        (INDEX_27[:6] + b"\xff\xff\xff\xff" + INDEX_27[10:], "entry count"),
        (build_index(SegmentIndex(100, (IndexEntry(5, 32), IndexEntry(5, 90)))), "index entry 1"),
        (build_index(SegmentIndex(100, (IndexEntry(5, 31),))), "index entry 0"),
    ],
)
def test_index_errors_are_typed(data: bytes, problem: str) -> None:
    with pytest.raises(SegmentFormatError, match=problem):
        parse_index(data, source="idx")


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_package_and_layout_loads_no_heavy_modules() -> None:
    code = (
        "import sys, kafscale_iceberg.segments, kafscale_iceberg.segments.layout\n"
        "heavy = {'numpy', 'pyarrow', 'numba', 'cramjam', 'crc32c'} & set(sys.modules)\n"
        "print(sorted(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
