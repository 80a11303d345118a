"""`kafscale-iceberg cost --fleet FILE [--json]`: what a fleet of topics costs a month on the stack.

Prices the fleet file's topics (kafscale_iceberg/cost/fleet.py; an example in docs/cost.md) with the
cost model (kafscale_iceberg/cost/model.py) on what `template.yaml` deploys and on the committed
measurements: the monthly bill per line item, the PUT→committed p50, whether every topic keeps up, and
Amazon Data Firehose's price for the same bytes beside it. Reads files only: no AWS call.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kafscale_iceberg.cost.stack import DEFAULT_TEMPLATE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`cost`'s arguments."""
    parser.add_argument("--fleet", required=True, type=Path, help="the fleet file (YAML: docs/cost.md)")
    parser.add_argument(
        "--template",
        type=Path,
        default=DEFAULT_TEMPLATE,
        help=f"the stack's template.yaml (default: {DEFAULT_TEMPLATE})",
    )
    parser.add_argument("--json", action="store_true", help="print the bill as one JSON document")
    parser.set_defaults(command=cost_command)


def cost_command(args: argparse.Namespace) -> int:
    """Print the fleet's monthly bill; 0 once printed (`ConfigError` names a bad key or file)."""
    from kafscale_iceberg.cost.fleet import load_fleet  # noqa: PLC0415
    from kafscale_iceberg.cost.report import Artefacts, build_model, render_bill  # noqa: PLC0415

    fleet = load_fleet(args.fleet)
    model = build_model(Artefacts(template=args.template), fleet.prices, fleet.throughput_factor)
    bill = model.month(fleet.workload())
    if args.json:
        document = {
            "workload": fleet.name,
            "topics": bill.workload.topics,
            "usd_per_month": {item: round(usd, 2) for item, usd in bill.usd.items()},
            "usd_total": round(bill.total, 2),
            "gigabytes": round(bill.gigabytes, 1),
            "usd_per_gb": None if bill.usd_per_gb is None else round(bill.usd_per_gb, 4),
            "keeps_up": bill.keeps_up,
            "p50_latency_s": None if bill.p50_s is None else round(bill.p50_s, 1),
            "firehose_usd_per_month": round(bill.firehose_usd, 2),
            "runs": {k: round(v) for k, v in bill.runs.items()},
        }
        print(json.dumps(document, indent=2))
    else:
        print(render_bill(bill))
    return 0
