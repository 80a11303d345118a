"""How big an EMR Serverless job a run gets: Spark's driver and executor sizes from the planned bytes.

EMR Serverless bills each worker per second with a one-minute minimum, and its defaults (a driver and
three initial executors of 4 vCPU / 16 GB, dynamic allocation) cost the same for a run of 30 MB as
for one of 3 GB. A run of a live topic is a minute or so of data, tens of MB, which one small
executor processes in seconds. So:

- up to `TINY_JOB_MAX_BYTES` (the runs of a live topic): a 1 vCPU driver with 1 GB of heap (it only
  reads the plan and folds the task reports; EMR's smallest worker, 2 GB) and one 1 vCPU executor
  with 2 GB of heap (a 3 GB worker): 2 vCPU billed instead of 16;
- beyond: the same driver and one 2 vCPU / 4 GB executor per `BYTES_PER_EXECUTOR` planned, as many
  as the application's `max_vcpu` holds (`runner.emr_serverless.max_vcpu`, template.yaml's
  `EmrMaximumCpu`: 16 vCPU, a driver and 7 executors): a run of a backlog grows its job with its bytes,
  so it takes about as long as a run of 1 GiB (`largest_run_bytes` is what the biggest job carries in
  that time, and what a run on EMR is capped at: `domain/run_sizing.py`);
- dynamic allocation off, so the count is what is billed.

A user's `runner.emr_serverless.spark_submit_parameters` win: a key they set (as `--conf key=value`
or as spark-submit's own flag) is never set here (`sizing_conf`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

GIB = 1024**3
TINY_JOB_MAX_BYTES = 256 * 1024**2
BYTES_PER_EXECUTOR = GIB
"""A 2-vCPU executor's share of a job: about twenty seconds of work at the data plane's measured
per-core speed (docs/cost.md "throughput of record"), so a run is not bound by one worker."""
DRIVER_VCPU = 1
EXECUTOR_VCPU = 2
DEFAULT_MAX_VCPU = 16
"""template.yaml's `EmrMaximumCpu` default: the application's capacity, which one job may fill."""

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


def max_executors(max_vcpu: int = DEFAULT_MAX_VCPU) -> int:
    """The 2-vCPU executors a job of at most `max_vcpu` (driver included) holds; at least one."""
    return max(1, (max_vcpu - DRIVER_VCPU) // EXECUTOR_VCPU)


def largest_run_bytes(max_vcpu: int = DEFAULT_MAX_VCPU) -> int:
    """The bytes the biggest job within `max_vcpu` converts in about the time one executor takes
    for `BYTES_PER_EXECUTOR`: the most an EMR run is planned with."""
    return max_executors(max_vcpu) * BYTES_PER_EXECUTOR


def job_size(planned_bytes: int, max_vcpu: int = DEFAULT_MAX_VCPU) -> JobSize:
    """The job for a run (or compaction) of `planned_bytes` segment bytes, within `max_vcpu`."""
    if planned_bytes <= TINY_JOB_MAX_BYTES:
        return JobSize(
            driver_vcpu=DRIVER_VCPU, driver_memory_gb=1, executor_vcpu=1, executor_memory_gb=2, executors=1
        )
    executors = min(max_executors(max_vcpu), max(1, math.ceil(planned_bytes / BYTES_PER_EXECUTOR)))
    return JobSize(
        driver_vcpu=DRIVER_VCPU,
        driver_memory_gb=1,
        executor_vcpu=EXECUTOR_VCPU,
        executor_memory_gb=4,
        executors=executors,
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


def sizing_conf(
    planned_bytes: int, spark_submit_parameters: str = "", max_vcpu: int = DEFAULT_MAX_VCPU
) -> dict[str, str]:
    """The sizing `--conf`s of a run's job, less the keys the user's parameters set."""
    size = job_size(planned_bytes, max_vcpu)
    taken = user_conf_keys(spark_submit_parameters)
    return {key: value for key, value in size.spark_conf().items() if key not in taken}
