"""Segment keys: strict parsing and formatting of `{ns}/{topic}/{partition}/segment-{20 digits}.kfs`."""

from __future__ import annotations

import pytest

from kafscale_iceberg.exceptions import SegmentKeyError
from kafscale_iceberg.segments.keys import (
    SegmentId,
    SegmentObjectKind,
    decode_event_key,
    format_segment_key,
    infer_segment_key,
    match_segment_key,
    parse_segment_key,
    topic_prefix,
    validate_topic,
)

KFS = "production/orders/0/segment-00000000000000000042.kfs"


def test_formats_the_broker_key_with_20_digit_padding() -> None:
    assert format_segment_key("production", "orders", 0, 42) == KFS
    assert (
        format_segment_key("production", "orders", 0, 42, SegmentObjectKind.INDEX)
        == "production/orders/0/segment-00000000000000000042.index"
    )


def test_empty_namespace_means_bucket_root() -> None:
    assert format_segment_key("", "orders", 3, 0) == "orders/3/segment-00000000000000000000.kfs"
    parsed = parse_segment_key("orders/3/segment-00000000000000000007.index", "")
    assert parsed.segment == SegmentId("", "orders", 3, 7)
    assert parsed.kind is SegmentObjectKind.INDEX


def test_namespace_slashes_are_trimmed() -> None:
    assert parse_segment_key(KFS, "/production/").segment.namespace == "production"
    assert topic_prefix("/production/", "orders") == "production/orders/"


def test_parses_segment_and_round_trips() -> None:
    parsed = parse_segment_key(KFS, "production")
    assert parsed.segment == SegmentId("production", "orders", 0, 42)
    assert parsed.kind is SegmentObjectKind.SEGMENT
    assert parsed.segment.segment_key == KFS
    assert parsed.segment.index_key == KFS.removesuffix(".kfs") + ".index"
    assert parsed.segment.partition_prefix == "production/orders/0/"


@pytest.mark.parametrize(
    "key",
    [
        "production/orders/lfs/2026/01/02/obj-1234",  # LFS blob
        "production/orders/0/segment-00000000000000000042.kfst",  # KAFSQL sidecar
        "production/manifest.json",
        "other-namespace/orders/0/segment-00000000000000000042.kfs",
        "production-2/orders/0/segment-00000000000000000042.kfs",  # prefix match is not enough
        "etcd-snapshots/2026.db",
    ],
)
def test_objects_that_are_not_segments_are_not_matched(key: str) -> None:
    assert match_segment_key(key, "production") is None


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("production/orders/0/segment-42.kfs", "20 digits"),
        ("production/orders/00/segment-00000000000000000042.kfs", "partition"),
        ("production/orders/-1/segment-00000000000000000042.kfs", "partition"),
        ("production/orders/2147483648/segment-00000000000000000042.kfs", "partition"),
        ("production/or ders/0/segment-00000000000000000042.kfs", "topic"),
        ("production/../0/segment-00000000000000000042.kfs", "topic"),
        ("production/orders/0/extra/segment-00000000000000000042.kfs", "expected"),
        ("production/segment-00000000000000000042.kfs", "expected"),
        ("production/orders/0/segment-99999999999999999999.kfs", "2^63-1"),
    ],
)
def test_malformed_segment_keys_are_errors_naming_the_key(key: str, problem: str) -> None:
    with pytest.raises(SegmentKeyError) as info:
        match_segment_key(key, "production")
    assert key in str(info.value)
    assert problem in str(info.value)


def test_parse_rejects_non_segment_objects_by_name() -> None:
    with pytest.raises(SegmentKeyError, match=r"manifest\.json"):
        parse_segment_key("production/manifest.json", "production")


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "a b", "ünïcode", "x" * 250, "a%2Fb"])
def test_invalid_topics_are_rejected_never_turned_into_paths(topic: str) -> None:
    with pytest.raises(SegmentKeyError):
        validate_topic(topic)
    with pytest.raises(SegmentKeyError):
        format_segment_key("ns", topic, 0, 0)


def test_valid_topic_names() -> None:
    for topic in ["orders", "a.b-c_d", "x" * 249, "_internal"]:
        assert validate_topic(topic) == topic


def test_event_keys_are_url_decoded() -> None:
    assert decode_event_key("production%2Forders%2F0%2Fsegment-00000000000000000042.kfs") == KFS
    assert decode_event_key("a+b%2Bc") == "a b+c"


def test_infers_segment_identity_from_a_path_without_namespace() -> None:
    parsed = infer_segment_key("/tmp/x/prod/orders/2/segment-00000000000000000100.kfs")
    assert parsed is not None
    assert parsed.segment == SegmentId("tmp/x/prod", "orders", 2, 100)
    assert infer_segment_key("/tmp/whatever.kfs") is None
    assert infer_segment_key("segment-00000000000000000100.kfs") is None
