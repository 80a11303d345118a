"""The segment codec: round trips for every codec, batch semantics, limits and typed errors."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafscale_iceberg.exceptions import (
    CrcMismatchError,
    DecompressedSizeError,
    SegmentFormatError,
    UnsupportedCodecError,
)
from kafscale_iceberg.segments.compression import SnappyFraming
from kafscale_iceberg.segments.crc import crc32c
from kafscale_iceberg.segments.decode import SEGMENT_RECORD_SCHEMA, Record, decode_segment, iter_records
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.layout import (
    BATCH_CRC_START,
    Codec,
    IndexEntry,
    TimestampType,
    parse_batch_header,
    parse_index,
)

SOURCE = "prod/orders/3/segment-00000000000000000000.kfs"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _rows(records: list[Record], partition: int | None) -> list[dict[str, object]]:
    return [
        {
            "partition": partition,
            "offset": r.offset,
            "timestamp_ms": r.timestamp_ms,
            "key": r.key,
            "value": r.value,
            "headers": [{"key": k, "value": v} for k, v in r.headers],
        }
        for r in records
    ]


def _records(base: int, count: int, *, ts: int = 1_795_132_800_000) -> list[Record]:
    return [
        Record(base + i, ts + i, f"k{i}".encode(), b'{"n":%d}' % i, (("h", b"v"),) if i % 2 else ())
        for i in range(count)
    ]


def _with_crc(batch: bytes) -> bytes:
    """Recompute the CRC of a batch edited on purpose (so the edit, not the CRC, is under test)."""
    return batch[:17] + crc32c(batch[BATCH_CRC_START:]).to_bytes(4, "big") + batch[BATCH_CRC_START:]


# --- round trips ---------------------------------------------------------------------------------

_header_values = st.none() | st.binary(max_size=20)
_records_strategy = st.lists(
    st.tuples(
        st.integers(1, 2**20),  # gap to the previous offset (1 = consecutive)
        # timestamp: any, so deltas are large and negative too; the widest spread, 2**63 - 1, is the
        # largest delta Kafka's int64 can carry (-2**62 and 2**62 together are refused by the encoder)
        st.integers(-(2**62), 2**62 - 1),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=12), _header_values), max_size=3),
    ),
    min_size=1,
    max_size=12,
)


@st.composite
def _segments(draw: st.DrawFn) -> tuple[list[list[Record]], list[Codec], list[SnappyFraming]]:
    base = draw(st.sampled_from([0, 1, 2**40, 2**63 - 2**31 * 40]))
    batches: list[list[Record]] = []
    offset = base - 1
    for _ in range(draw(st.integers(1, 3))):
        batch = []
        for gap, ts, key, value, headers in draw(_records_strategy):
            offset += gap
            batch.append(Record(offset, ts, key, value, tuple(headers)))
        batches.append(batch)
    codecs = [draw(st.sampled_from(list(Codec))) for _ in batches]
    framings = [draw(st.sampled_from(list(SnappyFraming))) for _ in batches]
    return batches, codecs, framings


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_segments(), st.none() | st.integers(0, 2**31 - 1))
def test_any_records_round_trip_through_every_codec(
    segment: tuple[list[list[Record]], list[Codec], list[SnappyFraming]], partition: int | None
) -> None:
    batches, codecs, framings = segment
    encoded = [
        encode_record_batch(b, codec=c, snappy_framing=f)
        for b, c, f in zip(batches, codecs, framings, strict=True)
    ]
    files = build_segment(encoded, created_at_ms=1)
    decoded = decode_segment(files.kfs, source=SOURCE, partition=partition)
    expected = [r for b in batches for r in b]
    assert decoded.records.schema == SEGMENT_RECORD_SCHEMA
    assert decoded.records.to_pylist() == _rows(expected, partition)
    assert list(iter_records(files.kfs, source=SOURCE)) == expected
    assert (decoded.batch_count, decoded.record_count) == (len(batches), len(expected))
    assert decoded.footer.last_offset == files.last_offset == batches[-1][-1].offset


@pytest.mark.parametrize("codec", list(Codec))
def test_each_codec_compresses_and_decodes(codec: Codec) -> None:
    records = _records(0, 300)
    batch = encode_record_batch(records, codec=codec)
    header = parse_batch_header(batch, 0, source="b")
    assert header.codec_id == codec
    if codec is not Codec.NONE:
        assert len(batch) < len(encode_record_batch(records))
    decoded = decode_segment(build_segment([batch], created_at_ms=0).kfs, source=SOURCE)
    assert decoded.records.to_pylist() == _rows(records, None)
    assert decoded.payload_bytes == len(encode_record_batch(records)) - 61


@pytest.mark.parametrize("framing", list(SnappyFraming))
def test_snappy_decodes_with_xerial_framing_and_raw(framing: SnappyFraming) -> None:
    records = _records(7, 2000)
    batch = encode_record_batch(records, codec=Codec.SNAPPY, snappy_framing=framing)
    section = batch[61:]
    assert section.startswith(b"\x82SNAPPY\x00") == (framing is SnappyFraming.XERIAL)
    if framing is SnappyFraming.XERIAL:
        assert section[8:16] == bytes.fromhex("0000000100000001")
    decoded = decode_segment(build_segment([batch], created_at_ms=0).kfs, source=SOURCE)
    assert decoded.records.column("offset").to_pylist() == list(range(7, 2007))


def test_log_append_time_batches_report_the_max_timestamp_for_every_record() -> None:
    records = [Record(0, 30, None, b"a"), Record(1, 10, None, b"b"), Record(2, 20, None, b"c")]
    batch = encode_record_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME)
    decoded = decode_segment(build_segment([batch], created_at_ms=0).kfs, source=SOURCE)
    assert decoded.records.column("timestamp_ms").to_pylist() == [30, 30, 30]
    create_time = encode_record_batch(records)
    assert decode_segment(build_segment([create_time], created_at_ms=0).kfs, source=SOURCE).records.column(
        "timestamp_ms"
    ).to_pylist() == [30, 10, 20]


def test_control_batches_are_skipped_and_counted() -> None:
    marker = [Record(5, 100, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")]
    batches = [
        encode_record_batch(_records(0, 5)),
        encode_record_batch(marker, control=True, producer_id=7, producer_epoch=0),
        encode_record_batch(_records(6, 3), codec=Codec.LZ4),
    ]
    files = build_segment(batches, created_at_ms=0)
    decoded = decode_segment(files.kfs, source=SOURCE)
    assert decoded.records.column("offset").to_pylist() == [0, 1, 2, 3, 4, 6, 7, 8]
    assert (decoded.batch_count, decoded.control_batches_skipped) == (3, 1)
    assert decoded.header.message_count == files.message_count == 9


def test_a_segment_of_only_control_batches_decodes_to_no_rows() -> None:
    marker = encode_record_batch([Record(9, 100, b"\x00\x00\x00\x01", b"")], control=True)
    decoded = decode_segment(build_segment([marker], created_at_ms=0).kfs, source=SOURCE, partition=1)
    assert decoded.records.num_rows == 0
    assert decoded.records.schema == SEGMENT_RECORD_SCHEMA
    assert (decoded.control_batches_skipped, decoded.payload_bytes) == (1, 0)


def test_offset_gaps_inside_a_batch_survive_as_after_compaction() -> None:
    records = [Record(100, 1, b"a", b"1"), Record(104, 2, b"b", b"2"), Record(110, 3, None, None)]
    decoded = decode_segment(
        build_segment([encode_record_batch(records)], created_at_ms=0).kfs, source=SOURCE
    )
    assert decoded.records.column("offset").to_pylist() == [100, 104, 110]
    assert decoded.footer.last_offset == 110


def test_segment_index_has_entries_at_the_batches_the_rule_picks() -> None:
    counts = [5, 100, 1, 99, 1, 250, 3]
    batches, offset = [], 0
    for count in counts:
        batches.append(encode_record_batch(_records(offset, count)))
        offset += count
    files = build_segment(batches, created_at_ms=0)
    positions = [b.position for b in decode_segment(files.kfs, source=SOURCE).batches]
    starts = [sum(counts[:i]) for i in range(len(counts))]
    index = parse_index(files.index, source="idx")
    assert index.interval == 100
    assert index.entries == tuple(IndexEntry(starts[i], positions[i]) for i in (0, 2, 4, 6))
    assert positions[0] == 32


def test_empty_keys_values_and_headers_are_not_null() -> None:
    records = [Record(0, 0, b"", b"", (("", b""), ("n", None)))]
    decoded = decode_segment(
        build_segment([encode_record_batch(records)], created_at_ms=0).kfs, source=SOURCE
    )
    assert decoded.records.to_pylist()[0]["headers"] == [
        {"key": "", "value": b""},
        {"key": "n", "value": None},
    ]
    assert decoded.records.column("key").null_count == 0


# --- typed errors --------------------------------------------------------------------------------


def test_unknown_codec_is_an_unsupported_codec_error_at_the_attributes() -> None:
    batch = bytearray(encode_record_batch(_records(0, 2)))
    batch[22] |= 0x05
    kfs = build_segment([_with_crc(bytes(batch))], created_at_ms=0).kfs
    with pytest.raises(UnsupportedCodecError, match="found 5") as raised:
        decode_segment(kfs, source=SOURCE)
    assert raised.value.position == 32 + 21


@pytest.mark.parametrize("codec", [c for c in Codec if c is not Codec.NONE])
def test_decompression_bombs_stop_at_the_payload_limit(codec: Codec) -> None:
    batch = encode_record_batch([Record(0, 0, None, bytes(8 << 20))], codec=codec)
    assert len(batch) < 1 << 20
    kfs = build_segment([batch], created_at_ms=0).kfs
    with pytest.raises(DecompressedSizeError, match="max_payload_bytes=1048576") as raised:
        decode_segment(kfs, source=SOURCE, max_payload_bytes=1 << 20)
    assert raised.value.position == 32
    assert decode_segment(kfs, source=SOURCE).records.column("value")[0].as_py() == bytes(8 << 20)


@pytest.mark.parametrize("codec", [c for c in Codec if c is not Codec.NONE])
def test_corrupt_compressed_data_is_a_format_error_naming_the_batch(codec: Codec) -> None:
    good = encode_record_batch(_records(5, 50), codec=codec)
    section = bytearray(good[61:])
    section[len(section) // 2 :] = bytes(len(section) - len(section) // 2)
    bad = _with_crc(good[:61] + bytes(section))
    kfs = build_segment([encode_record_batch(_records(0, 5)), bad], created_at_ms=0).kfs
    with pytest.raises(SegmentFormatError) as raised:
        decode_segment(kfs, source=SOURCE)
    assert SOURCE in str(raised.value)
    assert raised.value.position == 32 + len(encode_record_batch(_records(0, 5)))


def test_record_count_not_matching_the_records_is_an_error() -> None:
    batch = bytearray(encode_record_batch(_records(0, 3)))
    batch[60] = 2  # the batch now claims 2 records and holds 3
    header = bytearray(build_segment([_with_crc(bytes(batch))], created_at_ms=0).kfs)
    with pytest.raises(SegmentFormatError, match="expected 2 to fill the record section"):
        decode_segment(bytes(header), source=SOURCE)


def test_a_record_count_the_bytes_cannot_hold_is_rejected_before_allocating() -> None:
    batch = bytearray(encode_record_batch(_records(0, 3)))
    batch[57:61] = (2**31 - 1).to_bytes(4, "big")
    kfs = bytearray(build_segment([bytes(batch)], created_at_ms=0).kfs)
    kfs[16:20] = (2**31 - 1).to_bytes(4, "big")
    with pytest.raises(SegmentFormatError, match="batch record count: expected at most") as raised:
        decode_segment(bytes(kfs), source=SOURCE, verify_crc=False)
    assert raised.value.position == 32 + 57


def test_a_header_key_that_is_not_utf8_keeps_its_record_with_u_fffd_per_invalid_byte() -> None:
    """Issue 12 §5: the batch CRC is valid, so the producer sent these bytes; the record is kept and the
    key stored as Go's `json.Marshal` writes a string holding them (each invalid byte as U+FFFD)."""
    batch = encode_record_batch(
        [Record(0, 0, None, b"v", (("abcd", b"x"),)), Record(1, 0, None, b"w", (("ok", b"y"),))]
    )
    position = batch.index(b"abcd")
    broken = _with_crc(batch[:position] + b"a\xff\xe2\x82" + batch[position + 4 :])
    decoded = decode_segment(build_segment([broken], created_at_ms=0).kfs, source=SOURCE)
    assert decoded.record_count == 2
    assert decoded.header_keys_replaced == 1
    headers = decoded.records.column("headers").to_pylist()
    assert [h["key"] for h in headers[0]] == ["a\ufffd\ufffd\ufffd"]  # three invalid bytes, three U+FFFD
    assert [(h["key"], h["value"]) for h in headers[1]] == [("ok", b"y")]


