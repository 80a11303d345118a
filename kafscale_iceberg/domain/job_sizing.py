"""How big an EMR Serverless job a run gets: Spark's driver and executor sizes from the planned bytes.

EMR Serverless bills each worker per second with a one-minute minimum, and its defaults (a driver and
three initial executors of 4 vCPU / 16 GB, dynamic allocation) cost the same for a run of 30 MB as
for one of 3 GB. A run of a live topic is a minute or so of data, tens of MB, which one small
executor processes in seconds. So:

- up to `TINY_JOB_MAX_BYTES` (the runs of a live topic): a 1 vCPU driver with 1 GB of heap (it only
  reads the plan and folds the task reports; EMR's smallest worker, 2 GB) and one 1 vCPU executor
  with 2 GB of heap (a 3 GB worker): 2 vCPU billed instead of 16;
- up to `SMALL_JOB_MAX_BYTES` (a few GB): the same driver and one 2 vCPU / 4 GB executor per
  `BYTES_PER_EXECUTOR` planned (at most 4 + 1 workers, 9 vCPU: inside a new account's 16 vCPU quota);
- dynamic allocation off in both, so the count is what is billed;
- beyond: nothing is set, EMR's defaults apply (today's jobs, sized for backlogs and replays).

A user's `runner.emr_serverless.spark_submit_parameters` win: a key they set (as `--conf key=value`
or as spark-submit's own flag) is never set here (`sizing_conf`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

GIB = 1024**3
TINY_JOB_MAX_BYTES = 256 * 1024**2
SMALL_JOB_MAX_BYTES = 4 * GIB
BYTES_PER_EXECUTOR = GIB
"""A 2-vCPU executor's share of a small job: about half a minute of work at the data plane's
measured per-core speed (docs/benchmarks.md "AWS cost"), so a run is not bound by one worker."""

_FLAGS = {
    "--driver-memory": "spark.driver.memory",
    "--driver-cores": "spark.driver.cores",
    "--executor-memory": "spark.executor.memory",
    "--executor-cores": "spark.executor.cores",
    "--num-executors": "spark.executor.instances",
}


@dataclass(frozen=True)
class JobSize:
    """A small job's shape (vCPU and GB per worker as EMR Serverless bills them)."""

    driver_vcpu: int
    driver_memory_gb: int
    executor_vcpu: int
    executor_memory_gb: int
    executors: int

    @property
    def vcpu(self) -> int:
        return self.driver_vcpu + self.executor_vcpu * self.executors

    @property
    def billed_memory_gb(self) -> int:
        """Memory EMR bills: each worker's Spark memory plus its overhead (10%, at least 384 MB),
        rounded up to whole GB as EMR Serverless sizes workers."""
        driver = math.ceil(self.driver_memory_gb + max(0.384, 0.1 * self.driver_memory_gb))
        executor = math.ceil(self.executor_memory_gb + max(0.384, 0.1 * self.executor_memory_gb))
        return driver + executor * self.executors

    def spark_conf(self) -> dict[str, str]:
        return {
            "spark.driver.cores": str(self.driver_vcpu),
            "spark.driver.memory": f"{self.driver_memory_gb}g",
            "spark.executor.cores": str(self.executor_vcpu),
            "spark.executor.memory": f"{self.executor_memory_gb}g",
            "spark.executor.instances": str(self.executors),
            "spark.dynamicAllocation.enabled": "false",
        }


def job_size(planned_bytes: int) -> JobSize | None:
    """The job for a run of `planned_bytes` segment bytes; None beyond `SMALL_JOB_MAX_BYTES` (EMR's
    defaults)."""
    if planned_bytes > SMALL_JOB_MAX_BYTES:
        return None
    if planned_bytes <= TINY_JOB_MAX_BYTES:
        return JobSize(driver_vcpu=1, driver_memory_gb=1, executor_vcpu=1, executor_memory_gb=2, executors=1)
    executors = max(1, math.ceil(planned_bytes / BYTES_PER_EXECUTOR))
    return JobSize(
        driver_vcpu=1, driver_memory_gb=1, executor_vcpu=2, executor_memory_gb=4, executors=executors
    )


def user_conf_keys(spark_submit_parameters: str) -> set[str]:
    """The Spark conf keys a user's spark-submit parameters set (`--conf k=v` and the sizing flags)."""
    keys = set(re.findall(r"--conf\s+([^=\s]+)=", spark_submit_parameters))
    keys |= {
        key
        for flag, key in _FLAGS.items()
        if re.search(rf"(^|\s){re.escape(flag)}(\s|=)", spark_submit_parameters)
    }
    return keys


def sizing_conf(planned_bytes: int, spark_submit_parameters: str = "") -> dict[str, str]:
    """The sizing `--conf`s of a run's job, less the keys the user's parameters set."""
    size = job_size(planned_bytes)
    if size is None:
        return {}
    taken = user_conf_keys(spark_submit_parameters)
    return {key: value for key, value in size.spark_conf().items() if key not in taken}
