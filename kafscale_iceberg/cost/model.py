"""The all-in monthly bill of a fleet of topics on the deployed stack, per line item, at list prices.

Inputs, none typed in by hand: the stack as `template.yaml` deploys it (`stack.read_stack`: each
function's memory, architecture, tracing and VPC placement, the state machine's type and the states a
run enters, the schedules, alarms, sampling rules), the metrics definitions (`custom_metrics_per_topic`),
the AWS box's request counts and the committed throughput measurement (`measured.py`), the product's
run policy from the config model's defaults, and a `PriceList`. What cannot be measured here is a
named assumption below, with its reason.

Each topic runs as the launcher starts runs: when `runs.min_bytes_per_run` are pending or the oldest
pending segment waited `runs.max_wait_seconds`, seen at the next router batch, never before the
previous run committed; a run goes to the Lambda runner up to `runner.lambda.max_bytes`, else to an EMR
job sized by `domain/job_sizing.py` within the application's `MaximumCapacity.Cpu`. A run grows with
what is pending up to `domain/run_sizing.py`'s cap (`runs.max_bytes_per_run`, and what the biggest
job within the application's vCPU carries). A topic *keeps up* when one run carries what arrives
during a cycle within that cap; a topic that does not is priced on what it commits only, and has no
latency. A record's PUT→committed latency is uniform over [run, run + cycle].

Line items (`LINE_ITEMS`): the fixed stack (idle event-source polls, the reconciler's passes), runs
(runner compute, the run's control-plane functions and state machine), commits (the commit step),
compaction (maintenance passes and their jobs), metrics (custom metrics, alarms, dashboards), tracing
(X-Ray traces), logs, network (what VPC functions calling AWS APIs need: NAT gateways or interface
endpoints), requests (S3 and SQS). etcd is KafScale's own, shared: $0 here (docs/deploy.md prices a
dedicated one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafscale_iceberg.config.sections import MaintenanceConfig, RunnerConfig, RunsConfig
from kafscale_iceberg.cost.measured import BoxCounts, Throughput
from kafscale_iceberg.cost.prices import US_EAST_1, PriceList
from kafscale_iceberg.cost.stack import DeployedStack, FunctionSpec
from kafscale_iceberg.domain.job_sizing import job_size
from kafscale_iceberg.domain.run_sizing import EMR_RUNNER, run_bytes_cap
from kafscale_iceberg.metrics.definitions import (
    ALL_METRICS,
    custom_metrics_aggregated,
    custom_metrics_per_topic,
)

MONTH_S = 30 * 24 * 3600
GB = 1e9
MIB = 1024**2
LINE_ITEMS = (
    "fixed stack",
    "runs",
    "commits",
    "compaction",
    "metrics",
    "tracing",
    "logs",
    "network",
    "requests",
)

# -- assumptions (not measurable here), each with its reason ---------------------------------------------
EMR_JOB_START_S = 45.0  # application started (auto-start, 15 min idle stop); driver and executor come up
LAMBDA_RUNNER_START_S = 2.0  # container image, warm numba cache: init and plan read (cold starts rare)
LAMBDA_MB_PER_VCPU = 1769  # Lambda gives one vCPU per 1,769 MB
# Seconds per invocation of each function (the box's invocations took about these on its machine).
FUNCTION_SECONDS: Mapping[str, float] = {
    "RouterFunction": 0.5,
    "LauncherFunction": 1.0,
    "StartJobFunction": 0.5,
    "WatchFunction": 0.3,
    "CommitFunction": 5.0,
    "AbortFunction": 0.5,
    "ReconcilerFunction": 2.0,
    "MaintenanceFunction": 3.0,  # a pass over one table with nothing to compact (expiry, orphans)
    "CheckpointFunction": 0.1,  # one etcd request from a warm function beside it
}
DEFAULT_FUNCTION_S = 1.0  # a function the list above does not name
SQS_POLLERS_PER_SOURCE = 5  # Lambda's pollers of an idle SQS event source, each long-polling 20 s
SQS_EVENT_SOURCES = 2  # the segment events queue (router) and the work queue (launcher)
LOG_BYTES_PER_INVOCATION = 1_200  # START/END/REPORT lines and a few structured INFO lines
EMF_BYTES_PER_RUN = 3_000  # the commit's metric records (EMF: one record per dimension group)
VPC_AZS = 2  # subnets in two AZs, as docs/deploy.md deploys
NAT_BYTES_PER_REQUEST = (
    16_000  # what an AWS API call of a VPC function moves on average (documents, metadata)
)
INLINE_REWRITE_FACTOR = (
    1.0  # a Parquet rewrite in pyarrow: priced as the runner's conversion of as many bytes
)
FILES_PER_RUN_PER_PARTITION = 1  # a run writes one file per Kafka partition (one partition value)
# Further router batches of one run (functions/launcher.py): while the previous run holds the lease, the
# router's send and the launcher's receive and delete; while the topic waits, the router's send only.
BUSY_BATCH_FIFO = 3
WAITING_BATCH_FIFO = 1


@dataclass(frozen=True)
class TopicGroup:
    """`count` topics alike: each at `mb_per_s`, in segments of `segment_bytes`."""

    name: str
    count: int
    mb_per_s: float
    segment_bytes: int = MIB
    partitions: int = 2
    max_wait_s: float | None = None
    """`runs.max_wait_seconds` for these topics (None: the product's default)."""
    min_bytes: int | None = None
    """`runs.min_bytes_per_run` for these topics (None: the product's default)."""


@dataclass(frozen=True)
class Workload:
    name: str
    groups: tuple[TopicGroup, ...]

    @property
    def topics(self) -> int:
        return sum(g.count for g in self.groups)


@dataclass(frozen=True)
class TopicRuns:
    """How one topic of a group runs in the steady state."""

    cycle_s: float
    planned_bytes: float
    duration_s: float
    on_lambda: bool
    keeps_up: bool

    @property
    def runs_per_month(self) -> float:
        return MONTH_S / self.cycle_s if self.cycle_s else 0.0

    @property
    def p50_s(self) -> float | None:
        return self.duration_s + self.cycle_s / 2 if self.keeps_up else None


@dataclass
class Bill:
    """A workload's month: USD per line item, GB committed, runs, latency, whether every topic keeps up."""

    workload: Workload
    usd: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LINE_ITEMS, 0.0))
    gigabytes: float = 0.0
    runs: dict[str, float] = field(default_factory=lambda: {"lambda": 0.0, "emr": 0.0})
    p50_s: float | None = None
    keeps_up: bool = True
    firehose_usd: float = 0.0

    def add(self, item: str, usd: float) -> None:
        self.usd[item] += usd

    @property
    def total(self) -> float:
        return sum(self.usd.values())

    @property
    def usd_per_gb(self) -> float | None:
        return self.total / self.gigabytes if self.gigabytes else None


