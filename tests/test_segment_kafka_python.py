"""Cross-check with an independent Kafka implementation (kafka-python), both directions, every codec."""

from __future__ import annotations

import struct
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafscale_iceberg.segments.compression import SnappyFraming
from kafscale_iceberg.segments.decode import Record, decode_segment, iter_records
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.layout import Codec, TimestampType

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas with deprecated importlib.resources calls.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

SOURCE = "orders/0/segment-00000000000000000000.kfs"

_record = st.tuples(
    st.integers(0, 5),  # offset gap beyond consecutive
    st.integers(0, 2**41),
    st.none() | st.binary(max_size=30),
    # Compressible values, so kafka-python keeps the compressed form.
    st.none() | st.sampled_from([b"", b"x" * 200, b'{"pizza":"margherita","qty":2}' * 5]),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=2),
)


def _records(draw_list: list[Any], base: int) -> list[Record]:
    records, offset = [], base - 1
    for gap, ts, key, value, headers in draw_list:
        offset += 1 + gap
        records.append(Record(offset, ts, key, value, tuple(headers)))
    return records


def _kafka_python_batch(records: list[Record], codec: Codec, base_offset: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for r in records:
        builder.append(r.offset - base_offset, r.timestamp_ms, r.key, r.value, list(r.headers))
    batch = bytearray(builder.build())
    # What KafScale's broker does (PatchRecordBatchBaseOffset): the CRC does not cover these bytes.
    struct.pack_into(">q", batch, 0, base_offset)
    return bytes(batch)


def _read_with_kafka_python(body: bytes) -> list[Record]:
    records = []
    memory = MemoryRecords(body)
    while (batch := memory.next_batch()) is not None:
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        if batch.is_control_batch:
            continue
        for r in batch:
            records.append(Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
    return records


@pytest.mark.parametrize("codec", list(Codec))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.lists(_record, min_size=1, max_size=20), base=st.sampled_from([0, 41, 2**50]))
def test_batches_built_by_kafka_python_decode_identically(codec: Codec, data: list[Any], base: int) -> None:
    records = _records(data, base)
    batch = _kafka_python_batch(records, codec, base)
    kfs = build_segment([batch], created_at_ms=0).kfs
    assert list(iter_records(kfs, source=SOURCE)) == _read_with_kafka_python(batch) == records


@pytest.mark.parametrize("codec", list(Codec))
def test_kafka_python_compresses_the_cross_check_batches(codec: Codec) -> None:
    records = [Record(i, 0, None, b"x" * 200) for i in range(10)]
    assert _kafka_python_batch(records, codec, 0)[22] & 0x07 == codec


@pytest.mark.parametrize("codec", list(Codec))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.lists(_record, min_size=1, max_size=20),
    framing=st.sampled_from(list(SnappyFraming)),
    log_append=st.booleans(),
)
def test_batches_we_encode_decode_identically_in_kafka_python(
    codec: Codec, data: list[Any], framing: SnappyFraming, log_append: bool
) -> None:
    first = _records(data, 1000)
    marker_offset = first[-1].offset + 1
    second = _records(data, marker_offset + 1)
    timestamp_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    batches = [
        encode_record_batch(first, codec=codec, snappy_framing=framing, timestamp_type=timestamp_type),
        encode_record_batch([Record(marker_offset, 0, b"\x00\x00\x00\x00", b"")], control=True),
        encode_record_batch(second, codec=codec, snappy_framing=framing),
    ]
    kfs = build_segment(batches, created_at_ms=0).kfs
    ours = list(iter_records(kfs, source=SOURCE))
    theirs = _read_with_kafka_python(kfs[32:-16])
    assert ours == theirs
    if log_append:
        assert {r.timestamp_ms for r in ours[: len(first)]} == {max(r.timestamp_ms for r in first)}
    else:
        assert ours == first + second
    assert decode_segment(kfs, source=SOURCE).control_batches_skipped == 1
