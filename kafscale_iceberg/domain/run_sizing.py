"""How much one run of a topic takes: a run grows with the topic's backlog, up to what its runner holds.

A run takes the pending bytes up to `runs.max_bytes_per_run` (8 GiB by default). On EMR Serverless a
run is also capped at what the biggest job the application holds converts in about the time of a
1 GiB run (`job_sizing.largest_run_bytes`: 7 GiB on template.yaml's 16 vCPU `EmrMaximumCpu`), and its
job is sized from its bytes (`job_sizing.job_size`): a topic behind by gigabytes catches up in runs
as long as a run of 1 GiB, its partitions converted in parallel by the job's executors. On the local
runners (`kafscale-iceberg run`) the configured max alone caps a run; its tasks (one per partition
range) run on every core.

Runs stay serialized per topic (the lease): a bigger run is how a topic keeps up, not more runs.
"""

from __future__ import annotations

from kafscale_iceberg.domain.job_sizing import DEFAULT_MAX_VCPU, largest_run_bytes

EMR_RUNNER = "emr_serverless"


def run_bytes_cap(max_bytes_per_run: int, runner_type: str, max_vcpu: int = DEFAULT_MAX_VCPU) -> int:
    """The most one run is planned with: `runs.max_bytes_per_run`, and on EMR Serverless no more
    than the largest job within the application's `max_vcpu` carries (see the module docstring)."""
    if runner_type == EMR_RUNNER:
        return min(max_bytes_per_run, largest_run_bytes(max_vcpu))
    return max_bytes_per_run
