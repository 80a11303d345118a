"""LFS blob resolution per core: one task's bounded concurrent fetches vs sequential GETs of the same blobs.

Run with `python -m bench.lfs` (or `make bench-lfs`). A moto server runs as its own process; blobs of
4 KB, 256 KB and 8 MB are uploaded as KafScale's LFS proxy stores them, and one segment per size
holds their envelopes. Reads go through `bench.s3_proxy` (its own process too), which makes
moto answer like S3: `--latency-ms` first-byte latency per GET (default 30) and `--mbps` per
connection (default 80 MB/s); `--loopback` reads moto directly instead. For each size, in the same
run and on the same blobs:

- **ours**: `LfsStage.parts` with `resolve_concurrency` (default 8) over the segment's records - the
  GETs in parallel with bounded memory, sha256 verified, values replaced - as one Spark task runs it
  (one core); and the whole task (`run_task`: decode, resolve, convert, write Parquet);
- **ours, concurrency 1**: the same stage fetching one blob at a time (what the code costs beside
  plain GETs);
- **sequential**: one boto3 GET after the other, each body read (the Go processor's single-worker
  cost; no checksum: a floor for the sequential approach).

Each figure is the best of `--repeats`. blobs/s and MB/s are per wall second of the one task (one
core); `cpu_s_per_mb` is this process's CPU seconds per MB (moto and the proxy run in their own
processes).
MB = 1e6 bytes of blob. The last line is one JSON object with `vs_sequential` per size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import boto3
from botocore.config import Config

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.lfs_blobs import S3BlobReader
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.dataplane.lfs import LfsStage
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.runs import (
    ConversionSettings,
    LfsMode,
    LfsSettings,
    PartitionPlan,
    PlannedSegment,
    RunPlan,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.local.embedded import free_port
from kafscale_iceberg.segments.decode import Record, decode_segment
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.segments.lfs import ChecksumAlg, blob_key, proxy_value

BUCKET = "lfs-bench"
NAMESPACE = "bench"
WHEN = datetime(2026, 11, 20, tzinfo=UTC)
SIZES = {"4KB": (4 * 1024, 400), "256KB": (256 * 1024, 120), "8MB": (8 * 1024 * 1024, 16)}


@dataclass(frozen=True)
class Workload:
    label: str
    blob_bytes: int
    keys: list[str]
    plan: RunPlan

    @property
    def mb(self) -> float:
        return self.blob_bytes * len(self.keys) / 1e6


def start_moto_process() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
            return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("moto_server did not start")


def build_workload(s3: Any, root: Path, label: str, size: int, count: int, concurrency: int) -> Workload:
    topic = f"blobs-{label.lower()}"
    records, keys = [], []
    for n in range(count):
        payload = (n.to_bytes(4, "big") + os.urandom(60)) * (size // 64) + b"\0" * (size % 64)
        key = blob_key(NAMESPACE, topic, at=WHEN, object_id=UUID(int=n + 1))
        proxied = proxy_value(
            payload, bucket=BUCKET, key=key, checksum_alg=ChecksumAlg.SHA256, created_at=WHEN
        )
        s3.put_object(Bucket=BUCKET, Key=key, Body=proxied.blob)
        keys.append(key)
        records.append(Record(offset=n, timestamp_ms=1_795_132_800_000 + n, key=None, value=proxied.value))
    files = build_segment(
        [encode_record_batch(records[i : i + 100]) for i in range(0, count, 100)],
        created_at_ms=1_795_132_800_000,
    )
    segment_key = format_segment_key(NAMESPACE, topic, 0, 0)
    (root / segment_key).parent.mkdir(parents=True, exist_ok=True)
    (root / segment_key).write_bytes(files.kfs)
    run_id = make_run_id(topic, [(0, -1, count - 1)])
    plan = RunPlan(
        run_id=run_id,
        topic=topic,
        created_at_ms=0,
        source=SegmentSource(root=str(root)),
        partitions=(
            PartitionPlan(
                partition=0,
                start_exclusive=-1,
                end_inclusive=count - 1,
                segments=(
                    PlannedSegment(
                        key=segment_key, base_offset=0, last_offset=count - 1, size_bytes=len(files.kfs)
                    ),
                ),
            ),
        ),
        table=TableTarget(identifier="bench.blobs", data_uri=str(root / "out" / label / "data")),
        dead_letter_table=TableTarget(
            identifier="bench.blobs__dlq", data_uri=str(root / "out" / label / "dlq")
        ),
        conversion=ConversionSettings(
            lfs=LfsSettings(mode=LfsMode.RESOLVE, resolve_concurrency=concurrency, buckets=(BUCKET,))
        ),
        result_uri=str(root / "out" / label / "result.json"),
    )
    return Workload(label, size, keys, plan)


def timed(action: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    action()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(
    workload: Workload, reader: S3BlobReader, client: Any, repeats: int, root: Path
) -> dict[str, Any]:
    segment = workload.plan.partitions[0].segments[0]
    records = decode_segment((root / segment.key).read_bytes(), source=segment.key, partition=0).records

    def ours_stage(settings: LfsSettings = workload.plan.conversion.lfs) -> None:
        stage = LfsStage(settings, reader=reader)
        try:
            resolved = sum(p.records.column("value").nbytes for p in stage.parts(records))
        finally:
            stage.close()
        assert resolved >= workload.blob_bytes * len(workload.keys)

    def ours_task() -> None:
        (task,) = plan_tasks(workload.plan, max_tasks=1, min_task_bytes=1)
        report = run_task(workload.plan, task, reader=DocumentStore(), sink=StagedFileStore(), blobs=reader)
        assert report.failure is None
        assert report.segments[0].lfs.resolved == len(workload.keys)

    def sequential() -> None:
        total = 0
        for key in workload.keys:
            total += len(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        assert total == workload.blob_bytes * len(workload.keys)

    figures: dict[str, tuple[float, float]] = {}
    one_at_a_time = workload.plan.conversion.lfs.model_copy(update={"resolve_concurrency": 1})
    for name, action in (
        ("sequential", sequential),
        ("ours", ours_stage),
        ("ours_concurrency_1", lambda: ours_stage(one_at_a_time)),
        ("ours_task", ours_task),
    ):
        runs = [timed(action) for _ in range(repeats)]
        figures[name] = min(runs)
    count, mb = len(workload.keys), workload.mb
    row: dict[str, Any] = {"blob": workload.label, "blobs": count, "mb": round(mb, 1)}
    for name, (wall, cpu) in figures.items():
        row[name] = {
            "seconds": round(wall, 3),
            "blobs_per_s": round(count / wall, 1),
            "mb_per_s": round(mb / wall, 1),
            "cpu_s_per_mb": round(cpu / mb, 4),
        }
    row["vs_sequential"] = round(figures["sequential"][0] / figures["ours"][0], 2)
    row["task_vs_sequential"] = round(figures["sequential"][0] / figures["ours_task"][0], 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8, help="resolve_concurrency (default 8)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply the blob counts (e.g. 0.25 to be quick)"
    )
    parser.add_argument("--latency-ms", type=float, default=30.0, help="S3-like first-byte latency per GET")
    parser.add_argument("--mbps", type=float, default=80.0, help="S3-like bandwidth per connection, MB/s")
    parser.add_argument("--loopback", action="store_true", help="read moto directly (no latency proxy)")
    args = parser.parse_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    process, url = start_moto_process()
    proxy: subprocess.Popen[str] | None = None
    try:
        config = Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 5})
        uploads = boto3.client("s3", endpoint_url=url, region_name="us-east-1", config=config)
        uploads.create_bucket(Bucket=BUCKET)
        read_url = url
        if not args.loopback:
            proxy = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.s3_proxy",
                    "--upstream",
                    url,
                    "--latency-ms",
                    str(args.latency_ms),
                    "--bandwidth-mb-per-s",
                    str(args.mbps),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proxy.stdout is not None
            read_url = proxy.stdout.readline().split(" ", 1)[0]
        settings = S3Settings(endpoint_url=read_url, region="us-east-1", path_style=True)
        client = boto3.client("s3", endpoint_url=read_url, region_name="us-east-1", config=config)
        reader = S3BlobReader.for_settings(settings, concurrency=args.concurrency)
        rows = []
        with tempfile.TemporaryDirectory(prefix="bench-lfs-") as folder:
            root = Path(folder)
            for label, (size, count) in SIZES.items():
                scaled = max(4, int(count * args.scale))
                workload = build_workload(uploads, root, label, size, scaled, args.concurrency)
                row = measure(workload, reader, client, args.repeats, root)
                rows.append(row)
                ours, task, seq = row["ours"], row["ours_task"], row["sequential"]
                print(
                    f"{label:>6} x {row['blobs']:>5}: ours {ours['blobs_per_s']:>8} blobs/s "
                    f"{ours['mb_per_s']:>7} MB/s | whole task {task['mb_per_s']:>7} MB/s | "
                    f"sequential {seq['blobs_per_s']:>8} blobs/s {seq['mb_per_s']:>7} MB/s "
                    f"| x{row['vs_sequential']}",
                    flush=True,
                )
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=10)
        process.terminate()
        process.wait(timeout=10)
    load = os.getloadavg()
    summary = {
        "bench": "lfs",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_avg_1m": round(load[0], 2),
        "resolve_concurrency": args.concurrency,
        "s3": "loopback moto"
        if args.loopback
        else f"moto + {args.latency_ms:g} ms first byte, {args.mbps:g} MB/s per connection",
        "sizes": rows,
        "vs_sequential": {row["blob"]: row["vs_sequential"] for row in rows},
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
