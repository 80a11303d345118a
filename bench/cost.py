"""What the AWS deployment costs all-in, at list prices: `make bench-cost`.

The model is the library's (`kafscale_iceberg/cost/`, the same code as `kafscale-iceberg cost`): it
reads `template.yaml` and the state machine it deploys, the metrics definitions, the AWS box's request
counts (`kafscale_iceberg/cost/measured/box_counts.json`, `make cost-box-counts`) and the committed
throughput measurement (`measured/throughput.json`, `make cost-throughput`). This prints the inputs,
each of issue 33's workloads per line item, and ends with one JSON line of issue 33's keys
(docs/cost.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kafscale_iceberg.cost.model import FUNCTION_SECONDS
from kafscale_iceberg.cost.report import Artefacts, build_model, render_bill, summary


def print_inputs(artefacts: Artefacts) -> None:
    model = build_model(artefacts)
    stack, throughput = model.stack, model.throughput
    print("deployed (template.yaml):")
    for f in stack.functions.values():
        seconds = FUNCTION_SECONDS.get(f.name)
        print(
            f"  {f.name:22} {f.memory_mb:5} MB {f.architecture:7} tracing {f.tracing:11} "
            f"{'VPC' if f.in_vpc else '   '} "
            f"{'calls AWS APIs from the VPC' if f.calls_aws_apis_from_vpc else ''}"
            + (f" (assumed {seconds} s an invocation)" if seconds else "")
        )
    machine = stack.state_machine
    print(
        f"  state machine {machine.type}, {machine.transitions_per_run} transitions a committed run, "
        f"renewal every {machine.renew_every_s:.0f} s ({machine.renewal_transitions} transitions); "
        f"EMR {stack.emr_architecture}; reconcile every {stack.reconcile_every_s:.0f} s, maintenance every "
        f"{stack.maintenance_every_s:.0f} s; {len(stack.alarm_metrics)} alarms, "
        f"{stack.dashboards} dashboard(s); "
        f"X-Ray rule {stack.xray_fixed_rate:.0%} beyond {stack.xray_reservoir_per_s:g}/s"
    )
    stale = " - COUNTED ON ANOTHER TEMPLATE: run make cost-box-counts"
    current = "" if model.counts.current(artefacts.template.parent) else stale
    print(f"measured (box counts: per run + per segment){current}:")
    for name, line in sorted(model.counts.lines.items()):
        print(f"  {name:28} {line.per_run:7.2f} per run + {line.per_segment:5.2f} per segment")
    print(
        f"  throughput {throughput.measured_at} (load {throughput.load_average}): Lambda runner "
        f"{throughput.lambda_runner_1_vcpu} MB/s on 1 vCPU, {throughput.lambda_runner_2_vcpu} on 2; "
        f"Spark task {throughput.spark_task_1_vcpu} MB/s on 1 vCPU"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--box-counts", type=Path, help="another box-count document (JSON)")
    parser.add_argument("--throughput", type=Path, help="another throughput document (JSON)")
    parser.add_argument("--template", type=Path, help="another template.yaml")
    args = parser.parse_args(argv)
    defaults = Artefacts()
    artefacts = Artefacts(
        template=args.template or defaults.template,
        box_counts=args.box_counts or defaults.box_counts,
        throughput=args.throughput or defaults.throughput,
    )
    print_inputs(artefacts)
    result, bills = summary(artefacts)
    for key, bill in bills.items():
        print(f"[{key}] " + render_bill(bill))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
