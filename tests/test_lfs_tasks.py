"""LFS envelopes through a task (no Spark): the four modes, every checksum algorithm, failures, metadata.

Envelopes and blobs are built as KafScale's LFS proxy builds them (`segments.lfs.proxy_value`); blobs
live in a real moto S3 server and are read with the real S3 blob reader. The segment itself is a
local folder (the plan's local source). Bounded memory is checked with a recording `BlobReader` (the
port; no class of ours is replaced).
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.config import Config

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.lfs_blobs import S3BlobReader, blob_reader_for
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.dataplane.lfs import LfsStage
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    FailureKind,
    LfsMode,
    LfsSettings,
    PlannedSegment,
    RunResult,
    RunStatus,
    RunTimings,
    SchemaMode,
)
from kafscale_iceberg.exceptions import LfsBlobMissingError
from kafscale_iceberg.ports import BlobReader
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.generate import generate_segments, write_segments
from kafscale_iceberg.segments.lfs import ChecksumAlg, ProxiedValue, blob_key, proxy_value
from tests.support.moto import MotoEndpoint
from tests.support.spark_job import BASE_TIME_MS, NAMESPACE, TOPIC, SegmentFolder, make_plan

WHEN = datetime(2026, 11, 20, tzinfo=UTC)
SMALL = bytes(range(256)) * 4  # 1 KiB, not UTF-8, not JSON
LARGE = b"L" * 5000
MAX_INLINE = 2000


@pytest.fixture(scope="module")
def blob_bucket(moto_server: MotoEndpoint) -> str:
    return moto_server.new_bucket()


@pytest.fixture(scope="module")
def blobs(moto_server: MotoEndpoint) -> S3BlobReader:
    return S3BlobReader.for_settings(moto_server.s3_settings(), concurrency=4)


class Topic:
    """Records of one partition written as a segment, with their blobs in the blob bucket."""

    def __init__(self, tmp_path: Path, moto: MotoEndpoint, bucket: str) -> None:
        self.tmp_path = tmp_path
        self.s3: Any = moto.client("s3")
        self.bucket = bucket
        self.folder = SegmentFolder(tmp_path / "segments")
        self.values: list[bytes | None] = []
        self.headers: list[tuple[tuple[str, bytes | None], ...]] = []
        self.proxied: dict[int, ProxiedValue] = {}

    def plain(self, value: bytes | None) -> int:
        self.values.append(value)
        self.headers.append(())
        return len(self.values) - 1

    def blob(
        self,
        payload: bytes,
        alg: ChecksumAlg = ChecksumAlg.SHA256,
        *,
        upload: bytes | None = None,
        content_type: str = "application/octet-stream",
        bucket: str | None = None,
    ) -> int:
        """An envelope of `payload` (uploaded as `upload` when given: a blob that differs)."""
        offset = len(self.values)
        key = blob_key(NAMESPACE, TOPIC, at=WHEN, object_id=UUID(int=offset + 1 + 1000 * len(self.proxied)))
        proxied = proxy_value(
            payload,
            bucket=bucket or self.bucket,
            key=key,
            checksum_alg=alg,
            headers={"content-type": content_type},
            created_at=WHEN,
        )
        if upload is not None or bucket is None:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=payload if upload is None else upload)
        self.proxied[offset] = proxied
        self.values.append(proxied.value)
        self.headers.append((("kept", b"h"),))
        return offset

    def envelope(self, raw: bytes) -> int:
        self.values.append(raw)
        self.headers.append(())
        return len(self.values) - 1

    def run(self, reader: BlobReader | None, columns: tuple[ColumnSpec, ...] = (), **lfs: Any) -> Outcome:
        records = [
            Record(offset=o, timestamp_ms=BASE_TIME_MS + o, key=None, value=v, headers=h)
            for o, (v, h) in enumerate(zip(self.values, self.headers, strict=True))
        ]
        self.folder = SegmentFolder(self.tmp_path / f"segments-{len(os.listdir(self.tmp_path))}")
        self.folder.add(0, records)
        schema_mode = lfs.pop("schema_mode", SchemaMode.OFF)
        json_schema = lfs.pop("json_schema", None)
        sizing = (
            {"target_file_size_bytes": lfs.pop("target_file_size_bytes")}
            if "target_file_size_bytes" in lfs
            else {}
        )
        out = str(self.tmp_path / f"out-{len(os.listdir(self.tmp_path))}")
        plan = make_plan(
            self.folder,
            out,
            ranges={0: (-1, len(records) - 1)},
            columns=columns,
            schema_mode=schema_mode,
            json_schema=json_schema,
            lfs=LfsSettings(**lfs),
            **sizing,
        )
        reports = [
            run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore(), blobs=reader)
            for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
        ]
        return Outcome(build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0)))


class Outcome:
    def __init__(self, result: RunResult) -> None:
        self.result = result
        self.rows = _read(result.data_files)
        self.dead = _read(result.dead_letter_files)

    def row(self, offset: int) -> dict[str, Any]:
        (found,) = [r for r in self.rows if r["offset"] == offset]
        return found

    def offsets(self) -> list[int]:
        return [r["offset"] for r in self.rows]

    def dead_letter(self, offset: int) -> dict[str, Any]:
        (found,) = [r for r in self.dead if r["offset"] == offset]
        return found


def _read(files: Any) -> list[dict[str, Any]]:
    rows = [r for f in files for r in pq.read_table(f.uri).to_pylist()]
    return sorted(rows, key=lambda r: r["offset"])


@pytest.fixture
def topic(tmp_path: Path, moto_server: MotoEndpoint, blob_bucket: str) -> Topic:
    return Topic(tmp_path, moto_server, blob_bucket)


# -- every mode x every checksum algorithm ---------------------------------------------------------


@pytest.mark.parametrize("alg", list(ChecksumAlg))
@pytest.mark.parametrize("mode", [m for m in LfsMode if m is not LfsMode.OFF])
def test_every_mode_with_every_checksum_algorithm(
    topic: Topic, blobs: S3BlobReader, mode: LfsMode, alg: ChecksumAlg
) -> None:
    plain_json = topic.plain(b'{"n": 1}')
    small = topic.blob(SMALL, alg)
    large = topic.blob(LARGE, alg)
    plain_text = topic.plain(b"not an envelope, not json")
    null = topic.plain(None)
    inline = MAX_INLINE if mode is LfsMode.HYBRID else 0

    outcome = topic.run(blobs, mode=mode, max_inline_size=inline)

    result = outcome.result
    assert result.status is RunStatus.SUCCEEDED
    assert outcome.dead == []
    assert result.partitions[0].gaps == ()
    assert outcome.row(plain_json)["value"] == b'{"n": 1}'
    assert outcome.row(plain_text)["value"] == b"not an envelope, not json"
    assert outcome.row(null)["value"] is None
    envelope = {o: topic.proxied[o].value for o in (small, large)}
    if mode is LfsMode.SKIP:
        assert outcome.offsets() == [plain_json, plain_text, null]
        assert result.counts.skipped_lfs == 2
        assert result.partitions[0].last_offset == null  # skipped offsets are still committed
        return
    expected = {
        LfsMode.RESOLVE: {small: SMALL, large: LARGE},
        LfsMode.REFERENCE: envelope,
        LfsMode.HYBRID: {small: SMALL, large: envelope[large]},  # 5000 > max_inline_size
    }[mode]
    for offset, value in expected.items():
        assert outcome.row(offset)["value"] == value
        assert outcome.row(offset)["headers"] == '[{"key":"kept","value":"h"}]'
    resolved = [o for o, v in expected.items() if v in (SMALL, LARGE)]
    assert result.counts.lfs.resolved == len(resolved)
    assert result.counts.lfs.resolved_bytes == sum(len(expected[o]) for o in resolved)
    assert sum(result.counts.lfs.duration_counts) == len(resolved)
    assert result.counts.written == 5


# -- failures: dead-lettered with their reason, never dropped ------------------------------------


@pytest.mark.parametrize("alg", [ChecksumAlg.SHA256, ChecksumAlg.MD5, ChecksumAlg.CRC32])
def test_a_blob_that_does_not_match_its_checksum_is_dead_lettered(
    topic: Topic, blobs: S3BlobReader, alg: ChecksumAlg
) -> None:
    good = topic.blob(SMALL, alg)
    tampered = topic.blob(SMALL, alg, upload=SMALL[:-1] + b"!")

    outcome = topic.run(blobs, mode=LfsMode.RESOLVE)

    assert outcome.offsets() == [good]
    dead = outcome.dead_letter(tampered)
    assert dead["error_kind"] == "lfs_checksum"
    assert topic.proxied[tampered].blob_key in dead["error"]
    assert f"{alg.value} checksum mismatch" in dead["error"]
    assert dead["value"] == topic.proxied[tampered].value  # the record as it arrived
    assert outcome.result.counts.lfs.errors == {"checksum": 1}


def test_validate_checksum_false_keeps_a_mismatched_blob(topic: Topic, blobs: S3BlobReader) -> None:
    tampered = topic.blob(SMALL, upload=b"something else entirely")
    outcome = topic.run(blobs, mode=LfsMode.RESOLVE, validate_checksum=False)
    assert outcome.row(tampered)["value"] == b"something else entirely"


def test_each_failure_class_is_dead_lettered_with_its_reason_and_key(
    topic: Topic, blobs: S3BlobReader
) -> None:
    ok = topic.blob(SMALL)
    missing = topic.blob(SMALL, bucket=topic.bucket, upload=None)
    topic.s3.delete_object(Bucket=topic.bucket, Key=topic.proxied[missing].blob_key)
    too_large = topic.blob(LARGE)
    undecodable = topic.envelope(b'{"kfs_lfs":1,"bucket":"b","key":"orphan/obj-1","size":3}')
    not_json = topic.envelope(b'{"kfs_lfs":1,"bucket":"b",')
    other_bucket = topic.blob(SMALL, bucket="someone-elses-bucket")
    bad_alg = topic.envelope(
        b'{"kfs_lfs":1,"bucket":"'
        + topic.bucket.encode()
        + b'","key":"k/obj-2","sha256":"aa","checksum_alg":"blake3"}'
    )

    outcome = topic.run(blobs, mode=LfsMode.RESOLVE, max_inline_size=2000, buckets=(topic.bucket,))

    assert outcome.offsets() == [ok]
    kinds = {r["offset"]: r["error_kind"] for r in outcome.dead}
    assert kinds == {
        missing: "lfs_missing_blob",
        too_large: "lfs_too_large",
        undecodable: "lfs_decode",
        not_json: "lfs_decode",
        other_bucket: "lfs_missing_blob",
        bad_alg: "lfs_decode",
    }
    assert topic.proxied[missing].blob_key in outcome.dead_letter(missing)["error"]
    assert "does not exist" in outcome.dead_letter(missing)["error"]
    assert topic.proxied[too_large].blob_key in outcome.dead_letter(too_large)["error"]
    assert "5000 bytes, more than lfs.max_inline_size (2000)" in outcome.dead_letter(too_large)["error"]
    assert "orphan/obj-1" in outcome.dead_letter(undecodable)["error"]
    assert "missing required field(s) sha256" in outcome.dead_letter(undecodable)["error"]
    assert "lfs.blob_buckets" in outcome.dead_letter(other_bucket)["error"]
    assert "'blake3' is not supported" in outcome.dead_letter(bad_alg)["error"]
    counts = outcome.result.counts
    assert (counts.dead_lettered, counts.written) == (6, 1)
    assert counts.lfs.errors == {"missing_blob": 2, "too_large": 1, "decode": 3}
    assert outcome.result.partitions[0].records_dead_lettered == 6


def test_undecodable_envelopes_are_dead_lettered_in_reference_mode_too(topic: Topic) -> None:
    broken = topic.envelope(b'{"kfs_lfs":1,"bucket":"b","key":"k"}')
    kept = topic.blob(SMALL)
    outcome = topic.run(None, mode=LfsMode.REFERENCE)
    assert outcome.offsets() == [kept]
    assert outcome.dead_letter(broken)["error_kind"] == "lfs_decode"


def test_skip_mode_leaves_out_even_undecodable_envelopes(topic: Topic) -> None:
    topic.envelope(b'{"kfs_lfs":1,"bucket":"b","key":"k"}')
    plain = topic.plain(b"{}")
    outcome = topic.run(None, mode=LfsMode.SKIP)
    assert outcome.offsets() == [plain]
    assert outcome.result.counts.skipped_lfs == 1
    assert outcome.dead == []


def test_strict_mode_dead_letters_lfs_failures_instead_of_failing(topic: Topic, blobs: S3BlobReader) -> None:
    topic.blob(SMALL, upload=b"tampered")
    fine = topic.plain(b'{"n": 2}')
    outcome = topic.run(
        blobs,
        mode=LfsMode.RESOLVE,
        columns=(ColumnSpec(name="n", type=ColumnType.LONG),),
        schema_mode=SchemaMode.STRICT,
        json_schema={"type": "object"},
    )
    assert outcome.result.status is RunStatus.SUCCEEDED
    assert outcome.offsets() == [fine]
    assert [r["error_kind"] for r in outcome.dead] == ["lfs_checksum"]


class _FailingHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def throttling_s3() -> Iterator[str]:
    """An HTTP server answering every request with S3's 503 SlowDown (S3 under throttling)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FailingHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _reader_at(url: str) -> S3BlobReader:
    config = Config(retries={"mode": "standard", "max_attempts": 1}, s3={"addressing_style": "path"})
    return S3BlobReader(boto3.client("s3", endpoint_url=url, region_name="us-east-1", config=config))


