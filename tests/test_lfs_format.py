"""LFS envelopes as KafScale's `pkg/lfs` reads them: detection, decoding, checksums, what the proxy writes."""

from __future__ import annotations

import hashlib
import json
import zlib
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pyarrow as pa
import pytest

from kafscale_iceberg.cli import main
from kafscale_iceberg.dataplane.lfs import envelope_rows
from kafscale_iceberg.exceptions import EnvelopeError
from kafscale_iceberg.segments.decode import decode_segment
from kafscale_iceberg.segments.lfs import (
    ChecksumAlg,
    Envelope,
    blob_key,
    compute_checksum,
    decode_envelope,
    encode_envelope,
    envelope_checksum,
    envelope_metadata,
    is_lfs_envelope,
    proxy_value,
)

PAYLOAD = b"a large payload \x00\xff" * 10
WHEN = datetime(2026, 11, 20, 8, 30, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b'{"kfs_lfs":1,"bucket":"b"}', True),
        (b'{"kfs_lfs":1}', False),  # 13 bytes: shorter than 15
        (b'{"kfs_lfs": 1 }', True),  # exactly 15 bytes
        (b' {"kfs_lfs":1,"bucket":"b"}', False),  # must start with {
        (b'{"padding":"' + b"x" * 40 + b'","kfs_lfs":1}', False),  # marker after byte 50
        (b'{"' + b"x" * 35 + b'":0,"kfs_lfs":1}', True),  # marker ends exactly at byte 50
        (b'{"' + b"x" * 36 + b'":0,"kfs_lfs":1}', False),  # one byte later
        (b'{"KFS_LFS":1,"bucket":"b","key":"k"}', False),  # the marker is case-sensitive
        (b"", False),
        (None, False),
    ],
)
def test_detection_is_go_is_lfs_envelope(value: bytes | None, expected: bool) -> None:
    assert is_lfs_envelope(value) is expected
    if value is not None:
        assert envelope_rows(pa.array([value], pa.binary())).tolist() == ([0] if expected else [])


def test_vectorized_detection_skips_nulls_and_plain_values() -> None:
    values = pa.array([b"{}", None, b'{"kfs_lfs":1,"bucket":"b"}', b"plain text value"], pa.binary())
    assert envelope_rows(values).tolist() == [2]


def test_the_proxy_envelope_is_go_json_marshal_of_the_struct() -> None:
    key = blob_key("prod", "images", at=WHEN, object_id=UUID(int=7))
    proxied = proxy_value(
        PAYLOAD,
        bucket="blobs",
        key=key,
        checksum_alg=ChecksumAlg.MD5,
        headers={"content-type": "image/png", "x-request-id": "r<1>", "secret": "s"},
        created_at=WHEN,
        proxy_id="proxy-1",
    )
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    assert (
        proxied.value
        == (
            '{"kfs_lfs":1,"bucket":"blobs","key":"prod/images/lfs/2026/11/20/obj-00000000-0000-0000-0000-000000000007",'
            f'"size":{len(PAYLOAD)},"sha256":"{sha}","checksum":"{md5}","checksum_alg":"md5",'
            '"content_type":"image/png","original_headers":{"content-type":"image/png","x-request-id":"r\\u003c1\\u003e"},'
            '"created_at":"2026-11-20T08:30:05Z","proxy_id":"proxy-1"}'
        ).encode()
    )
    assert decode_envelope(proxied.value) == proxied.envelope


def test_checksum_none_omits_the_checksum_but_keeps_sha256() -> None:
    proxied = proxy_value(PAYLOAD, bucket="b", key="k", checksum_alg=ChecksumAlg.NONE, created_at=WHEN)
    document = json.loads(proxied.value)
    assert "checksum" not in document
    assert document["checksum_alg"] == "none"
    assert document["sha256"] == hashlib.sha256(PAYLOAD).hexdigest()
    assert envelope_checksum(proxied.envelope).verify is False


def test_blob_keys_default_the_namespace_like_the_proxy() -> None:
    assert blob_key("", "t", at=WHEN, object_id=UUID(int=1)).startswith("default/t/lfs/2026/11/20/obj-")


@pytest.mark.parametrize(
    ("alg", "expected"),
    [
        (ChecksumAlg.SHA256, hashlib.sha256(PAYLOAD).hexdigest()),
        (ChecksumAlg.MD5, hashlib.md5(PAYLOAD).hexdigest()),
        (ChecksumAlg.CRC32, f"{zlib.crc32(PAYLOAD):08x}"),
        (ChecksumAlg.NONE, ""),
    ],
)
def test_compute_checksum_is_lowercase_hex(alg: ChecksumAlg, expected: str) -> None:
    assert compute_checksum(alg, PAYLOAD) == expected


def test_crc32_is_ieee_big_endian_hex() -> None:
    assert compute_checksum(ChecksumAlg.CRC32, b"123456789") == "cbf43926"


