"""The AWS cost model of `make bench-cost`: list prices, the flow's requests, the runners' compute.

Pure arithmetic over measured inputs (`Measured`: the request and transition counts of a run and of a
segment from an AWS-box execution, the runners' throughput measured on this machine) and named
assumptions (below, each with its reason). Each run goes to the Lambda runner when its planned bytes
are at most `runner.lambda.max_bytes`, else to an EMR Serverless job sized by
`kafscale_iceberg.domain.job_sizing` — the launcher's rule and the job runner's sizing, imported, not
copied.

Prices: us-east-1 on-demand list prices, checked on 2026-11-26 against the AWS pricing pages named
beside each (docs/benchmarks.md "AWS cost"): check them before relying on a number.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from kafscale_iceberg.config.sections import RunnerConfig, RunsConfig
from kafscale_iceberg.domain.job_sizing import job_size

MONTH_S = 30 * 24 * 3600
GB = 1e9
MIB = 1024**2
GIB = 1024**3

# -- list prices, us-east-1 ----------------------------------------------------------------------------
LAMBDA_PER_REQUEST = 0.20 / 1e6  # aws.amazon.com/lambda/pricing (x86 and arm64)
LAMBDA_X86_PER_GB_S = 0.0000166667  # aws.amazon.com/lambda/pricing (x86, first 6 billion GB-s)
LAMBDA_ARM_PER_GB_S = 0.0000133334  # aws.amazon.com/lambda/pricing (arm64, first 7.5 billion GB-s)
SFN_PER_TRANSITION = 0.025 / 1000  # aws.amazon.com/step-functions/pricing (Standard workflows)
SQS_STANDARD_PER_REQUEST = 0.40 / 1e6  # aws.amazon.com/sqs/pricing (per 64 KB chunk)
SQS_FIFO_PER_REQUEST = 0.50 / 1e6  # aws.amazon.com/sqs/pricing
S3_PUT_LIST_PER_REQUEST = 0.005 / 1000  # aws.amazon.com/s3/pricing (S3 Standard PUT, COPY, POST, LIST)
S3_GET_PER_REQUEST = 0.0004 / 1000  # aws.amazon.com/s3/pricing (S3 Standard GET, SELECT, other)
EMR_ARM_PER_VCPU_H = 0.042094  # aws.amazon.com/emr/pricing (EMR Serverless, ARM64)
EMR_ARM_PER_GB_H = 0.004628  # aws.amazon.com/emr/pricing (EMR Serverless, ARM64)
EMR_MINIMUM_S = 60  # EMR Serverless bills each worker per second with a 1-minute minimum
FIREHOSE_ICEBERG_PER_GB = 0.075  # aws.amazon.com/firehose/pricing (Apache Iceberg Tables destination)

# -- assumptions (not measurable here) -----------------------------------------------------------------
EMR_JOB_START_S = 45.0  # application started (auto-start, 15 min idle stop); driver and executor come up
EMR_DEFAULT_WORKERS = (4, 4, 16)  # a big run (> 4 GiB): EMR's defaults, workers x vCPU x GB
LAMBDA_RUNNER_START_S = 2.0  # container image, warm numba cache: init and plan read (cold starts rare)
LAMBDA_RUNNER_MEMORY_GB = 1.769  # 1 vCPU: the cheapest GB-s per MB unless 2 cores run > 2x faster
COMMIT_S = 5.0  # the commit step (container image, pyiceberg): snapshot, offsets, lease release
LAUNCH_S = 1.0  # the launcher: list, plan, claim, StartExecution
ROUTER_WINDOW_S = 10.0  # template.yaml RouterBatchingWindowSeconds
SQS_POLLERS_PER_SOURCE = 5  # Lambda's pollers of an idle SQS event source, each long-polling 20 s
RECONCILE_EVERY_S = 300  # template.yaml ReconcileSchedule rate(5 minutes)
# The product's defaults, read from the config model (what a deployment that sets nothing gets).
MAX_WAIT_S = float(RunsConfig().max_wait_seconds)  # runs.max_wait_seconds
MIN_BYTES = int(RunsConfig().min_bytes_per_run)  # runs.min_bytes_per_run
LAMBDA_MAX_BYTES = int(RunnerConfig().lambda_.max_bytes)  # runner.lambda.max_bytes
# The state machine renews a run's lease every `RenewEvery` seconds while its runner works.
RENEW_EVERY_S = float(
    json.loads((Path(__file__).resolve().parent.parent / "infra" / "state_machine.asl.json").read_text())[
        "States"
    ]["RunJob"]["Branches"][1]["States"]["RenewEvery"]["Seconds"]
)
RENEWAL_TRANSITIONS = 3.0  # Renew, LeaseHeld?, RenewEvery (when the box saw no renewal to count)
# (memory GB, seconds) of the x86 control-plane functions per invocation (template.yaml MemorySize).
CONTROL_PLANE = {
    "RouterFunction": (0.25, 0.5),
    "LauncherFunction": (0.5, LAUNCH_S),
    "StartJobFunction": (0.25, 0.5),
    "WatchFunction": (0.25, 0.3),
    "CommitFunction": (2.0, COMMIT_S),
    "AbortFunction": (0.25, 0.5),
    "ReconcilerFunction": (0.5, 2.0),
}
# Requests of each further router batch of a run (the box routes a run's segments in one batch), by
# when it comes (functions/launcher.py):
# - while the previous run holds the lease: the router's send, the launcher's receive and delete
#   (FIFO), a launch that reads the lease holder (etcd) and acknowledges: no S3 request;
# - while the topic waits for its batch (`max_wait_seconds`): the router's send only; the waiting
#   item is in flight, so its FIFO group delivers nothing until the wait ends, then one receive and
#   delete take the queued items with it (the box's launch). That wait costs one
#   ChangeMessageVisibility.
BUSY_BATCH_FIFO = 3
WAITING_BATCH_FIFO = 1
WAIT_FIFO = 1


@dataclass(frozen=True)
class Line:
    """A count as `per_run + per_segment * segments` (from two box runs)."""

    per_run: float
    per_segment: float

    def at(self, segments: float) -> float:
        return max(0.0, self.per_run + self.per_segment * segments)


@dataclass(frozen=True)
class Measured:
    """What `make bench-cost` measured: the box's counts, the runners' throughput (MB/s)."""

    counts: dict[str, Line]
    lambda_mb_s_1_core: float
    lambda_mb_s_2_cores: float
    spark_task_mb_s: float
    renewal: dict[str, float] = field(default_factory=dict)
    """What one lease renewal costs (`s3_get`, `sfn_transitions`), from the box's renewals."""

    def count(self, name: str, segments: float) -> float:
        line = self.counts.get(name)
        return line.at(segments) if line is not None else 0.0


