"""Partition values, file naming and sizing, task planning and result folding (no Spark)."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.dataplane.parquet_files import RollingParquetWriter, partition_hash
from kafscale_iceberg.dataplane.partitioning import check_partitioning, split_by_partition, transform_values
from kafscale_iceberg.dataplane.reports import (
    SegmentOutcome,
    TaskReport,
    build_run_result,
    missing_spans,
)
from kafscale_iceberg.dataplane.tasks import plan_tasks, segment_windows
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    FailureKind,
    OffsetGap,
    PartitionField,
    PartitionTransform,
    RunFailure,
    RunPlan,
    RunStatus,
    RunTimings,
)
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.exceptions import PartitioningError

MICROS_PER_HOUR = 3_600_000_000


@pytest.mark.parametrize(
    ("moment", "year", "month", "day", "hour"),
    [
        (dt.datetime(1970, 1, 1), 0, 0, 0, 0),
        (dt.datetime(2026, 11, 20, 13, 5), 56, 56 * 12 + 10, 20_777, 20_777 * 24 + 13),
        (dt.datetime(1969, 12, 31, 23, 59, 59, 999999), -1, -1, -1, -1),
        (dt.datetime(1900, 3, 1, 1), -70, -70 * 12 + 2, -25_508, -25_508 * 24 + 1),
    ],
)
def test_time_transforms_are_icebergs(
    moment: dt.datetime, year: int, month: int, day: int, hour: int
) -> None:
    timestamps = pa.array([moment, None], pa.timestamp("us"))
    dates = pa.array([moment.date(), None], pa.date32())
    for transform, expected in [
        (PartitionTransform.YEAR, year),
        (PartitionTransform.MONTH, month),
        (PartitionTransform.DAY, day),
        (PartitionTransform.HOUR, hour),
    ]:
        assert transform_values(timestamps, PartitionField(column="t", transform=transform)).to_pylist() == [
            expected,
            None,
        ]
        if transform is not PartitionTransform.HOUR:
            assert transform_values(dates, PartitionField(column="d", transform=transform)).to_pylist() == [
                expected,
                None,
            ]


def test_identity_values_of_dates_and_timestamps_are_their_numbers() -> None:
    assert transform_values(pa.array([dt.date(1970, 1, 2)]), PartitionField(column="d")).to_pylist() == [1]
    moment = pa.array([dt.datetime(1970, 1, 1, 1)], pa.timestamp("us"))
    assert transform_values(moment, PartitionField(column="t")).to_pylist() == [MICROS_PER_HOUR]


def test_rows_split_into_one_group_per_partition_value_in_order() -> None:
    table = pa.table(
        {
            "store": pa.array([2, 1, None, 2, 1], pa.int32()),
            "at": pa.array([dt.datetime(2026, 1, 1, h) for h in (0, 0, 0, 1, 23)], pa.timestamp("us")),
            "n": [0, 1, 2, 3, 4],
        }
    )
    fields = (PartitionField(column="store"), PartitionField(column="at", transform=PartitionTransform.HOUR))
    groups = split_by_partition(table, fields)
    base = 20_454 * 24
    assert [(values, t.column("n").to_pylist()) for values, t in groups] == [
        ({"store": None, "at_hour": base}, [2]),
        ({"store": 1, "at_hour": base}, [1]),
        ({"store": 1, "at_hour": base + 23}, [4]),
        ({"store": 2, "at_hour": base}, [0]),
        ({"store": 2, "at_hour": base + 1}, [3]),
    ]
    assert split_by_partition(table, ()) == [({}, table)]
    single = table.slice(0, 1)
    assert split_by_partition(single, fields) == [({"store": 2, "at_hour": base}, single)]


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        (PartitionField(column="missing"), "no such column"),
        (PartitionField(column="key"), "but 'key' is binary"),
        (
            PartitionField(column="offset", transform=PartitionTransform.DAY),
            "needs a date or timestamp column",
        ),
        (PartitionField(column="on", transform=PartitionTransform.HOUR), "hour.on. needs a timestamp column"),
    ],
)
def test_partition_fields_that_cannot_be_written_are_refused(field: PartitionField, problem: str) -> None:
    fields = table_fields([ColumnSpec(name="on", type=ColumnType.DATE)])
    with pytest.raises(PartitioningError, match=problem):
        check_partitioning(fields, [field])


def test_files_roll_at_the_target_size_with_deterministic_names(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("n", pa.int64(), nullable=False), pa.field("s", pa.string())])
    # Hex digests barely compress, so the files' sizes follow the row count.
    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(20_000)]
    table = pa.table({"n": range(20_000), "s": digests}, schema=schema)

    def write(folder: Path) -> list[tuple[str, int]]:
        writer = RollingParquetWriter(
            sink=StagedFileStore(),
            data_uri=str(folder),
            schema=schema,
            task_index=7,
            target_file_size_bytes=64 * 1024,
            row_group_bytes=16 * 1024,
        )
        for start in range(0, 20_000, 1000):
            writer.write({"p": 1}, table.slice(start, 1000))
        files = writer.close()
        assert sum(f.record_count for f in files) == 20_000
        assert all(f.partition_values == {"p": 1} for f in files)
        return [(Path(f.uri).name, f.record_count) for f in files]

    names = write(tmp_path / "a")
    assert len(names) > 3
    assert names == write(tmp_path / "b")
    key = partition_hash({"p": 1})
    assert [n for n, _ in names] == [f"part-{key}-00007-{i:04d}.parquet" for i in range(len(names))]
    sizes = [(tmp_path / "a" / n).stat().st_size for n, _ in names]
    assert all(size < 3 * 64 * 1024 for size in sizes)
    assert not [p for p in (tmp_path / "a").iterdir() if p.name.startswith(".")]
    written = pq.read_table(tmp_path / "a")
    assert written.schema.field("n").nullable is False
    assert sorted(written.column("n").to_pylist()) == list(range(20_000))


def _plan(sizes: dict[int, list[tuple[int, int, int]]], start: int = -1, end: int | None = None) -> RunPlan:
    partitions = []
    for partition, segments in sizes.items():
        last = end if end is not None else segments[-1][1]
        partitions.append(
            {
                "partition": partition,
                "start_exclusive": start,
                "end_inclusive": last,
                "segments": [
                    {"key": f"t/{partition}/{b}", "base_offset": b, "last_offset": e, "size_bytes": s}
                    for b, e, s in segments
                ],
            }
        )
    return RunPlan.model_validate(
        {
            "run_id": "r",
            "topic": "t",
            "created_at_ms": 0,
            "source": {"root": "/x"},
            "partitions": partitions,
            "table": {"identifier": "a.b", "data_uri": "/d"},
            "dead_letter_table": {"identifier": "a.c", "data_uri": "/e"},
            "conversion": {},
            "result_uri": "/r.json",
        }
    )


def test_segments_own_offsets_up_to_the_next_base_within_the_range() -> None:
    plan = _plan({0: [(0, 9, 1), (10, 24, 1), (20, 40, 1)]}, start=4, end=30)
    windows = [(w.first_owned, w.last_owned) for w in segment_windows(plan)]
    assert windows == [(5, 9), (10, 19), (20, 30)]


def test_tasks_are_bin_packed_by_bytes_and_cover_every_owning_segment_once() -> None:
    sizes = [100, 90, 50, 40, 30, 20, 10, 10]
    plan = _plan(
        {
            0: [(i * 10, i * 10 + 9, s) for i, s in enumerate(sizes[:4])],
            1: [(i * 10, i * 10 + 9, s) for i, s in enumerate(sizes[4:])],
        }
    )
    tasks = plan_tasks(plan, max_tasks=3, min_task_bytes=1)
    assert len(tasks) == 3
    loads = [t.size_bytes for t in tasks]
    assert loads == sorted(loads, reverse=True)
    assert max(loads) - min(loads) <= 20
    keys = sorted(s.key for t in tasks for s in t.segments)
    assert keys == sorted(s.key for p in plan.partitions for s in p.segments)
    assert plan_tasks(plan, max_tasks=3, min_task_bytes=1) == tasks
    assert len(plan_tasks(plan, max_tasks=8, min_task_bytes=200)) == 2
    assert len(plan_tasks(plan, max_tasks=1, min_task_bytes=1, max_task_bytes=100)) == 4
    assert len(plan_tasks(plan, max_tasks=7, min_task_bytes=1, multiple_of=3)) == 6
    assert len(plan_tasks(plan, max_tasks=2, min_task_bytes=1, multiple_of=3)) == 2


def test_a_segment_owning_no_offset_is_not_read() -> None:
    plan = _plan({0: [(0, 9, 5), (10, 19, 5)]}, start=9)
    tasks = plan_tasks(plan, max_tasks=4, min_task_bytes=1)
    assert [s.key for t in tasks for s in t.segments] == ["t/0/10"]


@pytest.mark.parametrize(
    ("spans", "missing"),
    [
        ([], [(0, 9)]),
        ([(0, 9)], []),
        ([(2, 3), (5, 5)], [(0, 1), (4, 4), (6, 9)]),
        ([(-5, 20)], []),
        ([(5, 9), (0, 2), (1, 3)], [(4, 4)]),
    ],
)
def test_missing_spans(spans: list[tuple[int, int]], missing: list[tuple[int, int]]) -> None:
    assert missing_spans(0, 9, spans) == missing


def test_reports_fold_into_per_partition_outcomes_with_gaps() -> None:
    plan = _plan({0: [(0, 9, 5), (20, 29, 5)], 1: [(0, 4, 5)]}, end=None)
    reports = [
        TaskReport(
            task_index=0,
            segments=(
                SegmentOutcome(
                    partition=0,
                    key="a",
                    covered=((0, 9),),
                    records_written=9,
                    records_dead_lettered=1,
                    first_offset=0,
                    last_offset=9,
                    max_timestamp_ms=50,
                    size_bytes=5,
                ),
                SegmentOutcome(
                    partition=1, key="c", covered=((0, 4),), records_written=5, first_offset=0, last_offset=4
                ),
            ),
        ),
        TaskReport(
            task_index=1,
            segments=(
                SegmentOutcome(
                    partition=0,
                    key="b",
                    covered=((20, 29),),
                    records_written=10,
                    first_offset=20,
                    last_offset=29,
                    max_timestamp_ms=40,
                    out_of_range=3,
                ),
            ),
        ),
    ]
    result = build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=1))
    assert result.status is RunStatus.SUCCEEDED
    first, second = result.partitions
    assert (first.first_offset, first.last_offset, first.max_timestamp_ms) == (0, 29, 50)
    assert (first.records_written, first.records_dead_lettered) == (19, 1)
    assert first.gaps == (OffsetGap(first=10, last=19),)
    assert second.gaps == ()
    assert (result.counts.written, result.counts.out_of_range, result.counts.segments_read) == (24, 3, 3)


def test_the_failure_with_the_lowest_partition_and_offset_is_the_runs() -> None:
    plan = _plan({0: [(0, 9, 5)], 1: [(0, 9, 5)]})
    late = RunFailure(kind=FailureKind.CORRUPT_SEGMENT, message="late", segment_key="b")
    early = RunFailure(kind=FailureKind.SEGMENT_UNAVAILABLE, message="early", segment_key="a")
    reports = [
        TaskReport(task_index=0, failure=late, failure_at=(1, 0)),
        TaskReport(task_index=1, failure=early, failure_at=(0, 5)),
        TaskReport(task_index=2, segments=(SegmentOutcome(partition=0, key="x", records_written=3),)),
    ]
    result = build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=1))
    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.SEGMENT_UNAVAILABLE
    assert result.failure.message.startswith("early")
    assert result.data_files == ()


def _partition_rows(partition: int, offsets: range) -> pa.Table:
    return pa.table(
        {
            "partition": pa.array([partition] * len(offsets), pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
        }
    )


def test_a_kafka_partition_with_enough_rows_gets_its_own_files_in_offset_order(tmp_path: Path) -> None:
    writer = RollingParquetWriter(
        sink=StagedFileStore(),
        data_uri=str(tmp_path),
        schema=_partition_rows(0, range(0)).schema,
        task_index=0,
        target_file_size_bytes=1 << 30,
        partition_file_min_bytes=8 * 1000,  # 1000 rows of 12 bytes
    )
    for start in range(0, 3000, 500):  # partitions 0 and 1 interleaved, as segments arrive
        writer.write({}, _partition_rows(0, range(start, start + 500)), kafka_partition=0)
        writer.write({}, _partition_rows(1, range(start, start + 500)), kafka_partition=1)
    writer.write({}, _partition_rows(2, range(0, 10)), kafka_partition=2)  # too few: shared
    writer.write({}, _partition_rows(3, range(0, 10)), kafka_partition=3)

    files = writer.close()

    by_name = {Path(f.uri).name: pq.read_table(f.uri) for f in files}
    key = partition_hash({})
    assert sorted(by_name) == [
        f"part-{key}-00000-0000.parquet",
        f"part-{key}-p0-00000-0000.parquet",
        f"part-{key}-p1-00000-0000.parquet",
    ]
    for p in (0, 1):
        own = by_name[f"part-{key}-p{p}-00000-0000.parquet"]
        assert set(own.column("partition").to_pylist()) == {p}
        assert own.column("offset").to_pylist() == list(range(3000))
    shared = by_name[f"part-{key}-00000-0000.parquet"]
    assert list(
        zip(shared.column("partition").to_pylist(), shared.column("offset").to_pylist(), strict=True)
    ) == [(p, o) for p in (2, 3) for o in range(10)]