def test_throttling_fails_the_task_and_dead_letters_nothing(topic: Topic, throttling_s3: str) -> None:
    offset = topic.blob(SMALL)
    outcome = topic.run(_reader_at(throttling_s3), mode=LfsMode.RESOLVE)
    result = outcome.result
    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.BLOB_UNAVAILABLE
    assert topic.proxied[offset].blob_key in result.failure.message
    assert "SlowDown" in result.failure.message
    assert (result.dead_letter_files, result.data_files) == ((), ())


def test_an_unreachable_endpoint_fails_the_task(topic: Topic) -> None:
    topic.blob(SMALL)
    outcome = topic.run(_reader_at("http://127.0.0.1:9"), mode=LfsMode.RESOLVE)
    assert outcome.result.failure is not None
    assert outcome.result.failure.kind is FailureKind.BLOB_UNAVAILABLE


# -- store_metadata -----------------------------------------------------------------------------------


def test_store_metadata_fills_the_lfs_columns_from_blob_or_envelope(
    topic: Topic, blobs: S3BlobReader
) -> None:
    # A mapping column makes values JSON documents, so the resolved blob is one.
    document = json.dumps({"lfs_key": "from the blob", "pixels": "x" * 1000}).encode()
    resolved = topic.blob(document, ChecksumAlg.CRC32, content_type="image/png")
    referenced = topic.blob(LARGE, ChecksumAlg.NONE)
    plain = topic.plain(b'{"lfs_key": "from the value", "lfs_bucket": "json"}')

    outcome = topic.run(
        blobs,
        mode=LfsMode.HYBRID,
        max_inline_size=MAX_INLINE,
        store_metadata=True,
        columns=(ColumnSpec(name="lfs_key", type=ColumnType.STRING),),
    )

    small, large = topic.proxied[resolved].envelope, topic.proxied[referenced].envelope
    columns = (
        "lfs_content_type",
        "lfs_blob_size",
        "lfs_checksum",
        "lfs_checksum_alg",
        "lfs_bucket",
        "lfs_key",
    )
    row = outcome.row(resolved)
    # LFS metadata wins over the mapping column of the same name (the Go processor's precedence).
    assert [row[c] for c in columns] == [
        "image/png",
        len(document),
        small.checksum,
        "crc32",
        small.bucket,
        small.key,
    ]
    row = outcome.row(referenced)  # alg none: the sha256 field, algorithm as the envelope names it
    assert [row[c] for c in columns] == [
        "application/octet-stream",
        len(LARGE),
        large.sha256,
        "none",
        large.bucket,
        large.key,
    ]
    # Not an envelope: a mapping column of that name comes from the value; the others stay null.
    row = outcome.row(plain)
    assert [row[c] for c in columns] == [None, None, None, None, None, "from the value"]
    assert list(pq.read_schema(outcome.result.data_files[0].uri).names)[8:] == [
        "lfs_key",
        "lfs_content_type",
        "lfs_blob_size",
        "lfs_checksum",
        "lfs_checksum_alg",
        "lfs_bucket",
    ]