def test_envelope_checksum_falls_back_to_sha256() -> None:
    base = Envelope(version=1, bucket="b", key="k", sha256="aa")
    assert envelope_checksum(base) == envelope_checksum(Envelope(1, "b", "k", "aa", checksum_alg="SHA256 "))
    assert (envelope_checksum(base).alg, envelope_checksum(base).value) == (ChecksumAlg.SHA256, "aa")
    md5_without_checksum = Envelope(version=1, bucket="b", key="k", sha256="aa", checksum_alg="md5")
    fallback = envelope_checksum(md5_without_checksum)
    assert (fallback.alg, fallback.value, fallback.verify) == (ChecksumAlg.SHA256, "aa", True)
    crc = envelope_checksum(Envelope(1, "b", "k", "aa", checksum="0a0b0c0d", checksum_alg="crc32"))
    assert (crc.alg, crc.value) == (ChecksumAlg.CRC32, "0a0b0c0d")
    with pytest.raises(EnvelopeError, match="'blake3' is not supported"):
        envelope_checksum(Envelope(1, "b", "k", "aa", checksum_alg="blake3"))


def test_decoding_matches_go_json_unmarshal() -> None:
    # Case-insensitive names, last duplicate wins, unknown keys and nulls ignored.
    envelope = decode_envelope(
        b'{"kfs_lfs":1,"Bucket":"x","bucket":"b","KEY":"k","sha256":"s","size":null,"extra":[1,2]}'
    )
    assert (envelope.version, envelope.bucket, envelope.key, envelope.sha256, envelope.size) == (
        1,
        "b",
        "k",
        "s",
        0,
    )
    # Invalid UTF-8 inside a string reads as U+FFFD, as Go's decoder does.
    assert decode_envelope(b'{"kfs_lfs":1,"bucket":"b","key":"k\xff","sha256":"s"}').key == "k\ufffd"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b'{"kfs_lfs":1,"bucket":"b","key":"k"', "not JSON"),
        (b'{"kfs_lfs":0,"bucket":"b","key":"k","sha256":"s"}', "kfs_lfs"),
        (b'{"kfs_lfs":1,"bucket":"","key":"k","sha256":"s"}', "bucket"),
        (b'{"kfs_lfs":1,"bucket":"b","key":"k"}', "sha256"),
        (b'{"kfs_lfs":1.5,"bucket":"b","key":"k","sha256":"s"}', "whole number"),
        (b'{"kfs_lfs":"1","bucket":"b","key":"k","sha256":"s"}', "whole number"),
        (b'{"kfs_lfs":1,"bucket":"b","key":"k","sha256":"s","size":"12"}', "'size' must be a whole number"),
        (b'{"kfs_lfs":1,"bucket":7,"key":"k","sha256":"s"}', "'bucket' must be a string"),
        (b'{"kfs_lfs":1,"bucket":"b","key":"k","sha256":"s","original_headers":{"a":1}}', "header 'a'"),
        (b'{"kfs_lfs":1,"bucket":"b","key":"k","sha256":"s"} trailing', "not JSON"),
    ],
)
def test_undecodable_envelopes_say_why(value: bytes, problem: str) -> None:
    with pytest.raises(EnvelopeError, match=problem):
        decode_envelope(value)


def test_reference_metadata_uses_the_sha256_field_when_there_is_no_checksum() -> None:
    envelope = Envelope(1, "b", "k", "abc", size=12, content_type="text/plain")
    assert envelope_metadata(envelope) == {
        "lfs_content_type": "text/plain",
        "lfs_blob_size": 12,
        "lfs_checksum": "abc",
        "lfs_checksum_alg": "sha256",
        "lfs_bucket": "b",
        "lfs_key": "k",
    }


def test_encoding_refuses_what_go_refuses() -> None:
    with pytest.raises(EnvelopeError):
        encode_envelope(Envelope(version=1, bucket="b", key="", sha256="s"))


def test_segments_generate_writes_blobs_and_envelopes_as_the_proxy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bucket"
    args = ["segments", "generate", "--out", str(out), "--namespace", "prod", "--topics", "scans"]
    args += ["--batches-per-segment", "1", "--records-per-batch", "6", "--lfs-every", "3"]
    args += ["--lfs-blob-bytes", "2048", "--lfs-checksum-alg", "crc32", "--lfs-bucket", "blobs"]
    assert main(args) == 0
    (segment,) = json.loads(capsys.readouterr().out)["segments"]
    assert len(segment["blobs"]) == 2
    kfs = out / "prod/scans/0/segment-00000000000000000000.kfs"
    decoded = decode_segment(kfs.read_bytes(), source=str(kfs))
    values = decoded.records.column("value").to_pylist()
    envelopes = [decode_envelope(v) for v in values if is_lfs_envelope(v)]
    assert [e.key for e in envelopes] == [str(Path(b).relative_to(out)) for b in segment["blobs"]]
    for envelope in envelopes:
        blob = (out / envelope.key).read_bytes()
        assert (envelope.bucket, envelope.checksum_alg, envelope.size, len(blob)) == (
            "blobs",
            "crc32",
            2048,
            2048,
        )
        assert envelope.checksum == compute_checksum(ChecksumAlg.CRC32, blob)
