"""`make bench-maintenance`: a table after `--runs` (500) small runs, before and after `maintain`.

The table is built by the real data plane and commit step (`bench/tables.py`): `--runs` runs of
`--records` (100) records in each of `--partitions` (4) partitions, as a topic committing every
minute gives (small runs: every file of a run is small, and each run is one snapshot). Measured
before and after one `maintain` pass (`MaintenanceService`: compaction, snapshot expiry with
`maintenance.keep_snapshots` = `--keep` and a retention of 0 - the runs here are seconds apart, not
minutes - and orphan cleanup): data files, snapshots, manifest bytes of the current snapshot, and a
full-scan time (`table.scan().to_arrow()`, median of 3). Then partition 0 is reset to drop its last
10 % (the compacted files are partition-pure): rows rewritten per row removed. The last line is one
JSON object with files_before, files_after, scan_speedup and reset_rewrite_ratio.

Compaction writes files of about the mapping's `target_file_size_bytes`, cut at offset boundaries:
a reset then rewrites at most about one such file of the partition. The table here is a scale model
(a partition's history is a few MB, not GB), so the target is scaled with it: `--target-file-bytes`
(default 512 KiB) makes a partition's 50,000 rows about ten target files, as 5 GB of a partition is
with 512 MiB files. `--target-file-bytes 0` keeps the product default (128 MiB: every partition's
history one file, the layout before this was measured).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.tables import TABLE, BenchTable, reset_tail
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.domain.maintenance import TableHealth


def scan_seconds(bench: BenchTable, repeats: int = 3) -> float:
    catalog = load_iceberg_catalog(CatalogSettings.from_config(bench.config))
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        rows = catalog.load_table(TABLE).scan().to_arrow()
        times.append(time.perf_counter() - started)
        assert rows.num_rows == bench.runs * bench.records * bench.partitions
    return statistics.median(times)


def describe(label: str, health: TableHealth, scan_s: float) -> str:
    return (
        f"{label:7s} files {health.files:6d} (small {health.small_files:6d})  "
        f"snapshots {health.snapshots:5d}  manifests {health.manifests:4d} "
        f"({health.manifest_bytes / 1024:8.1f} KiB)  full scan {scan_s:.3f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=100, help="records per partition per run")
    parser.add_argument("--keep", type=int, default=100, help="maintenance.keep_snapshots")
    parser.add_argument(
        "--target-file-bytes",
        type=int,
        default=512 * 1024,
        help="the mapping's target_file_size_bytes (scaled to the table; 0: the product default)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-maintenance-") as tmp:
        bench = BenchTable(
            Path(tmp),
            partitions=args.partitions,
            records=args.records,
            partition_file_min_bytes=256 * 1024,
            maintenance={"snapshot_retention": 0, "keep_snapshots": args.keep, "orphan_grace": 0},
            target_file_size_bytes=args.target_file_bytes or None,
        )
        started = time.perf_counter()
        for _ in range(args.runs):
            bench.run()
        print(f"built {args.runs} runs in {time.perf_counter() - started:.0f} s")
        small = bench.config.maintenance.small_file_bytes
        maintainer = bench.assembly.table_maintainer
        before = maintainer.health(TABLE, small_file_bytes=small)
        scan_before = scan_seconds(bench)
        print(describe("before", before, scan_before))
        started = time.perf_counter()
        report = bench.assembly.maintenance.maintain()
        maintain_s = time.perf_counter() - started
        after = maintainer.health(TABLE, small_file_bytes=small)
        scan_after = scan_seconds(bench)
        print(describe("after", after, scan_after))
        (done,) = [t for t in report.tables if t.table == TABLE]
        compaction = done.compaction
        removed, added = (compaction.files_removed, compaction.files_added) if compaction else (0, 0)
        expired = len(done.expiry.expired) if done.expiry else 0
        print(
            f"maintain took {maintain_s:.1f} s: compaction {removed} -> {added} files, "
            f"{expired} snapshots expired, {done.orphans_deleted} orphans"
        )
        reset = reset_tail(bench, partition=0, fraction=0.1)
        print(
            f"reset of partition 0's last 10 %: {reset.snapshots} snapshot, removed {reset.rows_removed}, "
            f"rewrote {reset.rows_rewritten} rows"
        )
        print(
            json.dumps(
                {
                    "runs": args.runs,
                    "files_before": before.files,
                    "files_after": after.files,
                    "snapshots_before": before.snapshots,
                    "snapshots_after": after.snapshots,
                    "manifest_bytes_before": before.manifest_bytes,
                    "manifest_bytes_after": after.manifest_bytes,
                    "scan_s_before": round(scan_before, 4),
                    "scan_s_after": round(scan_after, 4),
                    "scan_speedup": round(scan_before / scan_after, 2) if scan_after else None,
                    "maintain_s": round(maintain_s, 2),
                    "reset_rewrite_ratio": round(reset.ratio, 3),
                    "target_file_size_bytes": bench.config.target_file_size_for(bench.config.mappings[0]),
                }
            )
        )


if __name__ == "__main__":
    main()
