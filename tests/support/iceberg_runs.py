"""Stand-ins for the Spark job's output: run plans, id-less Parquet files and run results.

The files are what the data plane writes for a plan: no field ids, microsecond timestamps without
zone, a column non-nullable exactly when the table field is required, one partition value per file.
Rows are derived from the offset alone, so any test can say exactly which rows a table must hold.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.dataplane.schemas import DEAD_LETTER_SCHEMA, data_schema
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    DataFile,
    PartitionField,
    PartitionOutcome,
    PlannedSegment,
    QuarantinedSegment,
    RunPlan,
    RunResult,
    RunStatus,
    RunTimings,
    make_run_id,
)

DAY_ZERO = dt.datetime(2026, 11, 20)
DEFAULT_COLUMNS = (
    ColumnSpec(name="amount", type=ColumnType.LONG),
    ColumnSpec(name="event_time", type=ColumnType.TIMESTAMP),
)


def sql_settings(root: Path) -> CatalogSettings:
    """A SQLite catalog with a local warehouse under `root`."""
    return CatalogSettings(
        type="sql", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse"
    )


def sql_committer(root: Path) -> IcebergTableCommitter:
    """The table committer over a fresh SQLite catalog under `root`."""
    settings = sql_settings(root)
    return IcebergTableCommitter(load_iceberg_catalog(settings), describe=settings.describe())


def value_of(column: ColumnSpec, partition: int, offset: int) -> Any:
    """The value the stand-in writes for a mapping column: a function of partition and offset."""
    if column.type is ColumnType.TIMESTAMP:
        # One day per Kafka partition: a file of one partition holds one day(event_time) value.
        return DAY_ZERO + dt.timedelta(days=partition, seconds=offset)
    if column.type is ColumnType.DATE:
        return (DAY_ZERO + dt.timedelta(days=partition)).date()
    if column.type in {ColumnType.INT, ColumnType.LONG}:
        return offset * 10
    if column.type in {ColumnType.FLOAT, ColumnType.DOUBLE}:
        return offset / 4
    if column.type is ColumnType.BOOLEAN:
        return offset % 2 == 0
    if column.type is ColumnType.BINARY:
        return f"b{offset}".encode()
    return f"s{offset}"


def data_rows(topic: str, partition: int, offsets: Iterable[int], columns: Sequence[ColumnSpec]) -> pa.Table:
    """Rows of a mapped table for `offsets` of one partition."""
    offsets = list(offsets)
    base: dict[str, list[Any]] = {
        "record_id": [f"{topic}:{partition}:{o}" for o in offsets],
        "topic": [topic] * len(offsets),
        "partition": [partition] * len(offsets),
        "offset": offsets,
        "timestamp_ms": [1_790_000_000_000 + o for o in offsets],
        "key": [f"k{o}".encode() for o in offsets],
        "value": [f'{{"amount":{o}}}'.encode() for o in offsets],
        "headers": [""] * len(offsets),
    }
    for column in columns:
        base[column.name] = [value_of(column, partition, o) for o in offsets]
    return pa.Table.from_pydict(base, schema=data_schema(columns))


def dead_letter_rows(topic: str, partition: int, offsets: Iterable[int], run_id: str) -> pa.Table:
    """Dead-letter rows for records at `offsets` that failed validation."""
    offsets = list(offsets)
    columns: dict[str, list[Any]] = {
        "record_id": [f"{topic}:{partition}:{o}" for o in offsets],
        "topic": [topic] * len(offsets),
        "partition": [partition] * len(offsets),
        "offset": offsets,
        "timestamp_ms": [1_790_000_000_000 + o for o in offsets],
        "key": [None] * len(offsets),
        "value": [b"not json"] * len(offsets),
        "headers": [""] * len(offsets),
        "error_kind": ["invalid_json"] * len(offsets),
        "error": ["value is not a JSON object"] * len(offsets),
        "run_id": [run_id] * len(offsets),
        "segment_key": [None] * len(offsets),
        "last_offset": [None] * len(offsets),
    }
    return pa.Table.from_pydict(columns, schema=DEAD_LETTER_SCHEMA)


def write_file(table: pa.Table, path: Path) -> DataFile:
    """Write `table` as one Parquet file (as the data plane does) and describe it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return DataFile(uri=f"file://{path}", record_count=table.num_rows, size_bytes=path.stat().st_size)


