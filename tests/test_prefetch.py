"""Segments fetched ahead of the work: order, bounds on requests and bytes in flight, ranged parts, errors.

The reader under test is the real `DocumentStore` (local files, and S3 on moto server); the wrapper
`_Recording` only adds a short sleep per request - standing in for S3's first-byte latency, which
loopback does not have - and records what was in flight.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.prefetch import ObjectRequest, PrefetchLimits, part_ranges, prefetch_objects
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.runs import FailureKind
from kafscale_iceberg.exceptions import DataFilePublishError, DocumentMissingError
from tests.support.moto import MotoEndpoint
from tests.support.spark_job import SegmentFolder, make_plan


class _Recording:
    """A `DocumentStore` whose requests each take `delay_s` longer, recording concurrency and bytes."""

    def __init__(self, delay_s: float = 0.02) -> None:
        self.store = DocumentStore()
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.running = 0
        self.max_running = 0
        self.started_bytes = 0
        self.ranges: list[tuple[int, int | None]] = []

    def _enter(self, size: int) -> None:
        with self.lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.started_bytes += size

    def _leave(self) -> None:
        with self.lock:
            self.running -= 1

    def read_bytes(self, uri: str) -> bytes:
        self._enter(Path(uri).stat().st_size if Path(uri).exists() else 0)
        try:
            time.sleep(self.delay_s)
            return self.store.read_bytes(uri)
        finally:
            self._leave()

    def read_range(self, uri: str, start: int, end_inclusive: int | None) -> bytes:
        with self.lock:
            self.ranges.append((start, end_inclusive))
        self._enter(0)
        try:
            time.sleep(self.delay_s)
            return self.store.read_range(uri, start, end_inclusive)
        finally:
            self._leave()


def _objects(tmp_path: Path, count: int, size: int) -> list[ObjectRequest]:
    requests = []
    for i in range(count):
        path = tmp_path / f"object-{i:03d}"
        path.write_bytes(bytes([i % 256]) * size)
        requests.append(ObjectRequest(str(path), size))
    return requests


def test_objects_come_back_in_order_with_a_bounded_number_of_requests_in_flight(tmp_path: Path) -> None:
    requests = _objects(tmp_path, 24, 100)
    reader = _Recording()

    got = list(prefetch_objects(reader, requests, PrefetchLimits(max_in_flight=4)))

    assert [f.request for f in got] == requests
    assert [f.data for f in got] == [bytes([i]) * 100 for i in range(24)]
    assert reader.max_running == 4


def test_bytes_in_flight_stay_under_the_cap_while_the_consumer_is_slow(tmp_path: Path) -> None:
    requests = _objects(tmp_path, 12, 1000)
    reader = _Recording(delay_s=0.0)
    consumed = 0
    seen_ahead = []

    for fetched in prefetch_objects(
        reader, requests, PrefetchLimits(max_in_flight=8, max_bytes_in_flight=2500)
    ):
        time.sleep(0.01)  # the consumer is slower than the reads: everything would run ahead
        seen_ahead.append(reader.started_bytes - consumed)
        consumed += len(fetched.data or b"")

    # Two objects fit the 2500-byte budget: the one being consumed counts until the next is asked for.
    assert max(seen_ahead) == 2000
    assert consumed == 12_000


def test_an_object_larger_than_the_cap_is_still_fetched_alone(tmp_path: Path) -> None:
    requests = _objects(tmp_path, 3, 5000)
    got = list(prefetch_objects(_Recording(0.0), requests, PrefetchLimits(max_bytes_in_flight=1000)))
    assert [len(f.data or b"") for f in got] == [5000, 5000, 5000]


def test_a_large_object_is_read_in_ranged_parts_and_reassembled(tmp_path: Path) -> None:
    path = tmp_path / "large"
    payload = bytes(range(256)) * 4000  # 1,024,000 bytes
    path.write_bytes(payload)
    reader = _Recording(0.0)

    (fetched,) = prefetch_objects(
        reader, [ObjectRequest(str(path), len(payload))], PrefetchLimits(part_size=100_000)
    )

    assert fetched.data == payload
    assert sorted(reader.ranges, key=lambda r: r[0]) == part_ranges(len(payload), 100_000)
    assert len(reader.ranges) == 11


def test_ranged_reads_on_s3(moto_server: MotoEndpoint) -> None:
    store = DocumentStore(moto_server.s3_settings())
    uri = f"s3://{moto_server.new_bucket()}/segments/large.kfs"
    payload = bytes(range(256)) * 100
    store.write_bytes(uri, payload)

    (fetched,) = prefetch_objects(store, [ObjectRequest(uri, len(payload))], PrefetchLimits(part_size=1000))

    assert fetched.data == payload
    assert store.read_range(uri, 10, 19) == payload[10:20]
    with pytest.raises(DocumentMissingError):
        store.read_range(uri + ".missing", 0, None)


def test_an_unreadable_object_is_reported_at_its_position(tmp_path: Path) -> None:
    requests = _objects(tmp_path, 5, 10)
    missing = ObjectRequest(str(tmp_path / "gone"), 10)
    requests.insert(2, missing)

    got = list(prefetch_objects(_Recording(0.0), requests, PrefetchLimits(max_in_flight=3)))

    assert [f.data is not None for f in got] == [True, True, False, True, True, True]
    assert isinstance(got[2].error, DocumentMissingError)


@pytest.mark.parametrize("in_flight", [1, 4])
def test_a_missing_segment_fails_the_task_where_a_sequential_read_would(
    tmp_path: Path, in_flight: int
) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    for base in range(0, 50, 10):
        folder.add_orders(0, base, 10)
    gone = folder.written[0][2]
    (folder.root / gone.key).unlink()
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 49)})
    (task,) = plan_tasks(plan, max_tasks=1, min_task_bytes=1)

    report = run_task(
        plan,
        task,
        reader=_Recording(),
        sink=StagedFileStore(),
        prefetch=PrefetchLimits(max_in_flight=in_flight),
    )

    assert report.failure is not None
    assert report.failure.kind is FailureKind.SEGMENT_UNAVAILABLE
    assert report.failure.segment_key == gone.key
    assert report.failure_at == (0, 20)
    assert [o.key for o in report.segments] == [s.key for s in folder.written[0][:2]]
    assert report.data_files == ()


def test_a_failed_upload_fails_the_task(tmp_path: Path, moto_server: MotoEndpoint) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 10)
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 9)})
    plan = plan.model_copy(
        update={"table": plan.table.model_copy(update={"data_uri": "s3://no-such-bucket-i17/data"})}
    )
    (task,) = plan_tasks(plan, max_tasks=1, min_task_bytes=1)

    with pytest.raises(DataFilePublishError, match="no-such-bucket-i17"):
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore(moto_server.s3_settings()))
