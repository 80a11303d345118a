"""One task run in this process (no Spark): offset ownership, control batches, what a report says."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.runs import (
    FailureKind,
    PlannedSegment,
    RunPlan,
    RunResult,
    RunStatus,
    RunTimings,
    SchemaMode,
)
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import format_segment_key
from tests.support.spark_job import BASE_TIME_MS, SegmentFolder, make_plan, order_record


def run_in_process(plan: RunPlan) -> tuple[list[int], RunResult]:
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
        for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    result = build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
    offsets = sorted(o for f in result.data_files for o in pq.read_table(f.uri).column("offset").to_pylist())
    return offsets, result


def test_overlapping_segments_never_write_an_offset_twice(tmp_path: Path) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 20)
    # A second segment that (wrongly) repeats offsets 15..19 before its own 20..29.
    folder.add(0, [order_record(o, 0) for o in range(15, 30)])
    first, second = folder.written[0]
    fixed = PlannedSegment(key=second.key, base_offset=20, last_offset=29, size_bytes=second.size_bytes)
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 29)}, segments={0: [first, fixed]})

    offsets, result = run_in_process(plan)

    assert offsets == list(range(30))
    assert result.counts.out_of_range == 5
    assert result.partitions[0].records_overlapped == 5


def test_records_committed_before_or_after_the_run_are_not_counted_as_overlapped(tmp_path: Path) -> None:
    """Issue 12 §6: a segment read again from its start (the committed offset inside it, or a gap after
    it) or read past the run's end repeats nothing: `overlapped` counts only another segment's offsets."""
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 20)
    folder.add_orders(0, 20, 10)
    first, second = folder.written[0]
    plan = make_plan(folder, str(tmp_path), ranges={0: (9, 24)}, segments={0: [first, second]})

    offsets, result = run_in_process(plan)

    assert offsets == list(range(10, 25))
    assert result.counts.out_of_range == 0
    assert result.partitions[0].records_overlapped == 0


def test_offsets_of_control_batches_are_contained_not_gaps(tmp_path: Path) -> None:
    data = [order_record(o, 0) for o in range(5)]
    marker = Record(
        offset=5, timestamp_ms=BASE_TIME_MS, key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x00"
    )
    more = [order_record(o, 0) for o in range(6, 10)]
    files = build_segment(
        [encode_record_batch(data), encode_record_batch([marker], control=True), encode_record_batch(more)],
        created_at_ms=BASE_TIME_MS,
    )
    folder = SegmentFolder(tmp_path / "segments")
    key = format_segment_key(folder.namespace, folder.topic, 0, 0)
    (folder.root / key).parent.mkdir(parents=True)
    (folder.root / key).write_bytes(files.kfs)
    segment = PlannedSegment(key=key, base_offset=0, last_offset=9, size_bytes=len(files.kfs))
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 9)}, segments={0: [segment]})

    offsets, result = run_in_process(plan)

    assert offsets == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert result.status is RunStatus.SUCCEEDED
    assert result.partitions[0].gaps == ()
    assert result.counts.control_batches == 1


def test_a_record_whose_header_key_is_not_utf8_is_written_and_counted(tmp_path: Path) -> None:
    """Issue 12 §5: the segment is not corrupt (its CRC holds); the record lands, the run counts it."""
    from kafscale_iceberg.segments.crc import crc32c
    from kafscale_iceberg.segments.layout import BATCH_CRC_START

    records = [order_record(o, 0, headers=False) for o in range(3)]
    records[1] = Record(1, BASE_TIME_MS, None, records[1].value, (("keyX", b"v"),))
    batch = encode_record_batch(records)
    at = batch.index(b"keyX")
    edited = batch[:at] + b"key\xff" + batch[at + 4 :]
    edited = edited[:17] + crc32c(edited[BATCH_CRC_START:]).to_bytes(4, "big") + edited[BATCH_CRC_START:]
    files = build_segment([edited], created_at_ms=BASE_TIME_MS)
    folder = SegmentFolder(tmp_path / "segments")
    key = format_segment_key(folder.namespace, folder.topic, 0, 0)
    (folder.root / key).parent.mkdir(parents=True)
    (folder.root / key).write_bytes(files.kfs)
    segment = PlannedSegment(key=key, base_offset=0, last_offset=2, size_bytes=len(files.kfs))
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 2)}, segments={0: [segment]})

    offsets, result = run_in_process(plan)

    assert result.status is RunStatus.SUCCEEDED
    assert offsets == [0, 1, 2]
    assert result.counts.header_keys_replaced == 1
    headers = [h for f in result.data_files for h in pq.read_table(f.uri).column("headers").to_pylist()]
    assert '{"key":"key\ufffd","value":"v"}' in headers[1]


def _times_folder(tmp_path: Path) -> SegmentFolder:
    times = ['"2024-01-04 12:28:13"', '"next week"', "null", '"2024-01-04T12:28:13+0100"', "17"]
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(
        0,
        [
            order_record(o, 0, value=f'{{"order_id": {o}, "event_time": {times[o % 5]}}}'.encode())
            for o in range(10)
        ],
    )
    return folder


def test_conversion_failures_are_counted_per_column_in_the_result(tmp_path: Path) -> None:
    plan = make_plan(_times_folder(tmp_path), str(tmp_path), ranges={0: (-1, 9)})

    offsets, result = run_in_process(plan)

    assert offsets == list(range(10))
    assert result.counts.conversion_failures == {"event_time": 2}


def test_strict_mode_fails_the_run_on_a_conversion_failure_naming_record_and_column(tmp_path: Path) -> None:
    plan = make_plan(
        _times_folder(tmp_path),
        str(tmp_path),
        ranges={0: (-1, 9)},
        schema_mode=SchemaMode.STRICT,
        json_schema={"type": "object"},
    )

    _, result = run_in_process(plan)

    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert (result.failure.kind, result.failure.record_id, result.failure.column) == (
        FailureKind.STRICT_VALIDATION,
        "orders:0:1",
        "event_time",
    )
    assert "record orders:0:1 is invalid (conversion_failure): column 'event_time'" in result.failure.message
    assert result.data_files == ()
