"""Fill numba's on-disk cache by running one small plan in-process
(`python -m kafscale_iceberg.execution.warm_cache`).

The Lambda runner's image runs it at build time (`infra/lambda/runner.Dockerfile`, with
`NUMBA_CACHE_DIR` and `NUMBA_CPU_NAME=generic` so the cache fits any CPU of the architecture), so a
cold start loads the compiled record walker and JSON scanner instead of compiling them (seconds).
The plan is synthetic: one segment of JSON records on a local folder, mapped to typed columns, so
every compiled kernel a run uses is compiled once. Exits 1 when the run failed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    PartitionPlan,
    PlannedSegment,
    RunPlan,
    RunResult,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.execution.in_process import run_plan_in_process
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.segments.layout import Codec

_COLUMNS = (
    ColumnSpec(name="id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="name", type=ColumnType.STRING),
    ColumnSpec(name="price", type=ColumnType.DOUBLE),
    ColumnSpec(name="at", type=ColumnType.TIMESTAMP),
    ColumnSpec(name="active", type=ColumnType.BOOLEAN),
)


def warm_plan(root: Path, records: int = 200) -> RunPlan:
    """A plan over one synthetic segment of `records` JSON records written under `root`."""
    values = [
        json.dumps(
            {"id": i, "name": f"n-{i}", "price": i + 0.5, "at": "2026-11-26T10:00:00Z", "active": i % 2 == 0}
        ).encode()
        for i in range(records)
    ]
    batch = [
        Record(offset=i, timestamp_ms=1_795_132_800_000 + i, key=f"k{i}".encode(), value=v, headers=())
        for i, v in enumerate(values)
    ]
    files = build_segment([encode_record_batch(batch, codec=Codec.NONE)], created_at_ms=1_795_132_800_000)
    key = format_segment_key("warm", "warm", 0, files.base_offset)
    (root / key).parent.mkdir(parents=True, exist_ok=True)
    (root / key).write_bytes(files.kfs)
    run_id = make_run_id("warm", [(0, -1, records - 1)])
    segment = PlannedSegment(
        key=key, base_offset=files.base_offset, last_offset=files.last_offset, size_bytes=len(files.kfs)
    )
    return RunPlan(
        run_id=run_id,
        topic="warm",
        created_at_ms=1_795_132_800_000,
        source=SegmentSource(root=str(root)),
        partitions=(
            PartitionPlan(partition=0, start_exclusive=-1, end_inclusive=records - 1, segments=(segment,)),
        ),
        table=TableTarget(identifier="warm.warm", data_uri=str(root / "data" / run_id)),
        dead_letter_table=TableTarget(identifier="warm.warm_dlq", data_uri=str(root / "dlq" / run_id)),
        conversion=ConversionSettings(columns=_COLUMNS),
        result_uri=str(root / "runs" / run_id / "result.json"),
    )


def warm() -> RunResult:
    """Run the synthetic plan once in a temporary folder; its result."""
    with tempfile.TemporaryDirectory(prefix="kafscale-warm-") as folder:
        root = Path(folder)
        plan = warm_plan(root)
        plan_uri = str(root / "runs" / plan.run_id / "plan.json")
        Path(plan_uri).parent.mkdir(parents=True, exist_ok=True)
        Path(plan_uri).write_text(plan.model_dump_json())
        return run_plan_in_process(plan_uri, workers=1)


def main() -> int:
    """Warm the cache; 0 when the run succeeded."""
    result = warm()
    print(f"numba cache warmed: run {result.status.value}, {result.counts.written} records")
    return 0 if result.failure is None else 1


if __name__ == "__main__":
    sys.exit(main())