@dataclass(frozen=True)
class Workload:
    name: str
    topics: int = 1
    mb_per_s: float = 0.0  # per topic
    segment_bytes: int = MIB
    partitions: int = 2
    backlog_gb: float = 0.0
    lambda_max_bytes: int = LAMBDA_MAX_BYTES
    max_wait_s: float = MAX_WAIT_S
    min_bytes: int = MIN_BYTES
    max_bytes_per_run: int = GIB


@dataclass
class Bill:
    """Dollars and counts by service for one workload (a month, or a backlog)."""

    workload: Workload
    gigabytes: float = 0.0
    runs: dict[str, float] = field(default_factory=lambda: {"lambda": 0.0, "emr": 0.0})
    usd: dict[str, float] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)
    p50_s: float | None = None
    p95_s: float | None = None

    def add(self, service: str, usd: float, count_name: str = "", count: float = 0.0) -> None:
        self.usd[service] = self.usd.get(service, 0.0) + usd
        if count_name:
            self.counts[count_name] = self.counts.get(count_name, 0.0) + count

    @property
    def total(self) -> float:
        return sum(self.usd.values())

    @property
    def usd_per_gb(self) -> float | None:
        return self.total / self.gigabytes if self.gigabytes else None


def on_lambda(planned_bytes: float, lambda_max_bytes: int) -> bool:
    """The launcher's rule: up to `runner.lambda.max_bytes` on the Lambda runner (0: never)."""
    return lambda_max_bytes > 0 and planned_bytes <= lambda_max_bytes


def run_seconds(measured: Measured, planned_bytes: float, lambda_max_bytes: int) -> float:
    """A run's time from launch to committed."""
    mb = planned_bytes / 1e6
    if on_lambda(planned_bytes, lambda_max_bytes):
        return LAUNCH_S + LAMBDA_RUNNER_START_S + mb / measured.lambda_mb_s_1_core + COMMIT_S
    return LAUNCH_S + emr_job_seconds(measured, planned_bytes) + COMMIT_S


