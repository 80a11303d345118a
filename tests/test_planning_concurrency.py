"""Planning lists partitions and reads footers concurrently (bounded), with the sequential result.

Real S3 (moto server) through the real `S3SegmentStore`; `_Slow` only adds 20 ms per request -
standing in for S3's first-byte latency, which loopback lacks - and records requests in flight.
"""

from __future__ import annotations

import threading
import time

import pytest

from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, make_s3_client
from kafscale_iceberg.domain.planning import ListedSegment, RunLimits
from kafscale_iceberg.segments.layout import SegmentFooter
from kafscale_iceberg.services import pending
from kafscale_iceberg.services.pending import select_pending
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment


class _Slow:
    def __init__(self, store: S3SegmentStore) -> None:
        self.store = store
        self.bucket = store.bucket
        self.lock = threading.Lock()
        self.running = 0
        self.max_running = 0

    def _timed(self) -> None:
        with self.lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        time.sleep(0.02)
        with self.lock:
            self.running -= 1

    def list_partitions(self, topic: str) -> list[int]:
        return self.store.list_partitions(topic)

    def list_segments(self, topic: str, partition: int, after_offset: int | None) -> list[ListedSegment]:
        self._timed()
        return self.store.list_segments(topic, partition, after_offset=after_offset)

    def read_footer(self, key: str) -> SegmentFooter:
        self._timed()
        return self.store.read_footer(key)


def test_partitions_are_planned_concurrently_with_the_same_selection(
    moto_server: MotoEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = moto_server.new_bucket()
    client = make_s3_client(moto_server.s3_settings())
    for partition in range(24):
        put_segment(client, bucket, "prod", "orders", partition, 0, 5)
        put_segment(client, bucket, "prod", "orders", partition, 5, 5)
    store = S3SegmentStore(client, bucket, "prod")
    committed = {p: (4 if p % 3 == 0 else -1) for p in range(24)}
    limits = RunLimits(max_bytes=1 << 40, max_segments=10_000, min_bytes=0, max_wait_seconds=0)
    slow = _Slow(store)

    concurrent = select_pending(slow, "orders", committed, limits, now_ms=0)
    monkeypatch.setattr(pending, "PLANNING_CONCURRENCY", 1)
    sequential = select_pending(store, "orders", committed, limits, now_ms=0)

    assert concurrent == sequential
    assert {c.partition for c in concurrent.partitions} == set(range(24))
    assert 1 < slow.max_running <= 16
