"""`make bench-reset`: what a reset of one partition's tail rewrites, per-partition files vs shared files.

A table of `--partitions` (16) Kafka partitions × `--runs` (60) runs of `--records` (1,000) records
per partition per run is built twice by the real data plane and commit step (`bench/tables.py`):

- **per-partition files** (this product's layout): a Kafka partition's rows in a task get files of
  their own, in offset order, once they reach `partition_file_min_bytes` (default 256 KiB);
- **shared files** (the layout before, the baseline): every file of a task mixes its partitions.

Then partition 0 is reset to drop its last `--fraction` (10 %) of offsets, as `replay
--reset-offsets` does (`OffsetReset.reset_offsets`: one Iceberg commit). Measured from the reset
snapshot's summary: rows removed (`deleted-records - added-records`) and rows rewritten
(`added-records`: rows of partly matching files written again); and the snapshots the reset wrote.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from bench.tables import BenchTable, ResetMeasure, reset_tail


def measure(
    root: Path, *, partitions: int, runs: int, records: int, min_bytes: int, fraction: float
) -> ResetMeasure:
    bench = BenchTable(root, partitions=partitions, records=records, partition_file_min_bytes=min_bytes)
    for _ in range(runs):
        bench.run()
    return reset_tail(bench, partition=0, fraction=fraction)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--records", type=int, default=1000, help="records per partition per run")
    parser.add_argument("--fraction", type=float, default=0.1)
    args = parser.parse_args()
    results: dict[str, ResetMeasure] = {}
    for name, min_bytes in (("per_partition", 256 * 1024), ("shared", 1 << 40)):
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"bench-reset-{name}-") as tmp:
            results[name] = measure(
                Path(tmp),
                partitions=args.partitions,
                runs=args.runs,
                records=args.records,
                min_bytes=min_bytes,
                fraction=args.fraction,
            )
        r = results[name]
        print(
            f"{name:14s} files {r.files_before:5d}  reset: {r.snapshots} snapshot(s), "
            f"removed {r.rows_removed} rows, "
            f"rewrote {r.rows_rewritten} rows (ratio {r.ratio:.2f}) in {r.seconds:.2f} s "
            f"[built in {time.perf_counter() - started:.0f} s]"
        )
    own, shared = results["per_partition"], results["shared"]
    print(
        json.dumps(
            {
                "partitions": args.partitions,
                "runs": args.runs,
                "records_per_partition_run": args.records,
                "reset_fraction": args.fraction,
                "reset_snapshots": own.snapshots,
                "rows_removed": own.rows_removed,
                "rows_rewritten": own.rows_rewritten,
                "reset_rewrite_ratio": round(own.ratio, 3),
                "files": own.files_before,
                "baseline_rewrite_ratio": round(shared.ratio, 3),
                "baseline_files": shared.files_before,
                "machine": platform.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
