"""What the AWS deployment costs at list prices, on measured inputs: `make bench-cost`.

1. Counts: the requests of a run and of a segment along the whole path (S3 event → router → work
   queue → launcher → plan → run → commit), by service, from an AWS-box execution
   (`tests/test_aws_requests.py`, run by this benchmark; `--box-counts FILE` reuses its output).
2. Throughput: the Lambda runner's task code in-process pinned to one core and to two, beside a
   Spark task (`local[1]`, one core) on the same segments in the same run (`bench/cost_inputs.py`).
3. The model (`bench/cost_model.py`): each run on the runner the launcher's rule picks
   (`runner.lambda.max_bytes`, read from the config model when it has the key), EMR jobs sized as the
   job runner sizes them, list prices, for: an idle topic-month, 1 MB/s in 1 MiB and in 64 KiB
   segments, 100 topics at 10 KB/s, a 10 GB backlog, and the 1 MB/s topic with every run on EMR.

Prints the measured inputs, a table ($/month, $/GB, runs on each runner, modelled p50/p95
PUT→committed, Firehose's $/GB beside), and ends with one JSON line (the keys issue 22 lists).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.cost_inputs import box_counts, throughput
from bench.cost_model import (
    CONTROL_PLANE,
    FIREHOSE_ICEBERG_PER_GB,
    LAMBDA_MAX_BYTES,
    MONTH_S,
    RENEW_EVERY_S,
    Bill,
    Measured,
    backlog,
    backlog_workload,
    idle_month,
    per_segment,
    scenarios,
    steady_month,
)

SERVICES = ["Lambda", "Lambda runner", "Step Functions", "SQS", "S3", "EMR Serverless"]


def measure_throughput(workdir: Path) -> tuple[dict[str, float], float]:
    from bench.spark import make_workload, plan_uri
    from kafscale_iceberg.segments.layout import Codec

    workload = make_workload(workdir, partitions=2, segments=3, codec=Codec.NONE)
    print(f"throughput on {workload.megabytes:.1f} MB of segments ({workload.records:,} records)", flush=True)
    return throughput(Path(plan_uri(workload)), workload.megabytes), workload.megabytes


def print_table(bills: list[Bill]) -> None:
    header = f"{'workload':28} {'runs λ':>9} {'runs EMR':>9} {'GB':>9} " + " ".join(
        f"{s[:14]:>14}" for s in SERVICES
    )
    print(header + f" {'USD':>10} {'USD/GB':>8} {'p50 s':>6} {'p95 s':>6} {'Firehose':>9}")
    for bill in bills:
        cells = " ".join(f"{bill.usd.get(s, 0.0):14.2f}" for s in SERVICES)
        per_gb = f"{bill.usd_per_gb:8.4f}" if bill.usd_per_gb is not None else f"{'-':>8}"
        p50 = f"{bill.p50_s:6.0f}" if bill.p50_s is not None else f"{'-':>6}"
        p95 = f"{bill.p95_s:6.0f}" if bill.p95_s is not None else f"{'-':>6}"
        firehose = f"{bill.gigabytes * FIREHOSE_ICEBERG_PER_GB:9.2f}"
        print(
            f"{bill.workload.name:28} {bill.runs['lambda']:9.0f} {bill.runs['emr']:9.0f} "
            f"{bill.gigabytes:9.1f} {cells} {bill.total:10.2f} {per_gb} {p50} {p95} {firehose}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--box-counts", type=Path, help="the AWS box's counts (JSON); made when missing")
    parser.add_argument(
        "--throughput", type=Path, help="reuse a throughput measurement (JSON of MB/s by configuration)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
        box = box_counts(args.box_counts or Path(tmp) / "box-counts.json")
        counts = box.lines
        if args.throughput is not None:
            speeds = json.loads(args.throughput.read_text())
        else:
            speeds, _ = measure_throughput(Path(tmp) / "throughput")
    measured = Measured(
        counts=counts,
        lambda_mb_s_1_core=speeds["lambda_1_core"],
        lambda_mb_s_2_cores=speeds.get("lambda_2_cores", speeds["lambda_1_core"]),
        spark_task_mb_s=speeds["spark_task"],
        renewal=box.renewal,
    )
    threshold = LAMBDA_MAX_BYTES
    print("measured:")
    for name, line in sorted(counts.items()):
        print(f"  {name:28} {line.per_run:7.2f} per run + {line.per_segment:5.2f} per segment")
    print(f"  a lease renewal (every {RENEW_EVERY_S:.0f} s of a run): {box.renewal or 'none in the box'}")
    print(
        "  the box's functions, seconds per run on this machine (the model's assumptions beside): "
        + ", ".join(
            f"{f} {s:.2f} ({CONTROL_PLANE[f][1]:.1f})"
            for f, s in sorted(box.seconds.items())
            if f in CONTROL_PLANE
        )
    )
    print(f"  throughput (MB/s): {json.dumps(speeds)}")
    print(
        f"  Lambda runner {measured.lambda_mb_s_1_core:.1f} MB/s on 1 core, "
        f"{measured.lambda_mb_s_2_cores:.1f} on 2; Spark task {measured.spark_task_mb_s:.1f} MB/s "
        f"on 1 core; runner.lambda.max_bytes {threshold:,}"
    )
    steady = [steady_month(measured, w) for w in scenarios(threshold)]
    bills = [idle_month(measured), *steady, backlog(measured, backlog_workload(threshold))]
    print_table(bills)
    one_mib, sixty_four, _many, emr_only = steady
    idle = bills[0].total
    # Requests per segment of the run path (no fixed monthly polls): the 1 MiB topic, the 64 KiB one,
    # and what one more segment adds (the box's per-segment slope).
    runs_only = steady_month(measured, scenarios(threshold)[0], fixed=False)
    runs_only_small = steady_month(measured, scenarios(threshold)[1], fixed=False)
    slope = {
        "s3": sum(counts[k].per_segment for k in ("s3_get", "s3_put", "s3_list") if k in counts),
        "sqs": sum(counts[k].per_segment for k in ("sqs_standard", "sqs_fifo") if k in counts),
    }

    def marginal(bill: Bill) -> float:
        return round((bill.total - idle * bill.workload.topics) / bill.gigabytes, 4)

    summary = {
        "usd_per_gb_1mbps_1mib": marginal(one_mib),
        "usd_per_gb_1mbps_1mib_emr_only": marginal(emr_only),
        "usd_per_gb_1mbps_64kib": marginal(sixty_four),
        "usd_per_idle_topic_month": round(idle, 4),
        "usd_per_month_1mbps_1mib": round(one_mib.total, 2),
        "firehose_usd_per_gb": FIREHOSE_ICEBERG_PER_GB,
        "p50_latency_s_1mbps": round(one_mib.p50_s or 0.0, 1),
        "p95_latency_s_1mbps": round(one_mib.p95_s or 0.0, 1),
        "lambda_runner_mb_per_s_per_vcpu": round(measured.lambda_mb_s_1_core, 2),
        "lambda_runner_mb_per_s_2_vcpu": round(measured.lambda_mb_s_2_cores, 2),
        "spark_task_mb_per_s_per_vcpu": round(measured.spark_task_mb_s, 2),
        "lambda_runner_vs_spark_task": round(measured.lambda_mb_s_1_core / measured.spark_task_mb_s, 2),
        "lambda_share_1mbps": round(one_mib.runs["lambda"] / sum(one_mib.runs.values()), 3),
        "runs_per_month_1mbps": round(sum(one_mib.runs.values())),
        "runs_per_month_1mbps_emr_only": round(sum(emr_only.runs.values())),
        "s3_requests_per_segment": round(per_segment(runs_only, "s3_requests"), 2),
        "sqs_requests_per_segment": round(per_segment(runs_only, "sqs_requests"), 2),
        "s3_requests_per_segment_64kib": round(per_segment(runs_only_small, "s3_requests"), 2),
        "sqs_requests_per_segment_64kib": round(per_segment(runs_only_small, "sqs_requests"), 2),
        "s3_requests_per_additional_segment": round(slope["s3"], 2),
        "sqs_requests_per_additional_segment": round(slope["sqs"], 2),
        "runner_lambda_max_bytes": threshold,
        "month_s": MONTH_S,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
