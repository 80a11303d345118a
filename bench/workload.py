"""The workload the Spark and format benchmarks share (`Workload`: generated segments and the plan over
them, built by `bench.spark.make_workload`), below both so `bench.formats` and `bench.spark` never
import each other."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.domain.runs import RunPlan


@dataclass(frozen=True)
class Workload:
    """The generated segments and the plan over them (`s3`: where the segments are read from)."""

    root: Path
    plan: RunPlan
    records: int
    s3: S3Settings | None = None

    @property
    def megabytes(self) -> float:
        return self.plan.total_bytes / 1e6


def clear_output(workload: Workload) -> None:
    """Removes what a measured run wrote, so the next round writes afresh."""
    for mapping in workload.plan.mappings:
        for target, _role in mapping.static_targets():
            shutil.rmtree(target.data_uri, ignore_errors=True)