@dataclass(frozen=True)
class RunPolicy:
    """The product's run and maintenance defaults, read from the config model."""

    max_wait_s: float
    min_bytes: int
    max_bytes_per_run: int
    lambda_max_bytes: int
    compaction_min_small_files: int
    trigger_small_files: int
    compaction_wait_s: float
    compaction_inline_max_bytes: int
    small_file_bytes: int

    @classmethod
    def defaults(cls) -> RunPolicy:
        runs, maintenance = RunsConfig(), MaintenanceConfig()
        return cls(
            max_wait_s=float(runs.max_wait_seconds),
            min_bytes=int(runs.min_bytes_per_run),
            max_bytes_per_run=int(runs.max_bytes_per_run),
            lambda_max_bytes=int(RunnerConfig().lambda_.max_bytes),
            compaction_min_small_files=maintenance.compaction_min_small_files,
            trigger_small_files=maintenance.trigger_small_files,
            compaction_wait_s=float(maintenance.compaction_wait_seconds),
            compaction_inline_max_bytes=int(maintenance.compaction_inline_max_bytes),
            small_file_bytes=int(maintenance.small_file_bytes),
        )


class CostModel:
    """Prices workloads on one deployed stack, its measurements and a price list."""

    def __init__(
        self,
        stack: DeployedStack,
        counts: BoxCounts,
        throughput: Throughput,
        prices: PriceList = US_EAST_1,
        policy: RunPolicy | None = None,
    ) -> None:
        self.stack = stack
        self.counts = counts
        self.throughput = throughput
        self.prices = prices
        self.policy = policy or RunPolicy.defaults()

    # -- building blocks -----------------------------------------------------------------------------
    def lambda_usd(self, function: FunctionSpec, invocations: float, seconds: float) -> float:
        """`invocations` of `function` of `seconds` each, at its memory and architecture."""
        per_gb_s = (
            self.prices.lambda_gb_s_arm if function.architecture == "arm64" else self.prices.lambda_gb_s_x86
        )
        return invocations * (self.prices.lambda_request + function.memory_gb * seconds * per_gb_s)

    def function_usd(self, name: str, invocations: float) -> float:
        return self.lambda_usd(
            self.stack.function(name), invocations, FUNCTION_SECONDS.get(name, DEFAULT_FUNCTION_S)
        )

    def runner_vcpu(self) -> float:
        return self.stack.function("PlanRunnerFunction").memory_mb / LAMBDA_MB_PER_VCPU

    def runner_seconds(self, planned_bytes: float) -> tuple[float, bool]:
        """(seconds, on the Lambda runner) of a run's runner for `planned_bytes`."""
        mb = planned_bytes / 1e6
        if 0 < planned_bytes <= self.policy.lambda_max_bytes:
            return LAMBDA_RUNNER_START_S + mb / self.throughput.lambda_runner(self.runner_vcpu()), True
        return EMR_JOB_START_S + mb / (
            self.throughput.spark_task_1_vcpu * _emr_cores(planned_bytes, self.stack.emr_max_vcpu)
        ), False

    def run_cap(self) -> int:
        """The most one run carries on the deployed stack (`domain/run_sizing.py`)."""
        return run_bytes_cap(self.policy.max_bytes_per_run, EMR_RUNNER, self.stack.emr_max_vcpu)

    def run_seconds(self, planned_bytes: float) -> float:
        """Launch to committed."""
        runner_s, _ = self.runner_seconds(planned_bytes)
        return FUNCTION_SECONDS["LauncherFunction"] + runner_s + FUNCTION_SECONDS["CommitFunction"]

    def topic_runs(self, group: TopicGroup) -> TopicRuns:
        """One topic's steady state (see the module docstring)."""
        rate = group.mb_per_s * 1e6
        if rate <= 0:
            return TopicRuns(0.0, 0.0, 0.0, True, True)
        max_wait = self.policy.max_wait_s if group.max_wait_s is None else group.max_wait_s
        min_bytes = self.policy.min_bytes if group.min_bytes is None else group.min_bytes
        cap = self.run_cap()
        wait = min(max_wait, min(min_bytes, cap) / rate) + self.stack.router_window_s / 2
        cycle = wait
        for _ in range(60):  # a run's time depends on its size, which depends on the cycle
            planned = min(rate * cycle, cap)
            cycle = max(wait, self.run_seconds(planned))
        planned = min(rate * cycle, cap)
        _, lam = self.runner_seconds(planned)
        keeps_up = rate * cycle <= cap * (1 + 1e-9)
        return TopicRuns(cycle, planned, self.run_seconds(planned), lam, keeps_up)

    # -- the bill --------------------------------------------------------------------------------------
    def month(self, workload: Workload) -> Bill:
        """The workload's month, every line item (the stack's fixed cost included)."""
        bill = Bill(workload)
        self._fixed(bill)
        latencies: list[tuple[float, float]] = []
        for group in workload.groups:
            runs = self.topic_runs(group)
            self._group(bill, group, runs)
            if group.mb_per_s > 0:
                bill.keeps_up &= runs.keeps_up
                latencies.append(
                    (runs.p50_s if runs.p50_s is not None else math.inf, group.count * group.mb_per_s)
                )
        bill.p50_s = _weighted_median(latencies) if bill.keeps_up and latencies else None
        bill.firehose_usd = bill.gigabytes * self.prices.firehose_iceberg_gb
        return bill

    def _fixed(self, bill: Bill) -> None:
        prices, stack = self.prices, self.stack
        polls = SQS_EVENT_SOURCES * SQS_POLLERS_PER_SOURCE * MONTH_S / 20
        bill.add(
            "fixed stack", polls / SQS_EVENT_SOURCES * (prices.sqs_standard_request + prices.sqs_fifo_request)
        )
        passes = MONTH_S / stack.reconcile_every_s if stack.reconcile_every_s else 0.0
        bill.add("fixed stack", self.function_usd("ReconcilerFunction", passes))
        bill.add("logs", self._log_usd(passes * LOG_BYTES_PER_INVOCATION))
        bill.add("tracing", self._traced_usd(stack.function("ReconcilerFunction"), passes))
        bill.add(
            "metrics", self._alarms_usd(bill.workload) + stack.dashboards * prices.cloudwatch_dashboard_month
        )
        # CloudWatch bills a metric for the hours it receives data: per-topic ones for topics with traffic
        active = sum(g.count for g in bill.workload.groups if g.mb_per_s > 0)
        emitted = self.counts.emitted_metrics  # what a run emits (the box), else every definition
        definitions = [m for m in ALL_METRICS if emitted is None or m.name in emitted or not m.labels]
        metrics = (
            custom_metrics_aggregated(definitions, idle=not active) + custom_metrics_per_topic() * active
        )
        bill.add("metrics", metrics * prices.cloudwatch_metric_month)
        bill.add("network", self._vpc_hours_usd())

    def _alarms_usd(self, workload: Workload) -> float:
        """Each alarm's metrics: a Metrics Insights alarm over a per-topic metric analyzes one per topic."""
        per_topic = {m.name: m.cloudwatch_metrics_per_topic for m in ALL_METRICS}
        aggregated = {m.name: m.cloudwatch_metrics_aggregated for m in ALL_METRICS}
        analyzed = sum(
            max(1, per_topic.get(name, 0) * workload.topics + aggregated.get(name, 0)) if name else 1
            for name in self.stack.alarm_metrics
        )
        return analyzed * self.prices.cloudwatch_alarm_month

    def _vpc_hours_usd(self) -> float:
        """NAT gateways or interface endpoints: deployed by the template, or needed by its VPC functions."""
        hours = MONTH_S / 3600
        stack, prices = self.stack, self.prices
        if stack.nat_gateways or stack.interface_endpoints:
            return hours * (
                stack.nat_gateways * prices.nat_gateway_hour
                + stack.interface_endpoints * VPC_AZS * prices.interface_endpoint_hour
            )
        if stack.vpc_functions_calling_aws_apis:
            return hours * VPC_AZS * prices.nat_gateway_hour  # the cheapest way out: a NAT gateway per AZ
        return 0.0

    def _group(self, bill: Bill, group: TopicGroup, runs: TopicRuns) -> None:
        count = group.count * runs.runs_per_month
        passes = MONTH_S / self.stack.reconcile_every_s if self.stack.reconcile_every_s else 0.0
        # the reconciler lists each topic's prefix on every pass
        bill.add("requests", group.count * passes * self.prices.s3_put_list_request)
        self._compaction(bill, group, runs)
        if not count:
            return
        bill.runs["lambda" if runs.on_lambda else "emr"] += count
        bill.gigabytes += count * runs.planned_bytes / GB
        segments = max(1.0, runs.planned_bytes / group.segment_bytes)
        batches = (
            min(segments, max(1.0, runs.cycle_s / self.stack.router_window_s))
            if self.stack.router_window_s
            else 1.0
        )
        self._run_compute(bill, runs, count, segments, batches)
        self._run_requests(bill, runs, count, segments, batches)

    def _run_compute(
        self, bill: Bill, runs: TopicRuns, count: float, segments: float, batches: float
    ) -> None:
        stack, counts = self.stack, self.counts
        invocations = {name: line.at(segments) for name, line in counts.invocations().items()}
        invocations["RouterFunction"] = invocations.get("RouterFunction", 0.0) + batches - 1
        busy = (batches - 1) * min(1.0, runs.duration_s / runs.cycle_s)
        invocations["LauncherFunction"] = invocations.get("LauncherFunction", 0.0) + busy
        runner_s, _ = self.runner_seconds(runs.planned_bytes)
        renewals = (
            math.floor(runner_s / stack.state_machine.renew_every_s)
            if stack.state_machine.renew_every_s
            else 0
        )
        invocations["WatchFunction"] = invocations.get("WatchFunction", 0.0) + renewals
        for name, per_run in invocations.items():
            item = "commits" if name == "CommitFunction" else "runs"
            bill.add(item, self.function_usd(name, count * per_run))
            bill.add("tracing", self._traced_usd(stack.function(name), count * per_run))
        bill.add(
            "logs",
            self._log_usd(count * (sum(invocations.values()) * LOG_BYTES_PER_INVOCATION + EMF_BYTES_PER_RUN)),
        )
        bill.add("runs", count * self._runner_usd(runs.planned_bytes, runner_s, runs.on_lambda))
        bill.add("runs", count * self._state_machine_usd(runs.duration_s, renewals))
        bill.add("tracing", self._executions_traced_usd(count))

    def _runner_usd(self, planned_bytes: float, runner_s: float, on_lambda: bool) -> float:
        if on_lambda:
            runner = self.stack.function("PlanRunnerFunction")
            return self.lambda_usd(runner, 1, runner_s)
        vcpu, memory_gb = _emr_shape(planned_bytes, self.stack.emr_max_vcpu)
        return self._emr_usd(vcpu, memory_gb, runner_s)

    def _emr_usd(self, vcpu: float, memory_gb: float, seconds: float) -> float:
        arm = self.stack.emr_architecture.upper() == "ARM64"
        per_vcpu = self.prices.emr_vcpu_hour_arm if arm else self.prices.emr_vcpu_hour_x86
        per_gb = self.prices.emr_gb_hour_arm if arm else self.prices.emr_gb_hour_x86
        return (vcpu * per_vcpu + memory_gb * per_gb) * max(60.0, seconds) / 3600

    def _state_machine_usd(self, duration_s: float, renewals: int) -> float:
        machine = self.stack.state_machine
        if machine.type == "EXPRESS":
            gb_s = 0.064 * max(0.1, math.ceil(duration_s * 10) / 10)  # 64 MB, 100 ms steps
            return self.prices.sfn_express_request + gb_s * self.prices.sfn_express_gb_s
        transitions = machine.transitions_per_run + renewals * machine.renewal_transitions
        return transitions * self.prices.sfn_standard_transition

    def _run_requests(
        self, bill: Bill, runs: TopicRuns, count: float, segments: float, batches: float
    ) -> None:
        prices, counts = self.prices, self.counts
        extra = max(0.0, batches - 1)
        busy = extra * min(1.0, runs.duration_s / runs.cycle_s)
        fifo = (
            counts.count("sqs_fifo", segments) + BUSY_BATCH_FIFO * busy + WAITING_BATCH_FIFO * (extra - busy)
        )
        standard = counts.count("sqs_standard", segments)
        gets = counts.count("s3_get", segments)
        puts_lists = counts.count("s3_put", segments) + counts.count("s3_list", segments)
        bill.add(
            "requests",
            count
            * (
                standard * prices.sqs_standard_request
                + fifo * prices.sqs_fifo_request
                + gets * prices.s3_get_request
                + puts_lists * prices.s3_put_list_request
            ),
        )
        vpc_requests = sum(v.at(segments) for k, v in counts.lines.items() if _vpc_role(self.stack, k))
        if self.stack.vpc_functions_calling_aws_apis and not self.stack.interface_endpoints:
            bill.add("network", count * vpc_requests * NAT_BYTES_PER_REQUEST / GB * prices.nat_gb)

    def _compaction(self, bill: Bill, group: TopicGroup, runs: TopicRuns) -> None:
        """Each table's maintenance passes, and its compactions: up to `compaction_inline_max_bytes`
        inside the maintenance function (its rewrite at the runner's 1-vCPU speed), beyond as EMR jobs
        the function waits on (`services/maintenance.py` `_compact`)."""
        maintenance = self.stack.function("MaintenanceFunction")
        passes = MONTH_S / self.stack.maintenance_every_s if self.stack.maintenance_every_s else 0.0
        bill.add("compaction", group.count * self.function_usd("MaintenanceFunction", passes))
        files = runs.runs_per_month * group.partitions * FILES_PER_RUN_PER_PARTITION
        policy = self.policy
        file_bytes = runs.planned_bytes / (group.partitions * FILES_PER_RUN_PER_PARTITION)
        if not files or file_bytes >= policy.small_file_bytes:
            return  # nothing worth merging: the runs write files of at least `small_file_bytes`
        jobs = max(min(passes, files / policy.compaction_min_small_files), files / policy.trigger_small_files)
        job_bytes = runs.runs_per_month * runs.planned_bytes / jobs
        if job_bytes <= policy.compaction_inline_max_bytes:
            rewrite_s = job_bytes / 1e6 / self.throughput.lambda_runner(1.0) * INLINE_REWRITE_FACTOR
            bill.add("compaction", group.count * jobs * self.lambda_usd(maintenance, 1, rewrite_s))
            return
        # sized like a run of its bytes (adapters/emr_serverless.py: job_sizing.sizing_conf)
        vcpu, memory_gb = _emr_shape(job_bytes, self.stack.emr_max_vcpu)
        job_s = EMR_JOB_START_S + job_bytes / 1e6 / (
            self.throughput.spark_task_1_vcpu * _emr_cores(job_bytes, self.stack.emr_max_vcpu)
        )
        waited = min(job_s, policy.compaction_wait_s)
        per_job = self._emr_usd(vcpu, memory_gb, job_s) + self.lambda_usd(maintenance, 1, waited)
        bill.add("compaction", group.count * jobs * per_job)

    def _traced_usd(self, function: FunctionSpec, invocations: float) -> float:
        """X-Ray traces of an `Active` function's invocations (Lambda samples 1 a second, then 5%)."""
        if function.tracing != "Active":
            return 0.0
        reservoir = MONTH_S  # one a second
        traced = min(invocations, reservoir) + 0.05 * max(0.0, invocations - reservoir)
        return traced * self.prices.xray_trace

    def _executions_traced_usd(self, executions: float) -> float:
        """Traces of the state machine's executions, sampled by the template's sampling rule."""
        stack = self.stack
        if not stack.state_machine.tracing:
            return 0.0
        reservoir = stack.xray_reservoir_per_s * MONTH_S
        traced = min(executions, reservoir) + stack.xray_fixed_rate * max(0.0, executions - reservoir)
        return traced * self.prices.xray_trace

    def _log_usd(self, log_bytes: float) -> float:
        stored_months = self.stack.log_retention_days / 30 if self.stack.log_retention_days else 12.0
        return (
            log_bytes / GB * (self.prices.logs_ingest_gb + stored_months * self.prices.logs_storage_gb_month)
        )


