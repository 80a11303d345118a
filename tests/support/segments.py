"""Writing real KafScale segments (the codec's encoder) into a bucket, as a broker would."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import SegmentFiles, build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key
from kafscale_iceberg.segments.layout import Codec

BASE_TIMESTAMP_MS = 1_763_600_000_000


def order_value(offset: int, partition: int = 0) -> bytes:
    """A small JSON order event whose fields are derived from its offset."""
    return json.dumps(
        {"order_id": offset, "store_id": f"store-{offset % 5}", "total": offset + 0.5, "partition": partition}
    ).encode()


def encode_segment(
    partition: int,
    base: int,
    count: int,
    *,
    codec: Codec = Codec.NONE,
    batch_size: int = 10,
    values: Sequence[bytes | None] | None = None,
    keys: Sequence[bytes | None] | None = None,
) -> SegmentFiles:
    """A segment with `count` records at offsets `base..base+count-1`, in batches of `batch_size`
    (keys `k{offset}` unless `keys` are given)."""
    records = [
        Record(
            offset=offset,
            timestamp_ms=BASE_TIMESTAMP_MS + offset,
            key=keys[offset - base] if keys is not None else f"k{offset}".encode(),
            value=values[offset - base] if values is not None else order_value(offset, partition),
        )
        for offset in range(base, base + count)
    ]
    batches = [
        encode_record_batch(records[i : i + batch_size], codec=codec) for i in range(0, count, batch_size)
    ]
    return build_segment(batches, created_at_ms=BASE_TIMESTAMP_MS + base + count)


def put_segment(
    s3: Any,
    bucket: str,
    namespace: str,
    topic: str,
    partition: int,
    base: int,
    count: int,
    **encode_options: Any,
) -> SegmentFiles:
    """Encode a segment and upload its `.kfs` then its `.index`, as KafScale's broker does."""
    files = encode_segment(partition, base, count, **encode_options)
    s3.put_object(Bucket=bucket, Key=format_segment_key(namespace, topic, partition, base), Body=files.kfs)
    index_key = format_segment_key(namespace, topic, partition, base, SegmentObjectKind.INDEX)
    s3.put_object(Bucket=bucket, Key=index_key, Body=files.index)
    return files
