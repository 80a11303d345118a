"""The all-in cost model (kafscale_iceberg/cost/): it reads what is deployed, prices only what is
committed, and the `cost` command validates a fleet file at the edge (issue 33)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from aws_lambda_powertools import Metrics

from kafscale_iceberg.cli import main
from kafscale_iceberg.cost.fleet import load_fleet
from kafscale_iceberg.cost.model import LINE_ITEMS, TopicGroup, Workload
from kafscale_iceberg.cost.prices import PriceList
from kafscale_iceberg.cost.report import IDLE, WORKLOADS, Artefacts, build_model, summary
from kafscale_iceberg.cost.stack import ETCD_ONLY_ACTIONS, read_stack
from kafscale_iceberg.domain.runner_choice import LAMBDA_KILL_CAUSES
from kafscale_iceberg.exceptions import ConfigError
from kafscale_iceberg.metrics import (
    ALL_METRICS,
    EMF_NAMESPACE,
    EMF_SERVICE,
    EmfMetricsSink,
    ErrorStage,
    RecordResult,
    RunOutcomeLabel,
    custom_metrics_per_topic,
    sample,
)
from kafscale_iceberg.metrics.definitions import CLOUDWATCH_DIMENSION_VALUES
from kafscale_iceberg.services.launch import LaunchStatus
from tests.support.cfn_template import TEMPLATE, Deployment, functions
from tests.support.lambdas import emf_records

ROOT = Path(__file__).resolve().parent.parent
COST_DOC = ROOT / "docs" / "cost.md"


def _example_fleet(tmp_path: Path) -> Path:
    """The fleet file docs/cost.md tells a user to copy."""
    (example,) = re.findall(r"```yaml\n(# fleet.yaml.*?)```", COST_DOC.read_text(), flags=re.S)
    path = tmp_path / "fleet.yaml"
    path.write_text(example)
    return path


def test_custom_metrics_per_topic_is_what_the_emf_sink_makes_of_the_definitions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every metric emitted for two topics through the Lambdas' sink: the CloudWatch metrics (name and
    dimension values) that name one of the topics are what each topic adds to the bill."""
    sink = EmfMetricsSink(Metrics(namespace=EMF_NAMESPACE, service=EMF_SERVICE))
    for topic in ("orders", "clicks"):
        for metric in ALL_METRICS:
            labels = {label: ("1" if label == "partition" else f"{label}-x") for label in metric.labels}
            if "topic" in labels:
                labels["topic"] = topic
            sink.emit([sample(metric, 1, **labels)])
    sink.flush()
    identities = set()
    for record in emf_records(capsys.readouterr().out):
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        (dimensions,) = directive["Dimensions"]
        for metric in directive["Metrics"]:
            identities.add((metric["Name"], tuple((d, record[d]) for d in dimensions)))
    per_topic = [i for i in identities if ("topic", "orders") in i[1]]
    assert len(per_topic) == custom_metrics_per_topic() <= 3
    assert {name for name, _ in per_topic} == {m.name for m in ALL_METRICS if m.per_topic}


def test_dimension_value_counts_are_the_fixed_sets_they_stand_for() -> None:
    assert {
        "result": len(RecordResult),
        "stage": len(ErrorStage),
        "outcome": len(RunOutcomeLabel),
        "cause": len(set(LAMBDA_KILL_CAUSES.values())),
        "status": len(LaunchStatus),
    } == CLOUDWATCH_DIMENSION_VALUES


def test_vpc_functions_calling_aws_apis_agree_with_the_template_as_cloudformation_resolves_it() -> None:
    """The model's reading of template.yaml, checked against the tests' own evaluator of it."""
    from tests.test_template import INSTALLATIONS

    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    expected = sorted(
        f.logical_id
        for f in functions()
        if f.in_vpc
        and any(
            not action.startswith(ETCD_ONLY_ACTIONS)
            for statement in deployment.role_statements(f.role_id)
            for action in statement.actions
        )
    )
    stack = read_stack(TEMPLATE)
    assert stack.vpc_functions_calling_aws_apis == expected
    assert {f.logical_id for f in functions()} == set(stack.functions)
    for f in functions():
        memory = f.properties.get("MemorySize")
        if isinstance(memory, int):
            assert stack.functions[f.logical_id].memory_mb == memory


