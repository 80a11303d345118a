"""The cost model's reports: issue 33's workloads and their one-line summary (`make bench-cost`), and a
bill as text (`kafscale-iceberg cost`). Both price through `CostModel`, the same code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafscale_iceberg.cost.measured import BOX_COUNTS, THROUGHPUT, read_box_counts, read_throughput
from kafscale_iceberg.cost.model import LINE_ITEMS, MIB, Bill, CostModel, TopicGroup, Workload
from kafscale_iceberg.cost.prices import US_EAST_1, PriceList
from kafscale_iceberg.cost.stack import DEFAULT_TEMPLATE, read_stack
from kafscale_iceberg.metrics.definitions import custom_metrics_per_topic

KIB = 1024
SMALL_SEGMENT = 64 * KIB
"""Segments of a topic of a few KB/s (a broker flushes well before 1 MiB)."""


def _one(name: str, mb_per_s: float, segment_bytes: int = MIB) -> Workload:
    return Workload(name, (TopicGroup(name, 1, mb_per_s, segment_bytes),))


FLEET = Workload(
    "fleet",
    (
        TopicGroup("20 MB/s", 1, 20.0),
        TopicGroup("1 MB/s", 10, 1.0),
        TopicGroup("50 KB/s", 50, 0.05, SMALL_SEGMENT),
        TopicGroup("2 KB/s", 139, 0.002, SMALL_SEGMENT),
    ),
)
WORKLOADS = {
    "1mbps": _one("one topic, 1 MB/s, 1 MiB segments", 1.0),
    "10mbps": _one("one topic, 10 MB/s", 10.0),
    "100mbps": _one("one topic, 100 MB/s", 100.0),
    "fleet": FLEET,
    "small_topics": Workload("small topics", (TopicGroup("10 KB/s", 100, 0.01, SMALL_SEGMENT),)),
}
IDLE = Workload("idle: the stack deployed, one topic, no traffic", (TopicGroup("idle", 1, 0.0),))


@dataclass(frozen=True)
class Artefacts:
    """Where the model reads what is deployed and measured."""

    template: Path = DEFAULT_TEMPLATE
    box_counts: Path = BOX_COUNTS
    throughput: Path = THROUGHPUT


def build_model(
    artefacts: Artefacts = Artefacts(), prices: PriceList = US_EAST_1, throughput_factor: float = 1.0
) -> CostModel:
    """The model on the artefacts (raises `ConfigError` naming a file it cannot read)."""
    throughput = read_throughput(artefacts.throughput).scaled(throughput_factor)
    return CostModel(
        read_stack(artefacts.template), read_box_counts(artefacts.box_counts), throughput, prices
    )


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def summary(artefacts: Artefacts = Artefacts()) -> tuple[dict[str, Any], dict[str, Bill]]:
    """Issue 33's keys (one JSON object) and the bills they come from."""
    model, half = build_model(artefacts), build_model(artefacts, throughput_factor=0.5)
    bills = {key: model.month(workload) for key, workload in WORKLOADS.items()}
    bills["fleet_half_throughput"] = half.month(FLEET)
    bills["idle"] = model.month(IDLE)
    result: dict[str, Any] = {
        f"allin_usd_per_gb_{key}": _round(bill.usd_per_gb) for key, bill in bills.items() if key != "idle"
    }
    result["allin_usd_idle_month"] = round(bills["idle"].total, 2)
    result["custom_metrics_per_topic"] = custom_metrics_per_topic()
    result["vpc_functions_calling_aws_apis"] = len(model.stack.vpc_functions_calling_aws_apis)
    for key, bill in bills.items():
        if key != "idle":
            result[f"keeps_up_{key}"] = bill.keeps_up
            result[f"p50_latency_s_{key}"] = _round(bill.p50_s, 1)
    result["firehose_usd_per_gb"] = model.prices.firehose_iceberg_gb
    result["box_counts_on_this_template"] = model.counts.current(artefacts.template.parent)
    result["throughput_measured_at"] = model.throughput.measured_at
    return result, bills


def render_bill(bill: Bill) -> str:
    """A bill as text: USD per month by line item, total, per GB, latency, Firehose beside it."""
    lines = [
        f"{bill.workload.name}: {bill.workload.topics} topic(s), {bill.gigabytes:,.1f} GB committed a month"
    ]
    lines += [f"  {item:12} {bill.usd[item]:12,.2f} USD" for item in LINE_ITEMS]
    lines.append(f"  {'total':12} {bill.total:12,.2f} USD a month")
    per_gb = f"{bill.usd_per_gb:.4f} USD/GB" if bill.usd_per_gb is not None else "no data committed"
    firehose = f"{bill.firehose_usd:,.2f} USD a month" if bill.gigabytes else "-"
    lines.append(f"  {per_gb}; Amazon Data Firehose (Iceberg): {firehose}")
    if not bill.keeps_up:
        lines.append(
            "  FALLS BEHIND: a topic receives more than its runs commit (priced on what is committed)"
        )
    elif bill.p50_s is not None:
        lines.append(f"  PUT->committed p50 {bill.p50_s:.0f} s")
    lines.append(
        f"  runs a month: {bill.runs['lambda']:,.0f} on the Lambda runner, "
        f"{bill.runs['emr']:,.0f} on EMR Serverless"
    )
    return "\n".join(lines)
