"""Synthetic KafScale segments of realistic JSON events (pizza orders), for the demo, tests and benchmarks.

Deterministic: the same arguments and seed give the same bytes (timestamps come from `start_time_ms`,
never the wall clock). Offsets of each partition run on from one segment to the next, as the broker
assigns them. `generate_segments` only builds bytes; `write_segments` also writes them under the
KafScale key layout to a local folder or an `s3://bucket/prefix` URI.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Literal
from uuid import UUID

from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import SegmentFiles, build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import SegmentId
from kafscale_iceberg.segments.layout import Codec
from kafscale_iceberg.segments.lfs import ChecksumAlg, blob_key, proxy_value

CodecChoice = Codec | Literal["mixed"]

# 2026-11-20T00:00:00Z: a fixed start keeps generated data reproducible.
DEFAULT_START_TIME_MS = 1_795_132_800_000
_MIXED_CYCLE = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD)
_PIZZAS = ("margherita", "marinara", "diavola", "quattro formaggi", "capricciosa", "funghi", "hawaii")
_SIZES = {"small": 7.5, "medium": 10.0, "large": 13.5}
_STATUSES = ("placed", "accepted", "baking", "out_for_delivery", "delivered", "cancelled")
_FIRST = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken", "Margaret", "Dennis", "Frances", "Linus")
_LAST = ("Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Thompson", "Hamilton", "Ritchie", "Allen")
# Flush lag between the last record and the segment upload, as a produce-synced broker shows.
_FLUSH_LAG_MS = 250


@dataclass(frozen=True)
class GeneratedSegment:
    """One generated segment: where it belongs, its bytes, and the codec of each batch."""

    segment: SegmentId
    files: SegmentFiles
    codecs: tuple[Codec, ...]
    blobs: tuple[tuple[str, bytes], ...] = ()
    """LFS blobs its envelopes point at: `(key, bytes)`, written before the segment (as the proxy does)."""


@dataclass(frozen=True)
class WrittenSegment:
    """A segment written by `write_segments`: where its two objects went (paths or URIs), what it holds."""

    kfs: str
    index: str
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    records: int
    kfs_bytes: int
    codecs: tuple[str, ...]
    blobs: tuple[str, ...] = ()


TimeFormats = Literal["rfc3339", "mixed"]
"""How generated events write `event_time`: RFC 3339 (`...T...Z`), or `mixed`: cycling through the
forms people write - RFC 3339, `YYYY-MM-DD HH:MM:SS` (to the second) and `...THH:MM:SS.ffffff`
without an offset (UTC wall time), `+0530` and `+05:30` offsets - all naming the same instant."""

_INDIA = timezone(timedelta(hours=5, minutes=30))


def format_event_time(when: datetime, form: int) -> str:
    """`when` (UTC) written in form `form % 5` of the `mixed` time formats."""
    form %= 5
    if form == 0:
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if form == 1:
        return when.strftime("%Y-%m-%d %H:%M:%S")
    if form == 2:
        return when.replace(tzinfo=None).isoformat(timespec="microseconds")
    local = when.astimezone(_INDIA).isoformat(timespec="milliseconds")
    return local.replace("+05:30", "+0530") if form == 3 else local


def pizza_order(
    rng: random.Random, *, order_id: int, store_id: int, event_time_ms: int, time_form: int = 0
) -> bytes:
    """One pizza-order event as compact JSON (~200 bytes); `event_time` in form `time_form` of
    `format_event_time` (0: RFC 3339 UTC)."""
    when = datetime.fromtimestamp(event_time_ms / 1000, tz=UTC)
    items = []
    total = 0.0
    for _ in range(rng.choice((1, 1, 1, 1, 2))):
        size = rng.choice(tuple(_SIZES))
        quantity = rng.randint(1, 3)
        items.append({"pizza": rng.choice(_PIZZAS), "size": size, "qty": quantity})
        total += _SIZES[size] * quantity
    event = {
        "order_id": order_id,
        "store_id": store_id,
        "customer": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
        "items": items,
        "total": round(total * rng.uniform(0.9, 1.1), 2),
        "status": rng.choice(_STATUSES),
        "event_time": format_event_time(when, time_form),
        "ordered_on": when.date().isoformat(),
    }
    return json.dumps(event, separators=(",", ":")).encode()


def generate_segments(
    *,
    topics: Sequence[str] = ("orders",),
    partitions: int = 1,
    segments: int = 1,
    batches_per_segment: int = 4,
    records_per_batch: int = 100,
    codec: CodecChoice = Codec.NONE,
    seed: int = 0,
    namespace: str = "default",
    headers: bool = False,
    start_time_ms: int = DEFAULT_START_TIME_MS,
    lfs_every: int = 0,
    lfs_blob_bytes: int = 256 * 1024,
    lfs_bucket: str = "kafscale",
    lfs_checksum_alg: ChecksumAlg = ChecksumAlg.SHA256,
    time_formats: TimeFormats = "rfc3339",
    start_offset: int = 0,
) -> Iterator[GeneratedSegment]:
    """Build segments of pizza orders for every topic and partition, in key order.

    `codec="mixed"` cycles the batches through none, gzip, snappy, lz4 and zstd. With `headers`,
    every record carries a `content-type` and a `trace-id` header. `time_formats="mixed"` cycles
    `event_time` through the forms people write (see `TimeFormats`). With `lfs_every` N > 0, every
    Nth record is produced through KafScale's LFS proxy: its value (the order with a padding
    `attachment` making it `lfs_blob_bytes` long) becomes a blob at the proxy's key
    (`{ns}/{topic}/lfs/YYYY/MM/DD/obj-{uuid}`, in `lfs_bucket`) and the record carries the
    proxy's envelope instead. Each partition's first record is at `start_offset` (a later batch
    after segments already written: keys never collide with theirs, times follow on). Raises
    `ValueError` for counts below 1 or a negative `start_offset`.
    """
    if start_offset < 0:
        raise ValueError(f"start_offset must be >= 0, got {start_offset}")
    for name, count in (
        ("partitions", partitions),
        ("segments", segments),
        ("batches_per_segment", batches_per_segment),
        ("records_per_batch", records_per_batch),
    ):
        if count < 1:
            raise ValueError(f"{name} must be >= 1, got {count}")
    for topic in topics:
        for partition in range(partitions):
            rng = random.Random(f"{seed}:{topic}:{partition}")
            codecs = itertools.cycle(_MIXED_CYCLE) if codec == "mixed" else itertools.repeat(codec)
            offset = start_offset
            clock = start_time_ms + start_offset * 1000  # ~1 s a record, as the records' own steps
            for _ in range(segments):
                batches = []
                used = []
                blobs: list[tuple[str, bytes]] = []
                base_offset = offset
                for _ in range(batches_per_segment):
                    records = []
                    for _ in range(records_per_batch):
                        clock += rng.randint(0, 2000)
                        record_headers: tuple[tuple[str, bytes | None], ...] = ()
                        if headers:
                            record_headers = (
                                ("content-type", b"application/json"),
                                ("trace-id", rng.randbytes(8).hex().encode()),
                            )
                        store = rng.randint(1, 40)
                        value = pizza_order(
                            rng,
                            order_id=10_000_000 + offset * partitions + partition,
                            store_id=store,
                            event_time_ms=clock,
                            time_form=offset if time_formats == "mixed" else 0,
                        )
                        if lfs_every > 0 and offset % lfs_every == lfs_every - 1:
                            value = _through_lfs_proxy(
                                rng,
                                value,
                                blobs,
                                size=lfs_blob_bytes,
                                key=blob_key(
                                    namespace,
                                    topic,
                                    at=datetime.fromtimestamp(clock / 1000, tz=UTC),
                                    object_id=UUID(bytes=rng.randbytes(16), version=4),
                                ),
                                bucket=lfs_bucket,
                                alg=lfs_checksum_alg,
                                created_at_ms=clock,
                            )
                        records.append(
                            Record(offset, clock, f"store-{store}".encode(), value, record_headers)
                        )
                        offset += 1
                    batch_codec = next(codecs)
                    used.append(batch_codec)
                    batches.append(encode_record_batch(records, codec=batch_codec))
                files = build_segment(batches, created_at_ms=clock + _FLUSH_LAG_MS)
                yield GeneratedSegment(
                    segment=SegmentId(namespace, topic, partition, base_offset),
                    files=files,
                    codecs=tuple(used),
                    blobs=tuple(blobs),
                )


def _through_lfs_proxy(
    rng: random.Random,
    order: bytes,
    blobs: list[tuple[str, bytes]],
    *,
    size: int,
    key: str,
    bucket: str,
    alg: ChecksumAlg,
    created_at_ms: int,
) -> bytes:
    """The envelope the LFS proxy produces for a large order; its blob is appended to `blobs`."""
    padding = max(0, size - len(order) - len(',"attachment":""'))
    payload = (
        order[:-1] + b',"attachment":"' + rng.randbytes(padding // 2 + 1).hex()[:padding].encode() + b'"}'
    )
    proxied = proxy_value(
        payload,
        bucket=bucket,
        key=key,
        checksum_alg=alg,
        headers={"content-type": "application/json"},
        created_at=datetime.fromtimestamp(created_at_ms / 1000, tz=UTC),
        proxy_id="kafscale-iceberg-generator",
    )
    blobs.append((proxied.blob_key, proxied.blob))
    return proxied.value


def write_segments(
    destination: str,
    segments: Iterable[GeneratedSegment],
    *,
    endpoint_url: str | None = None,
) -> list[WrittenSegment]:
    """Write each segment's LFS blobs, its `.index`, then its `.kfs`, under `destination`; returns
    what was written.

    `destination` is a folder or `s3://bucket[/prefix]` (with `endpoint_url` for MinIO, moto or
    LocalStack). Keys follow the KafScale layout below the folder or prefix. The `.index` goes first
    so that whoever reacts to a new `.kfs` finds its index. Idempotent: rewriting overwrites.
    """
    put = (
        _s3_writer(destination, endpoint_url)
        if destination.startswith("s3://")
        else _folder_writer(destination)
    )
    written = []
    for generated in segments:
        segment = generated.segment
        kfs_key = segment.segment_key
        index_key = segment.index_key
        blob_locations = tuple(put(key, blob) for key, blob in generated.blobs)
        index_location = put(index_key, generated.files.index)
        kfs_location = put(kfs_key, generated.files.kfs)
        written.append(
            WrittenSegment(
                kfs=kfs_location,
                index=index_location,
                topic=segment.topic,
                partition=segment.partition,
                base_offset=generated.files.base_offset,
                last_offset=generated.files.last_offset,
                records=generated.files.message_count,
                kfs_bytes=len(generated.files.kfs),
                codecs=tuple(c.name.lower() for c in generated.codecs),
                blobs=blob_locations,
            )
        )
    return written


def _folder_writer(folder: str) -> Callable[[str, bytes], str]:
    root = Path(folder)

    def put(key: str, data: bytes) -> str:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return str(path)

    return put


def _s3_writer(uri: str, endpoint_url: str | None) -> Callable[[str, bytes], str]:
    # boto3 is imported here only: generating to a folder must not need the AWS extra.
    import boto3  # noqa: PLC0415

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise ValueError(f"destination {uri!r}: expected s3://bucket[/prefix]")
    prefix = prefix.strip("/")
    client = boto3.client("s3", endpoint_url=endpoint_url)

    def put(key: str, data: bytes) -> str:
        full_key = f"{prefix}/{key}" if prefix else key
        client.put_object(Bucket=bucket, Key=full_key, Body=data)
        return f"s3://{bucket}/{full_key}"

    return put