def test_a_topic_that_falls_behind_is_priced_on_what_it_commits_and_has_no_latency() -> None:
    model = build_model()
    fast = Workload("too fast", (TopicGroup("too fast", 1, 1000.0),))
    bill = model.month(fast)
    assert not bill.keeps_up
    assert bill.p50_s is None
    assert 0 < bill.gigabytes < 1000.0 * 1e6 * 30 * 86400 / 1e9
    assert model.month(WORKLOADS["1mbps"]).keeps_up


def test_half_the_throughput_costs_more_and_an_idle_stack_runs_nothing() -> None:
    full, half = build_model(), build_model(throughput_factor=0.5)
    workload = WORKLOADS["1mbps"]
    assert half.month(workload).total > full.month(workload).total
    idle = full.month(IDLE)
    assert idle.gigabytes == 0
    assert idle.runs == {"lambda": 0.0, "emr": 0.0}
    assert idle.usd["runs"] == idle.usd["commits"] == 0.0
    assert idle.usd["fixed stack"] > 0


def test_bench_cost_summary_has_every_key_of_the_issue() -> None:
    result, bills = summary()
    keys = {f"allin_usd_per_gb_{k}" for k in (*WORKLOADS, "fleet_half_throughput")}
    keys |= {f"keeps_up_{k}" for k in (*WORKLOADS, "fleet_half_throughput")}
    keys |= {f"p50_latency_s_{k}" for k in (*WORKLOADS, "fleet_half_throughput")}
    keys |= {"allin_usd_idle_month", "custom_metrics_per_topic", "vpc_functions_calling_aws_apis"}
    assert keys <= set(result)
    assert all(set(bill.usd) == set(LINE_ITEMS) for bill in bills.values())


def test_every_price_is_in_docs_cost_md_with_its_source() -> None:
    text = COST_DOC.read_text()
    for name, info in PriceList.model_fields.items():
        assert f"`{name}`" in text, name
        assert isinstance(info.json_schema_extra, dict), name
        assert str(info.json_schema_extra["source"]) in text, name


def test_the_cost_command_prices_the_example_fleet_beside_firehose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", "--fleet", str(_example_fleet(tmp_path)), "--json"]) == 0
    bill = json.loads(capsys.readouterr().out)
    assert set(bill["usd_per_month"]) == set(LINE_ITEMS)
    assert bill["usd_total"] == pytest.approx(sum(bill["usd_per_month"].values()), abs=0.05)
    assert bill["firehose_usd_per_month"] == pytest.approx(bill["gigabytes"] * 0.075, rel=1e-3)
    assert main(["cost", "--fleet", str(_example_fleet(tmp_path))]) == 0
    assert "Firehose" in capsys.readouterr().out


def test_a_fleet_file_error_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "topics:\n  - name: a\n    rate: 1MB\n  - name: b\n    rate: fast\nprices:\n  lambda_gb_s: 1\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_fleet(path)
    assert "topics[1].rate" in str(raised.value)
    assert "prices.lambda_gb_s" in str(raised.value)
    assert main(["cost", "--fleet", str(path)]) == 1
    assert "topics[1].rate" in capsys.readouterr().err


def test_region_prices_from_the_fleet_file_change_the_bill(tmp_path: Path) -> None:
    example = _example_fleet(tmp_path)
    fleet = load_fleet(example)
    dearer = fleet.model_copy(update={"prices": fleet.prices.model_copy(update={"lambda_request": 1e-5})})
    model, dear_model = build_model(prices=fleet.prices), build_model(prices=dearer.prices)
    assert dear_model.month(fleet.workload()).total > model.month(fleet.workload()).total