def test_footer_body_crc_mismatch_is_detected_and_skippable() -> None:
    files = build_segment([encode_record_batch(_records(0, 4))], created_at_ms=0)
    kfs = files.kfs[:-16] + (crc32c(b"x")).to_bytes(4, "big") + files.kfs[-12:]
    with pytest.raises(CrcMismatchError, match="footer body CRC-32C") as raised:
        decode_segment(kfs, source=SOURCE)
    assert raised.value.position == len(kfs) - 16
    assert decode_segment(kfs, source=SOURCE, verify_crc=False).record_count == 4


def test_batch_crc_mismatch_names_the_batch_crc_position() -> None:
    batches = [encode_record_batch(_records(0, 2)), encode_record_batch(_records(2, 2))]
    kfs = bytearray(build_segment(batches, created_at_ms=0).kfs)
    second = 32 + len(batches[0])
    kfs[second + 70] ^= 0x01
    with pytest.raises(CrcMismatchError) as raised:
        decode_segment(bytes(kfs), source=SOURCE)
    assert raised.value.position == second + 17


def test_trailing_garbage_after_the_last_batch_is_an_error() -> None:
    files = build_segment([encode_record_batch(_records(0, 2))], created_at_ms=0)
    kfs = files.kfs[:-16] + bytes(12) + files.kfs[-16:]
    with pytest.raises(SegmentFormatError):
        decode_segment(kfs, source=SOURCE, verify_crc=False)