def test_without_store_metadata_there_are_no_lfs_columns(topic: Topic, blobs: S3BlobReader) -> None:
    topic.blob(SMALL)
    outcome = topic.run(blobs, mode=LfsMode.RESOLVE)
    assert not [n for n in pq.read_schema(outcome.result.data_files[0].uri).names if n.startswith("lfs_")]


def test_resolved_json_payloads_feed_the_mapping_columns(topic: Topic, blobs: S3BlobReader) -> None:
    offset = topic.blob(json.dumps({"order_id": 41, "note": "x" * 3000}).encode())
    outcome = topic.run(
        blobs, mode=LfsMode.RESOLVE, columns=(ColumnSpec(name="order_id", type=ColumnType.LONG),)
    )
    assert outcome.row(offset)["order_id"] == 41


# -- bounded memory ---------------------------------------------------------------------------------


class RecordingReader:
    """A `BlobReader` over a dict that records how many reads, and how many bytes, run at once."""

    def __init__(self, blobs: dict[str, bytes], gate: threading.Event | None = None) -> None:
        self.blobs = blobs
        self.lock = threading.Lock()
        self.active = self.active_bytes = self.max_active = self.max_active_bytes = 0

    def read_blob(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        if key not in self.blobs:
            raise LfsBlobMissingError(bucket, key)
        size = len(self.blobs[key])
        with self.lock:
            self.active += 1
            self.active_bytes += size
            self.max_active = max(self.max_active, self.active)
            self.max_active_bytes = max(self.max_active_bytes, self.active_bytes)
        threading.Event().wait(0.01)
        with self.lock:
            self.active -= 1
            self.active_bytes -= size
        return self.blobs[key]


def _envelope_table(sizes: list[int]) -> tuple[pa.Table, dict[str, bytes]]:
    blobs: dict[str, bytes] = {}
    values = []
    for n, size in enumerate(sizes):
        proxied = proxy_value(bytes([n % 256]) * size, bucket="b", key=f"k/obj-{n}", created_at=WHEN)
        blobs[proxied.blob_key] = proxied.blob
        values.append(proxied.value)
    table = pa.table(
        {"offset": pa.array(range(len(sizes)), pa.int64()), "value": pa.array(values, pa.binary())}
    )
    return table, blobs


def test_blobs_are_fetched_in_parallel_up_to_resolve_concurrency() -> None:
    table, blobs = _envelope_table([1000] * 24)
    reader = RecordingReader(blobs)
    stage = LfsStage(LfsSettings(mode=LfsMode.RESOLVE, resolve_concurrency=3), reader=reader)
    try:
        parts = list(stage.parts(table))
    finally:
        stage.close()
    assert reader.max_active == 3
    values = [v for p in parts for v in p.records.column("value").to_pylist()]
    assert values == [blobs[f"k/obj-{n}"] for n in range(24)]  # order preserved


def test_a_huge_blob_is_never_held_beside_more_than_a_few_others() -> None:
    mib = 1024 * 1024
    sizes = [mib] * 6 + [20 * mib] + [mib] * 6  # a "200 MB" blob, scaled down
    table, blobs = _envelope_table(sizes)
    reader = RecordingReader(blobs)
    stage = LfsStage(
        LfsSettings(mode=LfsMode.RESOLVE, resolve_concurrency=8),
        reader=reader,
        part_bytes=2 * mib,
        inflight_bytes=4 * mib,
    )
    held = []
    try:
        for part in stage.parts(table):
            held.append(sum(len(v) for v in part.records.column("value").to_pylist()))
    finally:
        stage.close()
    assert reader.max_active_bytes <= 20 * mib  # the big one alone, or at most 4 MiB of small ones
    assert max(held) <= 20 * mib + 2 * mib  # a part: under part_bytes, plus at most one blob
    assert sum(held) == sum(sizes)
    assert len(held) >= 5


# -- what `segments generate --lfs-every` writes -------------------------------------------------------


def test_generated_lfs_segments_resolve_to_their_blobs(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    written = write_segments(
        str(root),
        generate_segments(
            topics=("images",),
            namespace="prod",
            batches_per_segment=2,
            records_per_batch=10,
            lfs_every=4,
            lfs_blob_bytes=3000,
            lfs_bucket="kafscale-blobs",
            lfs_checksum_alg=ChecksumAlg.MD5,
        ),
    )
    (segment,) = written
    assert [Path(b).relative_to(root).parts[:3] for b in segment.blobs] == [("prod", "images", "lfs")] * 5
    folder = SegmentFolder(
        root,
        topic="images",
        namespace="prod",
        written={
            0: [
                PlannedSegment(
                    key=str(Path(segment.kfs).relative_to(root)),
                    base_offset=0,
                    last_offset=19,
                    size_bytes=segment.kfs_bytes,
                )
            ]
        },
    )
    plan = make_plan(
        folder,
        str(tmp_path / "out"),
        ranges={0: (-1, 19)},
        columns=(ColumnSpec(name="order_id", type=ColumnType.LONG, required=True),),
        lfs=LfsSettings(mode=LfsMode.RESOLVE, store_metadata=True, buckets=("kafscale-blobs",)),
    )
    blobs = blob_reader_for(plan.source, S3Settings(), concurrency=2)
    (task,) = plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    report = run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore(), blobs=blobs)
    result = build_run_result(plan, [report], RunTimings(started_at_ms=0, ended_at_ms=0))
    rows = _read(result.data_files)
    assert result.counts.lfs.resolved == 5
    assert len(rows) == 20
    for row in rows:
        if row["offset"] % 4 == 3:
            assert len(row["value"]) == 3000
            assert json.loads(row["value"])["order_id"] == row["order_id"]
            assert (row["lfs_checksum_alg"], row["lfs_bucket"]) == ("md5", "kafscale-blobs")
        else:
            assert row["lfs_key"] is None


def test_hybrid_keeps_envelopes_without_a_size_as_references(topic: Topic, blobs: S3BlobReader) -> None:
    proxied = topic.proxied
    offset = topic.blob(SMALL)
    document = json.loads(topic.values[offset] or b"{}")
    document["size"] = 0  # Go resolves only when 0 < size <= max_inline_size
    topic.values[offset] = json.dumps(document, separators=(",", ":")).encode()
    outcome = topic.run(blobs, mode=LfsMode.HYBRID, max_inline_size=MAX_INLINE)
    assert outcome.row(offset)["value"] == topic.values[offset]
    assert outcome.result.counts.lfs.resolved == 0
    assert proxied[offset].blob == SMALL


def test_resolved_blobs_still_roll_data_files_at_the_target_size(topic: Topic, blobs: S3BlobReader) -> None:
    blob_size, target = 300_000, 512 * 1024
    for _ in range(8):
        topic.blob(os.urandom(blob_size))  # incompressible: the file grows by each blob
    outcome = topic.run(blobs, mode=LfsMode.RESOLVE, target_file_size_bytes=target)
    files = outcome.result.data_files
    assert len(outcome.rows) == 8
    assert len(files) >= 3
    sizes = [f.size_bytes for f in files]
    assert all(size <= target + blob_size + 64 * 1024 for size in sizes), sizes


def test_concurrency_one_fetches_in_order_without_threads() -> None:
    table, blobs = _envelope_table([100] * 5)
    reader = RecordingReader(blobs)
    stage = LfsStage(LfsSettings(mode=LfsMode.RESOLVE, resolve_concurrency=1), reader=reader)
    before = threading.active_count()
    try:
        (part,) = stage.parts(table)
        assert threading.active_count() == before
    finally:
        stage.close()
    assert reader.max_active == 1
    assert part.records.column("value").to_pylist() == [blobs[f"k/obj-{n}"] for n in range(5)]


def test_off_mode_leaves_envelopes_alone(topic: Topic) -> None:
    offset = topic.blob(SMALL)
    outcome = topic.run(None, mode=LfsMode.OFF, store_metadata=False)
    assert outcome.row(offset)["value"] == topic.proxied[offset].value
    assert outcome.result.counts.lfs.resolved == 0


def test_conversion_failures_are_counted_beside_lfs_dead_letters(topic: Topic, blobs: S3BlobReader) -> None:
    tampered = topic.blob(SMALL, upload=b"tampered")
    mistyped = topic.plain(b'{"n": "not a number"}')
    outcome = topic.run(blobs, mode=LfsMode.RESOLVE, columns=(ColumnSpec(name="n", type=ColumnType.LONG),))
    assert outcome.dead_letter(tampered)["error_kind"] == "lfs_checksum"
    assert outcome.row(mistyped)["n"] is None
    assert outcome.result.counts.conversion_failures == {"n": 1}