def _vpc_role(stack: DeployedStack, count_name: str) -> bool:
    """An S3 count made by a VPC function's role (`s3_get:LauncherRole`)."""
    if not count_name.startswith("s3_get:"):
        return False
    role = count_name.split(":", 1)[1]
    return any(
        f.in_vpc and role.startswith(f.name.removesuffix("Function")) for f in stack.functions.values()
    )


def _emr_cores(planned_bytes: float, max_vcpu: int) -> int:
    """The task cores of the job of `planned_bytes` (the driver runs no task)."""
    size = job_size(int(min(planned_bytes, 2**62)), max_vcpu)
    return size.executor_vcpu * size.executors


def _emr_shape(planned_bytes: float, max_vcpu: int) -> tuple[float, float]:
    """(vCPU, GB) EMR bills for a job of `planned_bytes`."""
    size = job_size(int(min(planned_bytes, 2**62)), max_vcpu)
    return size.vcpu, size.billed_memory_gb


def _weighted_median(values: list[tuple[float, float]]) -> float:
    """The median of `(value, weight)` pairs (a fleet's p50: each topic weighted by its bytes)."""
    ordered = sorted(values)
    half = sum(w for _, w in ordered) / 2
    seen = 0.0
    for value, weight in ordered:
        seen += weight
        if seen >= half:
            return value
    return ordered[-1][0]