def test_header_and_footer_must_agree_with_the_batches() -> None:
    kfs = build_segment([encode_record_batch(_records(10, 2))], created_at_ms=0).kfs
    wrong_base = kfs[:8] + (11).to_bytes(8, "big") + kfs[16:]
    with pytest.raises(SegmentFormatError, match="segment base offset: expected 10"):
        decode_segment(wrong_base, source=SOURCE)
    wrong_count = kfs[:16] + (3).to_bytes(4, "big") + kfs[20:]
    with pytest.raises(SegmentFormatError, match="message count: expected 2"):
        decode_segment(wrong_count, source=SOURCE)
    wrong_last = kfs[:-12] + (12).to_bytes(8, "big") + kfs[-4:]
    with pytest.raises(SegmentFormatError, match="footer last offset: expected 11"):
        decode_segment(wrong_last, source=SOURCE)


def test_batches_whose_offsets_go_backwards_are_an_error() -> None:
    kfs = build_segment(
        [encode_record_batch(_records(10, 2)), encode_record_batch(_records(11, 2))], created_at_ms=0
    ).kfs
    with pytest.raises(SegmentFormatError, match="batch base offset: expected > 11"):
        decode_segment(kfs, source=SOURCE)


def test_encoder_rejects_what_it_cannot_represent() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_record_batch([])
    with pytest.raises(ValueError, match="offsets must increase"):
        encode_record_batch([Record(5, 0, None, None), Record(5, 0, None, None)])
    with pytest.raises(ValueError, match="fit int64"):
        encode_record_batch([Record(0, INT64_MIN, None, None), Record(1, INT64_MAX, None, None)])
    with pytest.raises(ValueError, match="at least one batch"):
        build_segment([], created_at_ms=0)