def emr_job_seconds(measured: Measured, planned_bytes: float) -> float:
    size = job_size(int(planned_bytes))
    cores = (
        EMR_DEFAULT_WORKERS[1] * (EMR_DEFAULT_WORKERS[0] - 1)
        if size is None
        else size.executor_vcpu * size.executors
    )
    return EMR_JOB_START_S + planned_bytes / 1e6 / (measured.spark_task_mb_s * cores)


def _lambda(bill: Bill, function: str, invocations: float) -> None:
    memory, seconds = CONTROL_PLANE[function]
    bill.add(
        "Lambda",
        invocations * (LAMBDA_PER_REQUEST + memory * seconds * LAMBDA_X86_PER_GB_S),
        "lambda_invocations",
        invocations,
    )


def fixed_month(bill: Bill) -> None:
    """The stack with nothing to do: the event sources' long polls, the reconciler's passes."""
    polls = SQS_POLLERS_PER_SOURCE * MONTH_S / 20
    bill.add("SQS", polls * (SQS_STANDARD_PER_REQUEST + SQS_FIFO_PER_REQUEST), "sqs_requests", 2 * polls)
    passes = MONTH_S / RECONCILE_EVERY_S
    _lambda(bill, "ReconcilerFunction", passes)
    topics = bill.workload.topics
    bill.add("S3", passes * topics * S3_PUT_LIST_PER_REQUEST, "s3_requests", passes * topics)


def add_runs(
    bill: Bill,
    measured: Measured,
    count: float,
    planned_bytes: float,
    *,
    batches: float = 1.0,
    busy_share: float = 1.0,
    waited: bool = False,
) -> None:
    """`count` committed runs of `planned_bytes` each, their segments routed in `batches` router
    batches, `busy_share` of the further ones while the previous run held the lease (the rest while
    the topic waited for its batch, `waited`)."""
    workload = bill.workload
    segments = max(1.0, planned_bytes / workload.segment_bytes)
    lam = on_lambda(planned_bytes, workload.lambda_max_bytes)
    bill.runs["lambda" if lam else "emr"] += count
    bill.gigabytes += count * planned_bytes / GB
    extra = max(0.0, batches - 1)
    busy = extra * busy_share
    # The box's executions include the runner `Choice` (either branch makes as many transitions).
    transitions = measured.count("sfn_transitions", segments)
    bill.add(
        "Step Functions", count * transitions * SFN_PER_TRANSITION, "sfn_transitions", count * transitions
    )
    for name, (_memory, _seconds) in CONTROL_PLANE.items():
        if name == "WatchFunction":
            continue  # the renewals: below, from the run's time (the box's count is its machine's)
        invocations = measured.count(f"lambda:{name}", segments)
        if name == "RouterFunction":
            invocations += extra
        if name == "LauncherFunction":
            invocations += busy  # a waiting topic's items wait in the queue, launched together
        if invocations:
            _lambda(bill, name, count * invocations)
    runner_s = (
        LAMBDA_RUNNER_START_S + planned_bytes / 1e6 / measured.lambda_mb_s_1_core
        if lam
        else emr_job_seconds(measured, planned_bytes)
    )
    renewals = math.floor(runner_s / RENEW_EVERY_S)  # the lease renewal branch, beside the runner
    if renewals:
        _lambda(bill, "WatchFunction", count * renewals)
        per = measured.renewal.get("sfn_transitions", RENEWAL_TRANSITIONS)
        bill.add(
            "Step Functions",
            count * renewals * per * SFN_PER_TRANSITION,
            "sfn_transitions",
            count * renewals * per,
        )
    if lam:
        bill.add(
            "Lambda runner",
            count * (LAMBDA_PER_REQUEST + LAMBDA_RUNNER_MEMORY_GB * runner_s * LAMBDA_ARM_PER_GB_S),
            "lambda_invocations",
            count,
        )
    else:
        seconds = max(EMR_MINIMUM_S, runner_s)
        size = job_size(int(planned_bytes))
        if size is None:
            vcpu = EMR_DEFAULT_WORKERS[0] * EMR_DEFAULT_WORKERS[1]
            memory = EMR_DEFAULT_WORKERS[0] * EMR_DEFAULT_WORKERS[2]
        else:
            vcpu, memory = size.vcpu, size.billed_memory_gb
        usd = (vcpu * EMR_ARM_PER_VCPU_H + memory * EMR_ARM_PER_GB_H) * seconds / 3600
        bill.add("EMR Serverless", count * usd, "emr_vcpu_hours", count * vcpu * seconds / 3600)
    standard = measured.count("sqs_standard", segments)
    fifo = (
        measured.count("sqs_fifo", segments)
        + BUSY_BATCH_FIFO * busy
        + WAITING_BATCH_FIFO * (extra - busy)
        + (WAIT_FIFO if waited else 0)
    )
    bill.add(
        "SQS",
        count * (standard * SQS_STANDARD_PER_REQUEST + fifo * SQS_FIFO_PER_REQUEST),
        "sqs_requests",
        count * (standard + fifo),
    )
    gets = measured.count("s3_get", segments) + renewals * measured.renewal.get("s3_get", 0.0)
    puts_lists = measured.count("s3_put", segments) + measured.count("s3_list", segments)
    bill.add(
        "S3",
        count * (gets * S3_GET_PER_REQUEST + puts_lists * S3_PUT_LIST_PER_REQUEST),
        "s3_requests",
        count * (gets + puts_lists),
    )
    bill.counts["segments"] = bill.counts.get("segments", 0.0) + count * segments


