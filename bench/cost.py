"""What the AWS deployment costs at list prices: `python -m bench.cost` (or `make bench-cost`).

A model, not a measurement of AWS: per run, the calls the deployed flow makes (the same flow
`make test-aws` executes: tests/test_aws_flow.py checks the state-transition count of a real
execution against `transitions_per_run`), times the list prices below, for three workloads:

(a) an idle topic for a month (the stack's fixed costs with one topic and no data);
(b) a topic at 1 MB/s with the default batching (`runs.max_wait_seconds` 60, `min_bytes_per_run` 0:
    a run starts as soon as the previous one committed, so runs follow each other);
(c) a 10 GB backlog (runs of `runs.max_bytes_per_run`, 1 GiB).

Prices: us-east-1, on-demand list prices as published on the AWS pricing pages named beside each;
this machine cannot read those pages, so on 2026-11-23 each was checked against public material
quoting it (docs/benchmarks.md "AWS cost" names what) - check them before relying on a number. The
assumptions (durations, sizes, throughput) are named constants, printed with the table. Ends with
one JSON line: `{"usd_per_gb": ..., "usd_per_idle_topic_month": ..., "sfn_transitions_per_run": ...,
"lambda_invocations_per_run": ...}`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASL = ROOT / "infra" / "state_machine.asl.json"

MONTH_S = 30 * 24 * 3600
GB = 1e9

# -- list prices, us-east-1 ----------------------------------------------------------------------------
LAMBDA_PER_REQUEST = 0.20 / 1e6  # aws.amazon.com/lambda/pricing (x86)
LAMBDA_PER_GB_S = 0.0000166667  # aws.amazon.com/lambda/pricing (x86, first 6 billion GB-s tier)
SFN_PER_TRANSITION = 0.025 / 1000  # aws.amazon.com/step-functions/pricing (Standard workflows)
SQS_STANDARD_PER_REQUEST = 0.40 / 1e6  # aws.amazon.com/sqs/pricing (per 64 KB chunk)
SQS_FIFO_PER_REQUEST = 0.50 / 1e6  # aws.amazon.com/sqs/pricing
S3_PUT_LIST_PER_REQUEST = 0.005 / 1000  # aws.amazon.com/s3/pricing (S3 Standard PUT, COPY, POST, LIST)
S3_GET_PER_REQUEST = 0.0004 / 1000  # aws.amazon.com/s3/pricing (S3 Standard GET, SELECT, other)
EMR_PER_VCPU_H = 0.052624  # aws.amazon.com/emr/pricing (EMR Serverless, x86)
EMR_PER_GB_H = 0.0057785  # aws.amazon.com/emr/pricing (EMR Serverless, x86)
EMR_MINIMUM_S = 60  # EMR Serverless bills each worker per second with a 1-minute minimum

# -- assumptions ---------------------------------------------------------------------------------------
_RUN_JOB = json.loads(ASL.read_text())["States"]["RunJob"]
RENEW_EVERY_S = _RUN_JOB["Branches"][1]["States"]["RenewEvery"]["Seconds"]
EMR_WORKERS = 4  # EMR's Spark defaults: a driver and 3 initial executors
EMR_WORKER_VCPU = 4
EMR_WORKER_GB = 16
EMR_JOB_START_S = 45.0  # application already started; driver and executors come up
EMR_THROUGHPUT_MB_S = 50.0  # segment MB per second for a default 16-vCPU job (assumed, not measured on EMR)
COMMIT_S = 5.0  # the commit step (container image, pyiceberg)
LAUNCH_S = 2.0  # router batching window and the launcher
SEGMENT_MB = 1.0  # a segment's size (KafScale flushes per produce request: 16 KB - 1 MB)
SQS_BATCH = 10
LAMBDA_SQS_POLLERS = 5  # Lambda's minimum pollers per SQS event source, long-polling (20 s)
RECONCILE_EVERY_S = 300  # ReconcileSchedule rate(5 minutes)
# (memory GB, seconds) per invocation
LAMBDA_SHAPE = {
    "router": (0.25, 0.3),
    "launcher": (0.5, 1.0),
    "start_job": (0.25, 0.5),
    "watch": (0.25, 0.3),
    "commit": (2.0, COMMIT_S),
    "reconciler": (0.5, 2.0),
}


def transitions_per_run(renewals: int) -> int:
    """State transitions of a committed run: StartJob, RunJob (the Parallel), Runner? then WaitOnJob
    or RunInLambda, and JobSucceeded (branch 1: neither startJobRun.sync nor the runner's invoke
    makes any while the job runs), RenewEvery, then (Renew, LeaseHeld?, RenewEvery) per lease
    renewal (branch 2), Commit, SignalAfterCommit, Committed. The same on either runner."""
    return 2 + 3 + 1 + 3 * renewals + 3


def renewals(job_s: float) -> int:
    """Lease renewals while the job runs (one every RenewEvery seconds)."""
    return math.floor(job_s / RENEW_EVERY_S)


# Before startJobRun.sync (commit 0c62d76): StartJob, (WaitForJob 15 s, Watch, JobDone?) per look at
# the job until it was seen final, Commit, SignalAfterCommit, Committed. Printed beside the new count.
def transitions_per_run_polling(job_s: float, wait_s: float = 15.0) -> int:
    return 1 + 3 * max(1, math.ceil(job_s / wait_s)) + 3


@dataclass
class Bill:
    """Counts and dollars by service for one workload."""

    name: str
    gigabytes: float = 0.0
    runs: float = 0.0
    usd: dict[str, float] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)

    def add(self, service: str, usd: float, count_name: str = "", count: float = 0.0) -> None:
        self.usd[service] = self.usd.get(service, 0.0) + usd
        if count_name:
            self.counts[count_name] = self.counts.get(count_name, 0.0) + count

    @property
    def total(self) -> float:
        return sum(self.usd.values())


def _lambda(bill: Bill, function: str, invocations: float) -> None:
    memory, seconds = LAMBDA_SHAPE[function]
    bill.add(
        "Lambda",
        invocations * (LAMBDA_PER_REQUEST + memory * seconds * LAMBDA_PER_GB_S),
        "lambda_invocations",
        invocations,
    )


def fixed_month(bill: Bill, topics: int = 1) -> None:
    """What the stack costs with nothing to do: pollers of the two queues, the reconciler."""
    polls = 2 * LAMBDA_SQS_POLLERS * MONTH_S / 20
    bill.add("SQS", polls / 2 * (SQS_STANDARD_PER_REQUEST + SQS_FIFO_PER_REQUEST), "sqs_requests", polls)
    passes = MONTH_S / RECONCILE_EVERY_S
    _lambda(bill, "reconciler", passes)
    bill.add("S3", passes * topics * S3_PUT_LIST_PER_REQUEST, "s3_requests", passes * topics)


def runs(bill: Bill, count: float, megabytes_per_run: float) -> None:
    """`count` committed runs of `megabytes_per_run` each."""
    job_s = EMR_JOB_START_S + megabytes_per_run / EMR_THROUGHPUT_MB_S
    cycles = renewals(job_s)
    segments = max(1.0, megabytes_per_run / SEGMENT_MB)
    bill.runs += count
    bill.gigabytes += count * megabytes_per_run * 1e6 / GB
    transitions = transitions_per_run(cycles)
    bill.add(
        "Step Functions", count * transitions * SFN_PER_TRANSITION, "sfn_transitions", count * transitions
    )
    _lambda(bill, "router", count * math.ceil(segments / SQS_BATCH))
    _lambda(bill, "launcher", count * (math.ceil(segments / SQS_BATCH) + 1))  # + the signal after commit
    _lambda(bill, "start_job", count)
    _lambda(bill, "watch", count * cycles)
    _lambda(bill, "commit", count)
    # SQS: per segment an S3 event (send, receive, delete) and a work item (send, receive, delete),
    # batched by 10 on receive/delete; per run the signal after commit (send, receive, delete).
    standard = segments * (1 + 2 / SQS_BATCH)
    fifo = segments * (1 + 2 / SQS_BATCH) + 3
    bill.add(
        "SQS",
        count * (standard * SQS_STANDARD_PER_REQUEST + fifo * SQS_FIFO_PER_REQUEST),
        "sqs_requests",
        count * (standard + fifo),
    )
    # S3: router HEAD .index + footer GET per segment (the .kfs notification), a footer GET again for
    # the .index notification; the job GETs each .kfs; plan/result/outcome documents; one data file
    # per 128 MB; Iceberg metadata (manifest, list, metadata.json) and reads.
    gets = segments * 4 + 4 + 3
    puts = 2 + math.ceil(megabytes_per_run / 128) + 3 + 1  # + the launcher's LIST of the topic
    bill.add(
        "S3",
        count * (gets * S3_GET_PER_REQUEST + puts * S3_PUT_LIST_PER_REQUEST),
        "s3_requests",
        count * (gets + puts),
    )
    billed_s = max(EMR_MINIMUM_S, job_s)
    vcpu_h = EMR_WORKERS * EMR_WORKER_VCPU * billed_s / 3600
    gb_h = EMR_WORKERS * EMR_WORKER_GB * billed_s / 3600
    bill.add(
        "EMR Serverless",
        count * (vcpu_h * EMR_PER_VCPU_H + gb_h * EMR_PER_GB_H),
        "emr_vcpu_hours",
        count * vcpu_h,
    )


def idle_topic_month() -> Bill:
    bill = Bill("(a) idle topic, 1 month")
    fixed_month(bill)
    return bill


def steady_topic_month(mb_per_s: float = 1.0) -> Bill:
    """Back-to-back runs: each takes what arrived during the previous one."""
    overhead = LAUNCH_S + EMR_JOB_START_S + COMMIT_S
    cycle_s = overhead / (1 - mb_per_s / EMR_THROUGHPUT_MB_S)
    bill = Bill(f"(b) topic at {mb_per_s:g} MB/s, 1 month")
    fixed_month(bill)
    runs(bill, MONTH_S / cycle_s, mb_per_s * cycle_s)
    return bill


def backlog(gigabytes: float = 10.0) -> Bill:
    bill = Bill(f"(c) {gigabytes:g} GB backlog")
    per_run_mb = 1024 * 1.073741824  # runs.max_bytes_per_run: 1 GiB
    total_mb = gigabytes * 1000
    full, rest = divmod(total_mb, per_run_mb)
    runs(bill, full, per_run_mb)
    if rest:
        runs(bill, 1, rest)
    return bill


def main() -> None:
    bills = [idle_topic_month(), steady_topic_month(), backlog()]
    services = ["Lambda", "Step Functions", "SQS", "S3", "EMR Serverless"]
    print(
        "Assumptions:",
        f"EMR job start {EMR_JOB_START_S:g} s, {EMR_THROUGHPUT_MB_S:g} MB/s per default job",
        f"({EMR_WORKERS} workers x {EMR_WORKER_VCPU} vCPU / {EMR_WORKER_GB} GB),",
        f"lease renewed every {RENEW_EVERY_S} s while startJobRun.sync waits on the job,",
        f"commit {COMMIT_S:g} s, segments of {SEGMENT_MB:g} MB",
    )
    header = (
        f"{'workload':32} {'runs':>9} {'GB':>8} "
        + " ".join(f"{s:>15}" for s in services)
        + f" {'total USD':>11}"
    )
    print(header)
    for bill in bills:
        cells = " ".join(f"{bill.usd.get(s, 0.0):15.4f}" for s in services)
        print(f"{bill.name:32} {bill.runs:9.0f} {bill.gigabytes:8.1f} {cells} {bill.total:11.4f}")
    for bill in bills:
        counts = ", ".join(f"{k} {v:,.0f}" for k, v in bill.counts.items())
        print(f"  {bill.name}: {counts}")
    steady = bills[1]
    per_run = Bill("one run")
    runs(per_run, 1, steady.gigabytes * 1000 / steady.runs)
    summary = {
        "usd_per_gb": round((steady.total - bills[0].total) / steady.gigabytes, 4),
        "usd_per_idle_topic_month": round(bills[0].total, 4),
        "sfn_transitions_per_run": round(per_run.counts["sfn_transitions"], 1),
        "lambda_invocations_per_run": round(per_run.counts["lambda_invocations"], 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