@dataclass
class RunFactory:
    """Plans runs for one topic and writes the files their Spark job would write."""

    root: Path
    topic: str = "orders"
    table: str = "lake.orders"
    dead_letter_table: str = "lake.orders__dlq"
    columns: tuple[ColumnSpec, ...] = DEFAULT_COLUMNS
    partition_by: tuple[PartitionField, ...] = ()
    attempt: int = 0
    _counter: int = field(default=0, repr=False)

    def plan(self, ranges: Mapping[int, tuple[int, int]]) -> RunPlan:
        """A plan over `{partition: (start_exclusive, end_inclusive)}`, one segment per partition."""
        run_id = make_run_id(self.topic, [(p, s, e) for p, (s, e) in ranges.items()], self.attempt)
        runs = self.root / "runs" / self.topic / run_id
        return RunPlan.model_validate(
            {
                "run_id": run_id,
                "topic": self.topic,
                "created_at_ms": 1,
                "source": {"root": str(self.root / "segments")},
                "partitions": [
                    {
                        "partition": p,
                        "start_exclusive": s,
                        "end_inclusive": e,
                        "segments": [
                            PlannedSegment(
                                key=f"ns/{self.topic}/{p}/segment-{s + 1:020d}.kfs",
                                base_offset=s + 1,
                                last_offset=e,
                                size_bytes=100,
                            )
                        ],
                    }
                    for p, (s, e) in sorted(ranges.items())
                ],
                "table": {"identifier": self.table, "data_uri": f"file://{runs}/data"},
                "dead_letter_table": {
                    "identifier": self.dead_letter_table,
                    "data_uri": f"file://{runs}/dead",
                },
                "conversion": {"columns": self.columns, "partition_by": self.partition_by},
                "result_uri": f"file://{runs}/result.json",
            }
        )

    def result(
        self,
        plan: RunPlan,
        *,
        files_per_partition: int = 1,
        dead_letters: Mapping[int, Sequence[int]] | None = None,
        quarantined: Mapping[int, tuple[int, int]] | None = None,
        skip: Mapping[int, Sequence[int]] | None = None,
    ) -> RunResult:
        """Write the run's files and return its result.

        Every offset of the plan becomes a row, except `dead_letters[p]` (dead-letter rows instead),
        `quarantined[p] = (first, last)` (one dead-letter row for the segment) and `skip[p]` (in no
        file at all: out of range). Each partition's rows are split over `files_per_partition` files.
        """
        dead_letters = dead_letters or {}
        quarantined = quarantined or {}
        skip = skip or {}
        data_dir = Path(plan.table.data_uri.removeprefix("file://"))
        dead_dir = Path(plan.dead_letter_table.data_uri.removeprefix("file://"))
        data_files: list[DataFile] = []
        dead_files: list[DataFile] = []
        outcomes: list[PartitionOutcome] = []
        for part in plan.partitions:
            p = part.partition
            bad = set(dead_letters.get(p, ()))
            q_first, q_last = quarantined.get(p, (0, -1))
            excluded = bad | set(skip.get(p, ())) | set(range(q_first, q_last + 1))
            good = [o for o in range(part.start_exclusive + 1, part.end_inclusive + 1) if o not in excluded]
            chunks = [good[i::files_per_partition] for i in range(files_per_partition)]
            for index, chunk in enumerate(c for c in chunks if c):
                rows = data_rows(plan.topic, p, sorted(chunk), self.columns)
                data_files.append(write_file(rows, data_dir / f"part-{p}-{index:05d}.parquet"))
            dead: list[pa.Table] = []
            if bad:
                dead.append(dead_letter_rows(plan.topic, p, sorted(bad), plan.run_id))
            quarantine: tuple[QuarantinedSegment, ...] = ()
            if p in quarantined:
                key = f"ns/{plan.topic}/{p}/segment-{q_first:020d}.kfs"
                quarantine = (
                    QuarantinedSegment(key=key, base_offset=q_first, last_offset=q_last, error="crc"),
                )
                row = dead_letter_rows(plan.topic, p, [q_first], plan.run_id).to_pydict()
                row.update(
                    error_kind=["corrupt_segment"], segment_key=[key], last_offset=[q_last], value=[None]
                )
                dead.append(pa.Table.from_pydict(row, schema=DEAD_LETTER_SCHEMA))
            if dead:
                dead_files.append(write_file(pa.concat_tables(dead), dead_dir / f"dead-{p}.parquet"))
            outcomes.append(
                PartitionOutcome(
                    partition=p,
                    first_offset=good[0] if good else None,
                    last_offset=good[-1] if good else None,
                    max_timestamp_ms=1_790_000_000_000 + good[-1] if good else None,
                    records_written=len(good),
                    records_dead_lettered=len(bad),
                    quarantined=quarantine,
                )
            )
        return RunResult(
            run_id=plan.run_id,
            topic=plan.topic,
            status=RunStatus.SUCCEEDED,
            data_files=tuple(data_files),
            dead_letter_files=tuple(dead_files),
            partitions=tuple(outcomes),
            timings=RunTimings(started_at_ms=1, ended_at_ms=2),
        )