def steady_month(measured: Measured, workload: Workload, *, fixed: bool = True) -> Bill:
    """Each topic at `mb_per_s` for a month, runs as the launcher starts them.

    A run starts when `min_bytes` are pending or the oldest pending segment waited `max_wait_s`,
    seen at the next router batch (half a window on average), and not before the previous run
    committed: the cycle is the longer of that wait and a run's time. A record PUT during a cycle
    is committed at the end of the next run: latency uniform over [run, run + cycle].
    """
    bill = Bill(workload)
    if fixed:
        fixed_month(bill)
    rate = workload.mb_per_s * 1e6
    wait = min(workload.max_wait_s, workload.min_bytes / rate) + ROUTER_WINDOW_S / 2
    cycle = wait
    for _ in range(50):  # the run's time depends on its size, which depends on the cycle
        planned = min(rate * cycle, workload.max_bytes_per_run)
        cycle = max(wait, run_seconds(measured, planned, workload.lambda_max_bytes))
    planned = min(rate * cycle, workload.max_bytes_per_run)
    duration = run_seconds(measured, planned, workload.lambda_max_bytes)
    runs = MONTH_S / cycle * workload.topics
    batches = min(max(1.0, planned / workload.segment_bytes), max(1.0, cycle / ROUTER_WINDOW_S))
    add_runs(
        bill,
        measured,
        runs,
        planned,
        batches=batches,
        busy_share=min(1.0, duration / cycle),
        waited=cycle > duration,
    )
    bill.p50_s = duration + cycle / 2
    bill.p95_s = duration + 0.95 * cycle
    return bill


def idle_month(measured: Measured) -> Bill:
    bill = Bill(Workload("idle topic, 1 month"))
    fixed_month(bill)
    return bill


def backlog(measured: Measured, workload: Workload) -> Bill:
    """`backlog_gb` waiting: runs of `max_bytes_per_run` back to back (no stack fixed cost)."""
    bill = Bill(workload)
    per_run = workload.max_bytes_per_run
    full, rest = divmod(workload.backlog_gb * GB, per_run)
    add_runs(bill, measured, full, per_run, batches=1)
    if rest:
        add_runs(bill, measured, 1, rest, batches=1)
    return bill


def scenarios(lambda_max_bytes: int) -> list[Workload]:
    """The issue's workloads, with the runner rule's threshold."""
    base = Workload("", lambda_max_bytes=lambda_max_bytes)
    return [
        replace(base, name="1 MB/s, 1 MiB segments", mb_per_s=1.0, segment_bytes=MIB),
        replace(base, name="1 MB/s, 64 KiB segments", mb_per_s=1.0, segment_bytes=64 * 1024),
        replace(base, name="100 topics at 10 KB/s", topics=100, mb_per_s=0.01, segment_bytes=64 * 1024),
        replace(base, name="1 MB/s, 1 MiB, EMR only", mb_per_s=1.0, segment_bytes=MIB, lambda_max_bytes=0),
    ]


def backlog_workload(lambda_max_bytes: int) -> Workload:
    return Workload("10 GB backlog", backlog_gb=10.0, lambda_max_bytes=lambda_max_bytes, segment_bytes=MIB)


def per_segment(bill: Bill, name: str) -> float:
    segments = bill.counts.get("segments", 0.0)
    return bill.counts.get(name, 0.0) / segments if segments else math.nan
