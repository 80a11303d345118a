"""`make bench-upsert`: what an upsert run rewrites, for updates to recent keys and to random keys.

A table of `--rows` (1,000,000) rows is built by `--runs` (40) upsert runs of new, growing keys
(`id`, as a database sequence gives them; one Kafka partition; each run executed by the run driver
with the in-process executor - its tasks write the rows, locate the changed keys in the table and
rewrite, as Spark's do - and committed by the real commit service on a SQLite catalog). Then:

- a run of `--updates` (1,000) updates to the most recent keys;
- a run of `--updates` updates to keys drawn at random over the table;
- the same records as the recent-keys run, appended to an append table (the baseline run time).

Measured: bytes of the table files each upsert run rewrote (its `kafscale.upsert.bytes-rewritten`)
over the table's bytes before it (`*_rewritten_share`), and each run's time (driver + tasks + commit) against
the append run's (`upsert_vs_append_run_s`, `random_vs_append_run_s`). Under `--write` (`upsert.write`,
default `auto`: the random run writes position deletes) the random run's bytes written - data and
delete files - over the table's (`random_keys_written_share`) and bytes read to locate its keys
(`random_keys_read_share`, key columns only). Then `--mor-runs` (100) more runs of `--mor-updates`
(100) random updates each, a full pyiceberg scan timed, `maintain`'s compaction folding every delete,
the scan timed again (`read_after_100_mor_runs_vs_compacted`), checked to hold the same rows and no
delete file. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import (
    ConversionSettings,
    PartitionPlan,
    PlannedSegment,
    RunPlan,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.domain.tickets import join_uri
from kafscale_iceberg.execution.driver import TaskSizing
from kafscale_iceberg.execution.in_process import run_plan_in_process
from kafscale_iceberg.local.config_document import one_machine_document
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.launch import run_data_prefix
from tests.support.table_readers import delete_file_paths, full_compaction

TOPIC, TABLE = "customers", "bench.customers"
BASE_TIME_MS = 1_763_600_000_000
CREATE = TablePolicy(create_table_if_missing=True)
LEASE_TTL_S = 3600
SCANS = 3
"""Full scans timed per table state; the fastest counts (the others measure the machine's load)."""
COLUMNS = [
    {"name": "id", "type": "long", "required": True},
    {"name": "email", "type": "string"},
    {"name": "score", "type": "long"},
]


def value(key: int, version: int) -> bytes:
    return json.dumps({"id": key, "email": f"user{key}@example.com", "score": version}).encode()


@dataclass
class RunMeasure:
    seconds: float
    bytes_rewritten: int
    table_bytes: int
    files_rewritten: int
    table_files: int
    bytes_written: int = 0
    bytes_located: int = 0

    @property
    def share(self) -> float:
        return self.bytes_rewritten / self.table_bytes if self.table_bytes else 0.0


class Topic:
    """One topic's segments, and a table (upsert or append) it lands in, run by run."""

    def __init__(self, root: Path, *, mode: str, target_file_size_bytes: int, write: str = "auto") -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        mapping = {
            "topic": TOPIC,
            "table": TABLE,
            "mode": mode,
            "create_table_if_missing": True,
            "target_file_size_bytes": target_file_size_bytes,
            "schema": {"columns": COLUMNS},
            **({"upsert": {"key": ["id"], "write": write}} if mode == "upsert" else {}),
        }
        # A lease the bench's own commits cannot outlast: a 1,000,000-row run under load took longer
        # than the default 30 s between its claim and its commit (the bench is the only writer).
        document = one_machine_document(
            root, bucket="unused", mappings=[mapping], offsets={"lease_ttl_seconds": LEASE_TTL_S}
        )
        self.config = config_from_mapping(document, source="bench")
        self.assembly = Assembly(self.config, owner_id="bench")
        self.mapping = self.config.mappings[0]
        self.segments = root / "segments"
        self.target_file_size_bytes = target_file_size_bytes
        self.next_offset = 0
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))

    def run(self, changes: list[tuple[int, int]]) -> float:
        """One run of `(key, version)` upserts; its seconds (tasks + commit)."""
        first = self.next_offset
        records = [
            Record(offset=first + i, timestamp_ms=BASE_TIME_MS + first + i, key=None, value=value(k, v))
            for i, (k, v) in enumerate(changes)
        ]
        batches = [encode_record_batch(records[i : i + 1000]) for i in range(0, len(records), 1000)]
        files = build_segment(batches, created_at_ms=BASE_TIME_MS)
        key = format_segment_key("bench", TOPIC, 0, first)
        (self.segments / key).parent.mkdir(parents=True, exist_ok=True)
        (self.segments / key).write_bytes(files.kfs)
        last = first + len(records) - 1
        segment = PlannedSegment(key=key, base_offset=first, last_offset=last, size_bytes=len(files.kfs))
        self.next_offset = last + 1
        plan = self._plan(
            PartitionPlan(partition=0, start_exclusive=first - 1, end_inclusive=last, segments=(segment,))
        )
        plan_uri = plan.result_uri.rsplit("/", 1)[0] + "/plan.json"
        Path(plan_uri.removeprefix("file://")).parent.mkdir(parents=True, exist_ok=True)
        Path(plan_uri.removeprefix("file://")).write_text(plan.model_dump_json())
        started = time.perf_counter()
        result = run_plan_in_process(plan_uri, workers=2, sizing=TaskSizing(min_task_bytes=1))
        assert result.failure is None, result.failure
        grant = self.assembly.checkpoints.claim_lease(TOPIC, owner_id="bench", run_id=plan.run_id)
        assert isinstance(grant, LeaseGrant)
        self.assembly.commits.commit_run(plan, result, grant, CREATE)
        return time.perf_counter() - started

    def measured(self, changes: list[tuple[int, int]]) -> RunMeasure:
        table_bytes, table_files = self.size()
        seconds = self.run(changes)
        snapshot = self.catalog.load_table(TABLE).current_snapshot()
        assert snapshot is not None
        assert snapshot.summary is not None
        return RunMeasure(
            seconds=seconds,
            bytes_rewritten=int(snapshot.summary.get("kafscale.upsert.bytes-rewritten") or 0),
            table_bytes=table_bytes,
            files_rewritten=int(snapshot.summary.get("kafscale.upsert.files-rewritten") or 0),
            table_files=table_files,
            bytes_written=int(snapshot.summary.get("added-files-size") or 0),
            bytes_located=int(snapshot.summary.get("kafscale.upsert.bytes-located") or 0),
        )

    def scan_seconds(self) -> tuple[float, int]:
        """A full scan of the table with pyiceberg (planning and deletes applied): the fastest of
        `SCANS`' seconds, and its rows."""
        table = self.catalog.load_table(TABLE)
        timings = []
        for _ in range(SCANS):
            started = time.perf_counter()
            rows = table.scan().to_arrow()
            timings.append(time.perf_counter() - started)
        return min(timings), rows.num_rows

    def compact(self) -> bool:
        """`maintain`'s compaction of every file, every position delete folded; whether it landed."""
        maintainer = self.assembly.table_maintainer
        written = full_compaction(
            maintainer,
            TABLE,
            data_prefix=str(self.root / "compacted"),
            target_file_size_bytes=self.target_file_size_bytes,
        )
        return bool(maintainer.commit_compaction(written, now_ms=0).committed)

    def delete_files(self) -> int:
        return len(delete_file_paths(self.catalog.load_table(TABLE)))

    def size(self) -> tuple[int, int]:
        """The table's data bytes and files."""
        files = [t.file for t in self.catalog.load_table(TABLE).scan().plan_files()]
        return sum(f.file_size_in_bytes for f in files), len(files)

    def _plan(self, partition: PartitionPlan) -> RunPlan:
        run_id = make_run_id(
            TOPIC, [(partition.partition, partition.start_exclusive, partition.end_inclusive)]
        )
        return RunPlan(
            run_id=run_id,
            topic=TOPIC,
            created_at_ms=int(time.time() * 1000),
            source=SegmentSource(root=str(self.segments)),
            partitions=(partition,),
            table=TableTarget(
                identifier=TABLE,
                data_uri=join_uri(run_data_prefix(self.config, ("bench", "customers")), run_id),
                # What the launcher reads from `field-ids.json`: the version the run locates in.
                metadata_location=self.catalog.load_table(TABLE).metadata_location
                if self.catalog.table_exists(TABLE)
                else None,
            ),
            dead_letter_table=TableTarget(
                identifier=f"{TABLE}__dlq",
                data_uri=join_uri(run_data_prefix(self.config, ("bench", "customers__dlq")), run_id),
            ),
            conversion=ConversionSettings(
                columns=self.mapping.column_specs(),
                target_file_size_bytes=self.config.target_file_size_for(self.mapping),
                upsert=self.mapping.upsert.to_settings() if self.mapping.upsert is not None else None,
            ),
            result_uri=f"file://{self.root}/runs/{run_id}/result.json",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=40, help="runs the table is built by")
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--target-file-size", type=int, default=128 * 1024 * 1024)
    parser.add_argument("--write", default="auto", choices=["auto", "merge-on-read", "copy-on-write"])
    parser.add_argument("--mor-runs", type=int, default=100, help="random-update runs before the read check")
    parser.add_argument("--mor-updates", type=int, default=100, help="random updates per such run")
    args = parser.parse_args()
    rng = random.Random(11)
    per_run = args.rows // args.runs
    with tempfile.TemporaryDirectory(prefix="bench-upsert-") as tmp:
        upsert = Topic(
            Path(tmp) / "upsert",
            mode="upsert",
            target_file_size_bytes=args.target_file_size,
            write=args.write,
        )
        started = time.perf_counter()
        for run in range(args.runs):
            upsert.run([(k, 0) for k in range(run * per_run, (run + 1) * per_run)])
        built_s = time.perf_counter() - started
        rows = per_run * args.runs
        recent_changes = [(k, 1) for k in range(rows - args.updates, rows)]
        recent = upsert.measured(recent_changes)
        random_changes = [(k, 2) for k in sorted(rng.sample(range(rows), args.updates))]
        scattered = upsert.measured(random_changes)
        append = Topic(Path(tmp) / "append", mode="append", target_file_size_bytes=args.target_file_size)
        append_s = append.run(recent_changes)
        table_rows = upsert.catalog.load_table(TABLE).scan().count()
        print(  # before the long read check, so a run stopped in it still reports the runs
            f"random run: wrote {scattered.bytes_written:,}, read {scattered.bytes_located:,} of "
            f"{scattered.table_bytes:,} table bytes in {scattered.seconds:.2f} s (append {append_s:.2f} s)",
            flush=True,
        )
        # `--mor-runs 0`: the runs only (the 10,000,000-row variant: its read check outlasts a session).
        reads = (
            mor_reads(upsert, rng, rows, runs=args.mor_runs, updates=args.mor_updates)
            if args.mor_runs
            else {}
        )
    for name, m in (("recent keys", recent), ("random keys", scattered)):
        print(
            f"{name:12s} rewrote {m.files_rewritten}/{m.table_files} files, {m.bytes_rewritten:,} of "
            f"{m.table_bytes:,} bytes ({m.share:.1%}), wrote {m.bytes_written:,}, read {m.bytes_located:,} "
            f"to locate, in {m.seconds:.2f} s"
        )
    print(f"append of the same records: {append_s:.2f} s; table built in {built_s:.0f} s ({args.runs} runs)")
    if reads:
        print(
            f"full scan after {args.mor_runs} runs of {args.mor_updates} random updates: "
            f"{reads['mor_scan_s']:.2f} s "
            f"({reads['delete_files']} delete files); after compaction: {reads['compacted_scan_s']:.2f} s"
        )
    print(
        json.dumps(
            {
                "rows": table_rows,
                "build_runs": args.runs,
                "updates": args.updates,
                "write": args.write,
                "table_files": recent.table_files,
                "build_s": round(built_s, 1),
                "recent_keys_rewritten_share": round(recent.share, 4),
                "random_keys_rewritten_share": round(scattered.share, 4),
                "random_keys_written_share": round(scattered.bytes_written / scattered.table_bytes, 4),
                "random_keys_read_share": round(scattered.bytes_located / scattered.table_bytes, 4),
                "random_keys_bytes_written": scattered.bytes_written,
                "random_keys_bytes_read": scattered.bytes_located,
                "recent_keys_run_s": round(recent.seconds, 3),
                "random_keys_run_s": round(scattered.seconds, 3),
                "append_run_s": round(append_s, 3),
                "upsert_vs_append_run_s": round(recent.seconds / append_s, 2),
                "random_vs_append_run_s": round(scattered.seconds / append_s, 2),
                **reads,
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
                "load_1m": round(os.getloadavg()[0], 1),
            }
        )
    )


