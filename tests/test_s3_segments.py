"""The S3 segment store against a real moto server: listing after an offset, footers, errors."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, make_s3_client
from kafscale_iceberg.exceptions import SegmentFormatError, SegmentKeyError, SegmentObjectMissingError
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key
from kafscale_iceberg.segments.layout import SegmentFooter, build_footer
from tests.support.moto import MotoEndpoint


@pytest.fixture
def store(moto_server: MotoEndpoint) -> S3SegmentStore:
    client = make_s3_client(moto_server.s3_settings())
    return S3SegmentStore(client, moto_server.new_bucket(), "prod")


def _put(store: S3SegmentStore, key: str, body: bytes = b"x") -> None:
    s3: Any = store._s3
    s3.put_object(Bucket=store.bucket, Key=key, Body=body)


def _put_segment(store: S3SegmentStore, topic: str, partition: int, base: int, *, index: bool = True) -> None:
    footer = build_footer(SegmentFooter(body_crc=0, last_offset=base + 9))
    _put(store, format_segment_key("prod", topic, partition, base), b"body" + footer)
    if index:
        _put(store, format_segment_key("prod", topic, partition, base, SegmentObjectKind.INDEX))


def test_lists_only_segments_after_the_given_base_offset(store: S3SegmentStore) -> None:
    for base in (0, 10, 20, 30):
        _put_segment(store, "orders", 0, base, index=base != 30)
    _put(store, "prod/orders/0/segment-00000000000000000010.kfst")
    listed = store.list_segments("orders", 0, after_offset=10)
    assert [(s.base_offset, s.has_index) for s in listed] == [(20, True), (30, False)]
    assert listed[0].key == "prod/orders/0/segment-00000000000000000020.kfs"
    assert listed[0].size_bytes == 20
    assert [s.base_offset for s in store.list_segments("orders", 0, after_offset=None)] == [0, 10, 20, 30]


def test_malformed_segment_key_in_a_listing_is_an_error(store: S3SegmentStore) -> None:
    _put(store, "prod/orders/0/segment-5.kfs")
    with pytest.raises(SegmentKeyError, match=r"segment-5\.kfs"):
        store.list_segments("orders", 0, after_offset=None)


def test_discovers_topics_and_numeric_partitions(store: S3SegmentStore) -> None:
    _put_segment(store, "orders", 0, 0)
    _put_segment(store, "orders", 2, 0)
    _put(store, "prod/orders/lfs/2026/01/01/obj-1")
    _put_segment(store, "payments", 0, 0)
    assert store.list_topics() == ["orders", "payments"]
    assert store.list_partitions("orders") == [0, 2]


def test_reads_the_footer_with_a_ranged_get(store: S3SegmentStore) -> None:
    _put_segment(store, "orders", 0, 40)
    footer = store.read_footer(format_segment_key("prod", "orders", 0, 40))
    assert footer.last_offset == 49


def test_footer_of_an_unfinished_object_is_a_format_error(store: S3SegmentStore) -> None:
    key = format_segment_key("prod", "orders", 0, 0)
    _put(store, key, b"K" * 40)
    with pytest.raises(SegmentFormatError, match=re.escape(key)):
        store.read_footer(key)


def test_missing_objects_are_reported_as_missing(store: S3SegmentStore) -> None:
    key = format_segment_key("prod", "orders", 0, 0)
    assert not store.exists(key)
    with pytest.raises(SegmentObjectMissingError, match=re.escape(key)):
        store.read_footer(key)
    _put_segment(store, "orders", 0, 0)
    assert store.exists(key)
