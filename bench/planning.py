"""S3 requests of planning one run: a topic with 10,000 committed segments and 10 new ones.

Run with `python -m bench.planning` (or `make bench-planning`). On a moto server, a topic of
`--partitions` partitions holds `--committed` segments at or below the committed offsets (their
`.kfs` and `.index`; bodies are placeholders: planning never reads a committed segment) and `--new`
real segments after them. Counted with botocore's `before-call` hook, every S3 request made by:

- **this product's launcher** (`Launcher.launch`: partition listing, a `StartAfter` listing per
  partition from the committed segment's key, one 16-byte footer read per partition's last chosen
  segment);
- **the Go processor's discovery pass** (reference §4.4), done the same way here: a full
  `ListObjectsV2` of the namespace prefix and a 4-byte ranged GET of every listed `.kfs`, on every
  poll, whatever is committed.

Both numbers are requests per planning pass on the same bucket in the same run. The last line is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, S3Settings, make_s3_client
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.local.config_document import one_machine_document
from kafscale_iceberg.local.embedded import start_moto
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key
from kafscale_iceberg.services.launch import Launcher, LaunchStatus

NAMESPACE = "prod"
TOPIC = "orders"
RECORDS_PER_SEGMENT = 10


class _Starter:
    def __init__(self) -> None:
        self.tickets: list[RunTicket] = []

    def start_run(self, ticket: RunTicket) -> None:
        self.tickets.append(ticket)


@contextmanager
def counting(client: Any) -> Iterator[Counter[str]]:
    """Count the S3 operations `client` calls while the block runs."""
    counts: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        counts[event_name.rsplit(".", 1)[-1]] += 1

    client.meta.events.register("before-call.s3.*", count)
    try:
        yield counts
    finally:
        client.meta.events.unregister("before-call.s3.*", count)


def _segment(base: int) -> tuple[bytes, bytes]:
    records = [
        Record(offset=o, timestamp_ms=1_795_132_800_000 + o, key=None, value=b'{"n": %d}' % o)
        for o in range(base, base + RECORDS_PER_SEGMENT)
    ]
    files = build_segment([encode_record_batch(records)], created_at_ms=1_795_132_800_000)
    return files.kfs, files.index


def populate(s3: Any, bucket: str, partitions: int, committed: int, new: int) -> dict[int, int]:
    """Write the segments; returns the committed offset per partition."""
    placeholder = b"placeholder: planning never reads a committed segment"
    puts: list[tuple[str, bytes]] = []
    committed_offsets: dict[int, int] = {}
    for partition in range(partitions):
        count = committed // partitions + (1 if partition < committed % partitions else 0)
        for number in range(count):
            base = number * RECORDS_PER_SEGMENT
            puts.append((format_segment_key(NAMESPACE, TOPIC, partition, base), placeholder))
            index_key = format_segment_key(NAMESPACE, TOPIC, partition, base, SegmentObjectKind.INDEX)
            puts.append((index_key, placeholder))
        committed_offsets[partition] = count * RECORDS_PER_SEGMENT - 1
    for number in range(new):
        partition = number % partitions
        base = committed_offsets[partition] + 1 + (number // partitions) * RECORDS_PER_SEGMENT
        kfs, index = _segment(base)
        puts.append((format_segment_key(NAMESPACE, TOPIC, partition, base), kfs))
        puts.append((format_segment_key(NAMESPACE, TOPIC, partition, base, SegmentObjectKind.INDEX), index))
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), puts))
    return committed_offsets


@dataclass(frozen=True)
class PlanningWorld:
    """A launcher over a populated topic whose committed offsets are in a SQLite store."""

    launcher: Launcher
    store: SqliteCheckpointStore
    starter: _Starter


def planning_world(
    s3: Any,
    bucket: str,
    workdir: Path,
    settings: S3Settings,
    *,
    partitions: int,
    committed: int,
    new: int,
    segments_client: Any = None,
) -> PlanningWorld:
    """`populate` the bucket through `s3`, commit its offsets in `workdir/offsets.sqlite`, and build
    the launcher: its documents through `settings`, its listings and reads through `segments_client`
    (a client of `settings` by default) - the client or endpoint a benchmark counts or slows."""
    offsets = populate(s3, bucket, partitions, committed, new)
    store = SqliteCheckpointStore(workdir / "offsets.sqlite")
    grant = store.claim_lease(TOPIC, owner_id="bench", run_id="seed")
    assert isinstance(grant, LeaseGrant)
    store.commit_offsets(grant, {p: OffsetUpdate(o, 0) for p, o in offsets.items()})
    store.release_lease(grant)
    document = one_machine_document(
        workdir,
        bucket=bucket,
        namespace=NAMESPACE,
        endpoint=settings.endpoint_url,
        runs={"min_bytes_per_run": 0},
        mappings=[{"topic": TOPIC, "table": "shop.orders"}],
    )
    starter = _Starter()
    launcher = Launcher(
        config_from_mapping(document, source="bench"),
        store,
        S3SegmentStore(segments_client or make_s3_client(settings), bucket, NAMESPACE),
        DocumentStore(settings),
        starter,
        owner_id="bench",
    )
    return PlanningWorld(launcher, store, starter)


def go_discovery_pass(s3: Any, bucket: str) -> int:
    """The Go processor's per-poll discovery: list everything, then a 4-byte GET per `.kfs`."""
    kfs: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{NAMESPACE}/"):
        kfs += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(".kfs")]
    for key in kfs:
        s3.get_object(Bucket=bucket, Key=key, Range="bytes=-4")
    return len(kfs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--committed", type=int, default=10_000)
    parser.add_argument("--new", type=int, default=10)
    args = parser.parse_args(argv)
    moto = start_moto()
    try:
        settings = S3Settings(endpoint_url=moto.url, region=moto.region, path_style=True)
        s3 = make_s3_client(settings)
        bucket = "bench-planning"
        s3.create_bucket(Bucket=bucket)
        print(
            f"writing {args.committed} committed + {args.new} new segments, {args.partitions} partitions ..."
        )
        workdir = Path(tempfile.mkdtemp(prefix="bench-planning-"))
        world = planning_world(
            s3,
            bucket,
            workdir,
            settings,
            partitions=args.partitions,
            committed=args.committed,
            new=args.new,
            segments_client=s3,
        )
        with counting(s3) as ours:
            outcome = world.launcher.launch(TOPIC)
        assert outcome.status is LaunchStatus.STARTED, outcome
        plan_segments = args.new
        go_client = boto3.client("s3", endpoint_url=moto.url, region_name=moto.region)
        with counting(go_client) as go:
            kfs = go_discovery_pass(go_client, bucket)
    finally:
        moto.stop()
    ours_total, go_total = sum(ours.values()), sum(go.values())
    print(f"this product's launcher: {ours_total} S3 requests {dict(ours)} for {plan_segments} new segments")
    print(f"Go processor's discovery: {go_total} S3 requests {dict(go)} ({kfs} .kfs listed) per poll")
    print(
        json.dumps(
            {
                "committed_segments": args.committed,
                "new_segments": args.new,
                "partitions": args.partitions,
                "launcher_s3_requests": ours_total,
                "go_discovery_s3_requests_per_poll": go_total,
                "ratio": round(go_total / ours_total, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