def mor_reads(topic: Topic, rng: random.Random, rows: int, *, runs: int, updates: int) -> dict[str, Any]:
    """`runs` runs of `updates` random updates, then a full scan before and after a compaction that
    folds every delete; the compacted table must hold the same rows and no delete file."""
    run_seconds = []
    for version in range(3, 3 + runs):
        run_seconds.append(topic.run([(k, version) for k in sorted(rng.sample(range(rows), updates))]))
    delete_files = topic.delete_files()
    mor_s, mor_rows = topic.scan_seconds()
    before = topic.catalog.load_table(TABLE).scan().to_arrow().sort_by("id")
    assert topic.compact(), "the compaction did not land"
    compacted_s, compacted_rows = topic.scan_seconds()
    after = topic.catalog.load_table(TABLE).scan().to_arrow().sort_by("id")
    assert topic.delete_files() == 0, "delete files left after compaction"
    assert mor_rows == compacted_rows == rows
    assert before.select(["id", "email", "score"]).equals(after.select(["id", "email", "score"]))
    return {
        "mor_runs": runs,
        "mor_updates": updates,
        "mor_run_s_median": round(sorted(run_seconds)[len(run_seconds) // 2], 3) if run_seconds else 0.0,
        "delete_files": delete_files,
        "mor_scan_s": round(mor_s, 3),
        "compacted_scan_s": round(compacted_s, 3),
        "read_after_100_mor_runs_vs_compacted": round(mor_s / compacted_s, 2) if compacted_s else 0.0,
    }


if __name__ == "__main__":
    main()