def test_the_bill_follows_what_the_template_deploys(tmp_path: Path) -> None:
    """Switch the state machine's type (Standard <-> Express) in a copy of the template and the runs'
    line moves with it: no number of the stack is copied into the model."""
    (tmp_path / "infra").mkdir()
    asl = ROOT / "infra" / "state_machine.asl.json"
    (tmp_path / "infra" / asl.name).write_text(asl.read_text())
    text = TEMPLATE.read_text()
    deployed = read_stack(TEMPLATE).state_machine.type
    other = "EXPRESS" if deployed == "STANDARD" else "STANDARD"
    switched = re.sub(rf"(\n      Type: ){deployed}\n", rf"\g<1>{other}\n", text, count=1)
    assert switched != text
    path = tmp_path / "template.yaml"
    path.write_text(switched)
    assert read_stack(path).state_machine.type == other
    workload = WORKLOADS["1mbps"]
    before = build_model().month(workload)
    after = build_model(Artefacts(template=path)).month(workload)
    assert after.usd["runs"] != pytest.approx(before.usd["runs"], rel=1e-3)
    assert after.usd["commits"] == pytest.approx(before.usd["commits"])
    # and the box's counts, made on the repository's template, are no longer this one's
    assert build_model(Artefacts(template=path)).counts.current(path.parent) is False


def test_every_function_emits_under_the_one_service_dimension() -> None:
    """A `service` per function would make a metric two functions emit two billed metrics."""
    import ast

    services = {}
    for path in (ROOT / "functions").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Metrics":
                service = next(k.value for k in node.keywords if k.arg == "service")
                services[path.name] = ast.unparse(service)
    assert services, "no Metrics(...) found in functions/"
    assert set(services.values()) == {"EMF_SERVICE"}, services


def test_a_100_mbps_topic_keeps_up_in_runs_sized_to_the_application_and_falls_behind_on_a_small_one(
    tmp_path: Path,
) -> None:
    """Runs grow with the backlog up to what the EMR application's `EmrMaximumCpu` holds
    (domain/run_sizing.py): at the template's 16 vCPU a 100 MB/s topic keeps up; on a 4-vCPU
    application (a driver and one executor) the same topic falls behind and is priced on what it
    commits only."""
    model = build_model()
    runs = model.topic_runs(WORKLOADS["100mbps"].groups[0])
    assert runs.keeps_up
    assert 1024**3 < runs.planned_bytes <= model.run_cap()
    assert model.month(WORKLOADS["100mbps"]).keeps_up
    (tmp_path / "infra").mkdir()
    asl = ROOT / "infra" / "state_machine.asl.json"
    (tmp_path / "infra" / asl.name).write_text(asl.read_text())
    text = TEMPLATE.read_text()
    small = re.sub(r"(\n  EmrMaximumCpu:\n    Type: String\n    Default: )16 vCPU\n", r"\g<1>4 vCPU\n", text)
    assert small != text
    path = tmp_path / "template.yaml"
    path.write_text(small)
    assert read_stack(path).emr_max_vcpu == 4
    behind = build_model(Artefacts(template=path)).month(WORKLOADS["100mbps"])
    assert not behind.keeps_up
    assert behind.p50_s is None


def test_compaction_is_priced_where_it_runs_and_not_at_all_when_nothing_is_worth_merging() -> None:
    """Files of at least `maintenance.small_file_bytes` are never compacted (the 1 MB/s topic's
    runs write 64 MiB files: its compaction line is the maintenance passes alone); small tables'
    compactions run inside the maintenance function (no EMR job), big ones as EMR jobs."""
    from dataclasses import replace

    model = build_model()
    passes_only = model.month(Workload("idle", (TopicGroup("idle", 1, 0.0),))).usd["compaction"]
    assert model.month(WORKLOADS["1mbps"]).usd["compaction"] == pytest.approx(passes_only)
    small = WORKLOADS["small_topics"]
    inline = model.month(small).usd["compaction"]
    model.policy = replace(model.policy, compaction_inline_max_bytes=0)  # every compaction on EMR
    on_emr = model.month(small).usd["compaction"]
    assert passes_only * small.topics < inline < on_emr / 5
