"""What a partition spec costs a task's write, and the bucket kernel against a per-value hash.

Run with `python -m bench.partitioning` (or `make bench-partitioning`). One task's rows (`--rows`,
the 8 base fields plus `order_id` long and `customer` string), split by the spec and written as the
data plane writes them (`split_by_partition` then `RollingParquetWriter`, zstd, local disk), for:
unpartitioned (the baseline), `identity(partition)`, `day(event_time)`, `bucket(16, order_id)`,
`bucket(16, customer)`, `truncate(11, customer)` (5 prefixes). Each is timed `--repeat` times,
interleaved, the median reported with its ratio to the baseline of the same run.

Second, the bucket values of the `order_id` column alone: iceberg-rust's Arrow kernel (what the data
plane calls) against pyiceberg's per-value transform (mmh3 per value: what a pure-Python data plane
would do), as a ratio. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.dataplane.parquet_files import RollingParquetWriter
from kafscale_iceberg.dataplane.partitioning import split_by_partition, transform_values
from kafscale_iceberg.domain.runs import PartitionField, PartitionTransform

SPECS: dict[str, tuple[PartitionField, ...]] = {
    "unpartitioned": (),
    "identity(partition)": (PartitionField(column="partition"),),
    "day(event_time)": (PartitionField(column="event_time", transform=PartitionTransform.DAY),),
    "bucket(16, order_id)": (
        PartitionField(column="order_id", transform=PartitionTransform.BUCKET, parameter=16),
    ),
    "bucket(16, customer)": (
        PartitionField(column="customer", transform=PartitionTransform.BUCKET, parameter=16),
    ),
    "truncate(11, customer)": (
        PartitionField(column="customer", transform=PartitionTransform.TRUNCATE, parameter=11),
    ),
}


def task_rows(count: int) -> pa.Table:
    """`count` rows of 8 Kafka partitions and 3 days, like one task's share of a run."""
    offsets = np.arange(count, dtype=np.int64)
    start = dt.datetime(2026, 11, 20)
    return pa.table(
        {
            "record_id": pa.array([f"orders:{o % 8}:{o}" for o in offsets.tolist()]),
            "topic": pa.array(["orders"] * count),
            "partition": pa.array(offsets % 8, pa.int32()),
            "offset": pa.array(offsets),
            "timestamp_ms": pa.array(1_790_000_000_000 + offsets),
            "key": pa.array([f"k{o}".encode() for o in offsets.tolist()]),
            "value": pa.array([f'{{"order_id":{o}}}'.encode() for o in offsets.tolist()]),
            "headers": pa.array([""] * count),
            "order_id": pa.array(10_000_000 + offsets * 7),
            "customer": pa.array([f"customer-{o % 5000:05d}" for o in offsets.tolist()]),
            "event_time": pa.array(
                [start + dt.timedelta(seconds=int(o) * 259_200 // count) for o in offsets.tolist()],
                pa.timestamp("us"),
            ),
        }
    )


def write_once(rows: pa.Table, spec: tuple[PartitionField, ...], folder: Path) -> tuple[float, int]:
    """Seconds to split and write `rows` under `spec`, and the files written."""
    began = time.perf_counter()
    writer = RollingParquetWriter(
        sink=StagedFileStore(),
        data_uri=f"file://{folder}",
        schema=rows.schema,
        task_index=0,
        target_file_size_bytes=128 * 1024 * 1024,
    )
    for values, part in split_by_partition(rows, spec):
        writer.write(values, part)
    files = writer.close()
    return time.perf_counter() - began, len(files)


def timed(action: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--hash-rows", type=int, default=200_000)
    args = parser.parse_args()

    rows = task_rows(args.rows)
    samples: dict[str, list[float]] = {name: [] for name in SPECS}
    files: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as root:
        write_once(rows, (), Path(root) / "warm-up")
        for attempt in range(args.repeat):
            for name, spec in SPECS.items():  # interleaved, so load shifts hit every spec alike
                seconds, files[name] = write_once(rows, spec, Path(root) / f"{attempt}-{len(samples[name])}")
                samples[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    baseline = medians["unpartitioned"]
    print(f"one task's write of {args.rows:,} rows, median of {args.repeat}")
    print(f"{'spec':<24}{'files':>7}{'write s':>10}{'vs unpartitioned':>18}")
    for name, seconds in medians.items():
        print(f"{name:<24}{files[name]:>7}{seconds:>10.3f}{seconds / baseline:>18.2f}")

    ids = pa.array(10_000_000 + np.arange(args.hash_rows, dtype=np.int64) * 7)
    field = SPECS["bucket(16, order_id)"][0]
    per_value = BucketTransform(16).transform(LongType())
    kernel_s = timed(lambda: transform_values(ids, field), args.repeat)
    python_s = timed(lambda: [per_value(v) for v in ids.to_pylist()], max(1, args.repeat // 2))
    print(
        f"bucket(16) of {args.hash_rows:,} longs: kernel {kernel_s * 1000:.1f} ms, "
        f"per-value mmh3 {python_s * 1000:.1f} ms ({python_s / kernel_s:.0f}x)"
    )
    print(
        json.dumps(
            {
                "rows": args.rows,
                **{
                    f"{name}_vs_unpartitioned": round(s / baseline, 3)
                    for name, s in medians.items()
                    if name != "unpartitioned"
                },
                "bucket_kernel_vs_per_value": round(python_s / kernel_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
