"""`kafscale-iceberg segments inspect|generate`, and the generator behind it."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import boto3
import pytest

from kafscale_iceberg.cli import main
from kafscale_iceberg.segments.decode import decode_segment
from kafscale_iceberg.segments.generate import generate_segments
from kafscale_iceberg.segments.layout import Codec
from tests.support.moto import MotoEndpoint
from tests.support.segments import encode_segment

KFS_0 = "default/orders/1/segment-00000000000000000000.kfs"


@pytest.fixture
def generated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    code = main(
        [
            "segments",
            "generate",
            "--out",
            str(tmp_path),
            "--partitions",
            "2",
            "--segments",
            "2",
            "--batches-per-segment",
            "3",
            "--records-per-batch",
            "7",
            "--codec",
            "mixed",
            "--headers",
        ]
    )
    assert code == 0
    capsys.readouterr()
    return tmp_path


def test_generate_writes_both_objects_per_segment_with_running_offsets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["segments", "generate", "--out", str(tmp_path), "--topics", "a,b", "--segments", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 2 * 2 * 4 * 100
    names = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("segment-*"))
    assert names == [
        f"default/{topic}/0/segment-{base:020d}.{ext}"
        for topic in ("a", "b")
        for base in (0, 400)
        for ext in ("index", "kfs")
    ]
    second = summary["segments"][1]
    assert (second["base_offset"], second["last_offset"], second["records"]) == (400, 799, 400)


def test_a_second_batch_from_a_start_offset_adds_segments_instead_of_overwriting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["segments", "generate", "--out", str(tmp_path)]) == 0
    first_kfs = (tmp_path / "default/orders/0/segment-00000000000000000000.kfs").read_bytes()
    capsys.readouterr()
    assert main(["segments", "generate", "--out", str(tmp_path), "--start-offset", "400"]) == 0
    (second,) = json.loads(capsys.readouterr().out)["segments"]
    assert (second["base_offset"], second["last_offset"]) == (400, 799)
    assert (tmp_path / "default/orders/0/segment-00000000000000000000.kfs").read_bytes() == first_kfs
    later = decode_segment(
        (tmp_path / "default/orders/0/segment-00000000000000000400.kfs").read_bytes(), source="gen"
    ).records.to_pydict()
    first = decode_segment(first_kfs, source="gen").records.to_pydict()
    assert later["offset"][0] == 400
    assert min(later["timestamp_ms"]) > min(first["timestamp_ms"]) + 300_000  # times follow on
    assert not {json.loads(v)["order_id"] for v in later["value"]} & {
        json.loads(v)["order_id"] for v in first["value"]
    }


def test_generation_is_deterministic_per_seed() -> None:
    def kfs(seed: int) -> list[bytes]:
        return [g.files.kfs for g in generate_segments(partitions=2, codec="mixed", seed=seed)]

    assert kfs(1) == kfs(1)
    assert kfs(1) != kfs(2)


def test_generated_events_are_pizza_order_json() -> None:
    (segment,) = generate_segments(records_per_batch=50, batches_per_segment=2, codec=Codec.ZSTD)
    values = decode_segment(segment.files.kfs, source="gen").records.column("value").to_pylist()
    events = [json.loads(v) for v in values]
    assert {
        "order_id",
        "store_id",
        "customer",
        "items",
        "total",
        "status",
        "event_time",
        "ordered_on",
    } <= set(events[0])
    assert isinstance(events[0]["total"], float)
    assert events[0]["event_time"].startswith(events[0]["ordered_on"] + "T")
    assert 150 < sum(len(v) for v in values) / len(values) < 260
    assert len({e["order_id"] for e in events}) == 100


def test_inspect_prints_one_json_object_per_record(
    generated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["segments", "inspect", str(generated / KFS_0)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 21
    first = json.loads(lines[0])
    assert set(first) == {"partition", "offset", "timestamp_ms", "key", "value", "headers"}
    assert (first["partition"], first["offset"]) == (1, 0)
    assert json.loads(first["value"])["order_id"] == 10_000_001  # UTF-8 text, readable as is
    assert [h["key"] for h in first["headers"]] == ["content-type", "trace-id"]
    assert first["headers"][0]["value"] == "application/json"


def test_inspect_prints_bytes_that_are_not_utf8_as_base64(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = b"\x00\x00\x00\x00\x07\xff\xfe avro"
    path = tmp_path / "segment-00000000000000000000.kfs"
    path.write_bytes(encode_segment(0, 0, 1, values=[binary]).kfs)
    assert main(["segments", "inspect", str(path)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert "value" not in record
    assert base64.b64decode(record["value_base64"]) == binary
    assert main(["segments", "inspect", "--base64", str(path)]) == 0
    assert base64.b64decode(json.loads(capsys.readouterr().out)["value_base64"]) == binary


def test_inspect_outside_the_key_layout_has_null_partitions(
    generated: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    loose = tmp_path_factory.mktemp("loose") / "some.kfs"
    loose.write_bytes((generated / KFS_0).read_bytes())
    assert main(["segments", "inspect", str(loose)]) == 0
    assert {json.loads(line)["partition"] for line in capsys.readouterr().out.splitlines()} == {None}


def test_inspect_summary_shows_header_footer_batches_and_index(
    generated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["segments", "inspect", "--summary", str(generated / KFS_0)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["header"]["message_count"] == 21
    assert summary["footer"]["last_offset"] == 20
    assert [b["codec"] for b in summary["batches"]] == ["none", "gzip", "snappy"]
    assert summary["batches"][0]["position"] == 32
    assert summary["index"]["entries"] == [{"offset": 0, "position": 32}]


def test_inspect_of_a_corrupt_segment_exits_1_with_one_line(
    generated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = generated / KFS_0
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    assert main(["segments", "inspect", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert str(path) in lines[0]
    assert "CRC-32C" in lines[0]


def test_inspect_of_a_missing_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["segments", "inspect", str(tmp_path / "nope.kfs")]) == 1
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_generate_to_s3_honours_the_endpoint(
    moto_server: MotoEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = moto_server.new_bucket()
    args = ["segments", "generate", "--out", f"s3://{bucket}/lake", "--endpoint-url", moto_server.url]
    assert main([*args, "--codec", "snappy"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["segments"][0]["kfs"] == f"s3://{bucket}/lake/default/orders/0/segment-{0:020d}.kfs"
    s3 = boto3.client("s3", endpoint_url=moto_server.url, region_name=moto_server.region)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == [
        f"lake/default/orders/0/segment-{0:020d}.index",
        f"lake/default/orders/0/segment-{0:020d}.kfs",
    ]
    body = s3.get_object(Bucket=bucket, Key=keys[1])["Body"].read()
    assert decode_segment(body, source=keys[1]).record_count == 400
