"""Commit-step latency on a SQLite catalog: a run of N data files vs a plain pyiceberg append.

Run with `python -m bench.commit` (or `make bench-commit`). For each N (1, 10, 100) the same rows
(`--rows`, default 100,000, KafScale base fields + 2 mapping columns) are:

- written as N id-less Parquet files, as the Spark job writes them (not timed), then committed with
  `CommitService.commit_run`: lease renewal, table state read, offsets check, schema check, ONE
  Iceberg commit (`add_files` + marker properties + summary), offset write, lease release. Timed end
  to end, `--runs` consecutive runs (each the next offset range) on one table; the median is reported.
- appended to a second table with `table.append(arrow_table)` (pyiceberg writes the Parquet itself,
  one snapshot): the plain way to get the same rows into Iceberg, timed the same way.

Snapshots per run = snapshots of the run's table / runs (must be 1 whatever N). The last line of
output is one JSON object with the N=100 figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.commits import TableCommit, TableSpec, TableState
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    DataFile,
    PartitionOutcome,
    RunPlan,
    RunResult,
    RunStatus,
    RunTimings,
    make_run_id,
)
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy

TOPIC = "orders"
COLUMNS = (
    ColumnSpec(name="amount", type=ColumnType.LONG),
    ColumnSpec(name="event_time", type=ColumnType.TIMESTAMP),
)
_ARROW = {
    ColumnType.STRING: pa.string(),
    ColumnType.INT: pa.int32(),
    ColumnType.LONG: pa.int64(),
    ColumnType.BINARY: pa.binary(),
    ColumnType.TIMESTAMP: pa.timestamp("us"),
}


@dataclass(frozen=True)
class Measurement:
    files: int
    rows: int
    commit_s: float
    iceberg_commit_s: float
    plain_append_s: float
    snapshots_per_run: float

    @property
    def ratio(self) -> float:
        return self.commit_s / self.plain_append_s


def _schema() -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, _ARROW[f.type], nullable=not f.required) for f in table_fields(COLUMNS)]
    )


def _rows(first: int, count: int) -> pa.Table:
    offsets = pa.array(range(first, first + count), pa.int64())
    micros = pa.array([1_790_000_000_000_000 + o * 1000 for o in range(first, first + count)], pa.int64())
    return pa.Table.from_arrays(
        [
            pa.array([f"{TOPIC}:0:{o}" for o in range(first, first + count)]),
            pa.array([TOPIC] * count),
            pa.array([0] * count, pa.int32()),
            offsets,
            pa.array([1_790_000_000_000 + o for o in range(first, first + count)], pa.int64()),
            pa.array([b"key-%d" % o for o in range(first, first + count)]),
            pa.array([b'{"amount":%d,"note":"pizza order"}' % o for o in range(first, first + count)]),
            pa.array([""] * count),
            pa.array([o * 10 for o in range(first, first + count)], pa.int64()),
            micros.cast(pa.timestamp("us")),
        ],
        schema=_schema(),
    )


def _plan(root: Path, start: int, end: int) -> RunPlan:
    run_id = make_run_id(TOPIC, [(0, start, end)])
    base = f"file://{root}/runs/{run_id}"
    return RunPlan.model_validate(
        {
            "run_id": run_id,
            "topic": TOPIC,
            "created_at_ms": 1,
            "source": {"root": str(root)},
            "partitions": [
                {
                    "partition": 0,
                    "start_exclusive": start,
                    "end_inclusive": end,
                    "segments": [
                        {
                            "key": f"ns/{TOPIC}/0/x.kfs",
                            "base_offset": start + 1,
                            "last_offset": end,
                            "size_bytes": 1,
                        }
                    ],
                }
            ],
            "table": {"identifier": "bench.orders", "data_uri": f"{base}/data"},
            "dead_letter_table": {"identifier": "bench.orders__dlq", "data_uri": f"{base}/dead"},
            "conversion": {"columns": [c.model_dump() for c in COLUMNS]},
            "result_uri": f"{base}/result.json",
        }
    )


def _write_run(plan: RunPlan, rows: pa.Table, files: int) -> RunResult:
    data_dir = Path(plan.table.data_uri.removeprefix("file://"))
    data_dir.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows.num_rows // files)
    data_files = []
    for index in range(files):
        chunk = rows.slice(index * per_file, per_file)
        path = data_dir / f"part-00000000-{index:05d}-0000.parquet"
        pq.write_table(chunk, path, compression="zstd", compression_level=1)
        data_files.append(
            DataFile(uri=f"file://{path}", record_count=chunk.num_rows, size_bytes=path.stat().st_size)
        )
    last = plan.partitions[0].end_inclusive
    return RunResult(
        run_id=plan.run_id,
        topic=TOPIC,
        status=RunStatus.SUCCEEDED,
        data_files=tuple(data_files),
        partitions=(
            PartitionOutcome(
                partition=0, first_offset=plan.partitions[0].start_exclusive + 1, last_offset=last
            ),
        ),
        timings=RunTimings(started_at_ms=1, ended_at_ms=2),
    )


class TimedTables(IcebergTableCommitter):
    """The real committer, adding up the time spent in its Iceberg commit (add_files + catalog commit)."""

    spent_s = 0.0

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        began = time.perf_counter()
        try:
            return super().commit(expected, commit)
        finally:
            self.spent_s += time.perf_counter() - began


def measure(files: int, rows: int, runs: int) -> Measurement:
    """Commit `runs` consecutive runs of `files` files each, and plain-append the same rows."""
    with tempfile.TemporaryDirectory(prefix="bench-commit-") as tmp:
        root = Path(tmp)
        settings = CatalogSettings(
            type="sql", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh"
        )
        catalog = load_iceberg_catalog(settings)
        tables = TimedTables(catalog, describe=settings.describe())
        store = SqliteCheckpointStore(root / "checkpoints.db")
        service = CommitService(tables, store)
        spec = TableSpec("bench.orders", table_fields(COLUMNS), create_if_missing=True)
        tables.ensure_table(spec)
        tables.ensure_table(TableSpec("bench.plain", spec.fields, create_if_missing=True))
        plain = catalog.load_table("bench.plain")
        commit_times: list[float] = []
        iceberg_times: list[float] = []
        append_times: list[float] = []
        for run in range(runs + 1):  # run 0 warms caches and imports up; it is not counted
            start = run * rows - 1
            plan = _plan(root, start, start + rows)
            batch = _rows(start + 1, rows)
            result = _write_run(plan, batch, files)
            lease = store.claim_lease(TOPIC, owner_id="bench", run_id=plan.run_id)
            assert isinstance(lease, LeaseGrant)
            tables.spent_s = 0.0
            began = time.perf_counter()
            service.commit_run(plan, result, lease, TablePolicy(create_table_if_missing=True))
            commit_s = time.perf_counter() - began
            began = time.perf_counter()
            plain.append(batch)
            append_s = time.perf_counter() - began
            if run:
                commit_times.append(commit_s)
                iceberg_times.append(tables.spent_s)
                append_times.append(append_s)
        snapshots = len(catalog.load_table("bench.orders").snapshots())
        assert catalog.load_table("bench.orders").scan().to_arrow().num_rows == rows * (runs + 1)
        return Measurement(
            files=files,
            rows=rows,
            commit_s=statistics.median(commit_times),
            iceberg_commit_s=statistics.median(iceberg_times),
            plain_append_s=statistics.median(append_times),
            snapshots_per_run=snapshots / (runs + 1),
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per run (default 100000)")
    parser.add_argument("--runs", type=int, default=5, help="consecutive runs per file count (default 5)")
    parser.add_argument(
        "--files", type=int, nargs="+", default=[1, 10, 100], help="file counts (default 1 10 100)"
    )
    args = parser.parse_args(argv)
    results = [measure(files, args.rows, args.runs) for files in args.files]
    print(f"commit step on a SQLite catalog: {args.rows:,} rows per run, median of {args.runs} runs")
    header = ("files", "commit s", "of it iceberg s", "plain append s", "commit/append", "snapshots/run")
    print("{:>6} {:>9} {:>16} {:>15} {:>14} {:>14}".format(*header))
    for m in results:
        cells = (m.files, m.commit_s, m.iceberg_commit_s, m.plain_append_s, m.ratio, m.snapshots_per_run)
        print("{:>6} {:>9.3f} {:>16.3f} {:>15.3f} {:>14.2f} {:>14.2f}".format(*cells))
    headline = results[-1]
    print(
        json.dumps(
            {
                "commit_s": round(headline.commit_s, 4),
                "vs_plain_append": round(headline.ratio, 3),
                "snapshots_per_run": max(m.snapshots_per_run for m in results),
            }
        )
    )


if __name__ == "__main__":
    main()
