"""What the stack deploys, read from `template.yaml` and the state machine it names: the cost model's inputs.

Nothing here is copied from the template by hand: each function's memory, architecture, tracing, VPC
placement and the AWS actions its role allows; the state machine's type and the states a committed run
enters; the EMR application's architecture; the schedules, the router's batching window, the log
retention, the alarms and dashboards; X-Ray sampling rules. Parameters take their `Default` (what
`sam deploy` gives a stack that sets nothing); `Fn::If` is evaluated on those defaults.

Standard library and PyYAML only (the `cost` command runs where the template is, no SDK).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kafscale_iceberg.config import EmrServerlessRunnerConfig
from kafscale_iceberg.domain.job_sizing import DEFAULT_MAX_VCPU
from kafscale_iceberg.exceptions import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TEMPLATE = REPO_ROOT / "template.yaml"

ETCD_ONLY_ACTIONS = ("logs:", "xray:", "ec2:", "secretsmanager:GetSecretValue", "kms:Decrypt")
"""What a function in the VPC may be allowed without needing a route to AWS APIs beyond etcd's
credentials: its logs and traces (delivered by Lambda itself, outside the function's network), its
network interfaces (Lambda's, at create time), and Secrets Manager/KMS for etcd's secret."""


class _CfnLoader(yaml.SafeLoader):
    """PyYAML loader that reads CloudFormation's short-form tags as their long forms."""


def _construct_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        return {"Fn::GetAtt": value.split(".", 1)}
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _construct_tag)


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function as deployed."""

    name: str
    memory_mb: int
    architecture: str
    tracing: str
    """`Active`, `PassThrough` or `Disabled`."""
    in_vpc: bool
    actions: frozenset[str]
    """Every action the function's role allows (managed and inline policies)."""

    @property
    def memory_gb(self) -> float:
        return self.memory_mb / 1024

    @property
    def calls_aws_apis_from_vpc(self) -> bool:
        """In the VPC with a role allowing an AWS API beyond `ETCD_ONLY_ACTIONS`."""
        return self.in_vpc and any(not a.startswith(ETCD_ONLY_ACTIONS) for a in self.actions)


@dataclass(frozen=True)
class StateMachineSpec:
    type: str
    """`STANDARD` or `EXPRESS`."""
    transitions_per_run: int
    """States a committed run enters (the lease renewal loop's repeats apart)."""
    renew_every_s: float
    renewal_transitions: int
    tracing: bool


@dataclass(frozen=True)
class DeployedStack:
    """The stack's cost-relevant facts (see the module docstring)."""

    functions: Mapping[str, FunctionSpec]
    state_machine: StateMachineSpec
    emr_architecture: str
    emr_max_vcpu: int
    """The EMR application's `MaximumCapacity.Cpu`: the biggest job a run gets (`domain/job_sizing.py`)."""
    reconcile_every_s: float
    maintenance_every_s: float
    router_window_s: float
    log_retention_days: int
    alarm_metrics: tuple[str, ...]
    """Per alarm, the custom metric a Metrics Insights alarm's query reads ("" for an alarm on one
    metric): such an alarm is billed per metric it analyzes."""
    dashboards: int
    xray_fixed_rate: float
    """The share of requests X-Ray records beyond each rule's reservoir (the default rule: 5%)."""
    xray_reservoir_per_s: float
    nat_gateways: int
    interface_endpoints: int

    @property
    def vpc_functions_calling_aws_apis(self) -> list[str]:
        return sorted(f.name for f in self.functions.values() if f.calls_aws_apis_from_vpc)

    def function(self, name: str) -> FunctionSpec:
        try:
            return self.functions[name]
        except KeyError:
            raise ConfigError(
                "template.yaml",
                f"no function {name!r} (it has {sorted(self.functions)}): "
                "the cost model prices the functions the stack deploys; update kafscale_iceberg/cost",
            ) from None


class _Template:
    """template.yaml decoded, its parameters' defaults and conditions evaluated."""

    def __init__(self, path: Path) -> None:
        try:
            self.document: dict[str, Any] = yaml.load(path.read_text(), Loader=_CfnLoader)
        except OSError as exc:
            raise ConfigError(
                "--template",
                f"cannot read the stack template {path}: {exc}; pass --template (the repository's "
                "template.yaml)",
            ) from exc
        self.path = path
        self.resources: dict[str, Any] = {
            k: v for k, v in self.document["Resources"].items() if not k.startswith("Fn::ForEach::")
        }
        self.defaults = {k: v.get("Default") for k, v in self.document.get("Parameters", {}).items()}

    def value(self, node: Any) -> Any:
        """`node` with `Ref` to a parameter and `Fn::If` resolved (other intrinsics left as they are)."""
        if isinstance(node, dict) and len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Ref" and arg in self.defaults:
                return self.defaults[arg]
            if key == "Fn::If":
                return self.value(arg[1] if self.condition(arg[0]) else arg[2])
        return node

    def condition(self, name: str) -> bool:
        return self._truth(self.document.get("Conditions", {})[name])

    def _truth(self, node: Any) -> bool:
        ((key, arg),) = node.items()
        if key == "Condition":
            return self.condition(arg)
        if key == "Fn::Equals":
            left, right = (self._scalar(x) for x in arg)
            return left == right
        if key == "Fn::Not":
            return not self._truth(arg[0])
        if key == "Fn::And":
            return all(self._truth(x) for x in arg)
        if key == "Fn::Or":
            return any(self._truth(x) for x in arg)
        raise ConfigError(str(self.path), f"condition {node} is not one the cost model evaluates")

    def _scalar(self, node: Any) -> str:
        node = self.value(node)
        if isinstance(node, dict) and "Fn::Join" in node:
            separator, parts = node["Fn::Join"]
            return str(separator).join(str(self._scalar(p)) for p in self.value(parts) or [])
        if isinstance(node, list):
            return ",".join(str(x) for x in node)
        return "" if node is None else str(node)

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {
            name: r
            for name, r in self.resources.items()
            if r.get("Type") == kind and ("Condition" not in r or self.condition(r["Condition"]))
        }

    def properties(self, name: str) -> dict[str, Any]:
        props: dict[str, Any] = self.resources[name].get("Properties", {})
        return props


def _rate_seconds(expression: Any) -> float:
    """`rate(5 minutes)` in seconds (a cron schedule: once an hour, as the model's assumption)."""
    match = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", str(expression).strip())
    if not match:
        return 3600.0
    unit = {"minute": 60, "hour": 3600, "day": 86400}[match.group(2).rstrip("s")]
    return float(match.group(1)) * unit


def _policy_actions(template: _Template, document: Mapping[str, Any]) -> set[str]:
    actions: set[str] = set()
    for statement in document.get("Statement", []):
        if statement.get("Effect") != "Allow":
            continue
        action = template.value(statement.get("Action", []))
        actions.update([action] if isinstance(action, str) else action)
    return actions


def _role_actions(template: _Template, role_id: str) -> frozenset[str]:
    role = template.properties(role_id)
    actions: set[str] = set()
    for policy in role.get("Policies", []):
        actions |= _policy_actions(template, policy["PolicyDocument"])
    for written in role.get("ManagedPolicyArns", []):
        arn = template.value(written)
        if isinstance(arn, dict) and arn.get("Ref") in template.resources:
            managed = template.properties(arn["Ref"])
            actions |= _policy_actions(template, managed["PolicyDocument"])
    return frozenset(actions)


def _functions(template: _Template) -> dict[str, FunctionSpec]:
    defaults = template.document.get("Globals", {}).get("Function", {})
    specs = {}
    for name, resource in template.of_type("AWS::Serverless::Function").items():
        props = {**defaults, **resource.get("Properties", {})}
        role = props.get("Role", {}).get("Fn::GetAtt", [""])
        tracing = template.value(props.get("Tracing", "Disabled"))
        specs[name] = FunctionSpec(
            name=name,
            memory_mb=int(template.value(props.get("MemorySize", 128))),
            architecture=str(template.value(props.get("Architectures", ["x86_64"]))[0]),
            tracing=str(tracing) if isinstance(tracing, str) else "Disabled",
            in_vpc=template.value(props.get("VpcConfig")) not in (None, {}),
            actions=_role_actions(template, role[0]) if role[0] in template.resources else frozenset(),
        )
    return specs


def _schedule_seconds(template: _Template, function: str) -> float:
    events = template.properties(function).get("Events", {}) if function in template.resources else {}
    for event in events.values():
        if event.get("Type") in ("Schedule", "ScheduleV2"):
            return _rate_seconds(template.value(event["Properties"].get("Schedule")))
    return 0.0


def _router_window(template: _Template) -> float:
    for event in template.properties("RouterFunction").get("Events", {}).values():
        window = event.get("Properties", {}).get("MaximumBatchingWindowInSeconds")
        if window is not None:
            return float(template.value(window))
    return 0.0


def _count_entered(states: Mapping[str, Any], start: str, *, until_wait: bool) -> int:
    """States entered from `start` on the shortest way to the end (a branch's: to its first Wait,
    where it spends the run's time, when `until_wait`)."""
    best: dict[str, int] = {}

    def walk(name: str, depth: int) -> int:
        if best.get(name, 1 << 30) <= depth:
            return 1 << 30
        best[name] = depth
        state = states[name]
        kind = state["Type"]
        cost = 1
        if kind == "Parallel":
            cost += sum(_count_entered(b["States"], b["StartAt"], until_wait=True) for b in state["Branches"])
        if kind in ("Succeed", "Fail") or state.get("End") or (until_wait and kind == "Wait"):
            return cost if kind != "Fail" or until_wait else 1 << 30
        targets = [state.get("Next")] + [c["Next"] for c in state.get("Choices", [])]
        targets += [state.get("Default")]
        if kind == "Parallel":  # its branches end it by failing: a Catch is the way on
            targets += [c["Next"] for c in state.get("Catch", [])]
        return cost + min((walk(t, depth + 1) for t in targets if t), default=1 << 30)

    return walk(start, 0)


def _state_machine(template: _Template) -> StateMachineSpec:
    ((_name, resource),) = template.of_type("AWS::Serverless::StateMachine").items()
    props = resource["Properties"]
    definition = json.loads((template.path.parent / props["DefinitionUri"]).read_text())
    renew = _renewal_loop(definition)
    return StateMachineSpec(
        type=str(template.value(props.get("Type", "STANDARD"))).upper(),
        transitions_per_run=_count_entered(definition["States"], definition["StartAt"], until_wait=False),
        renew_every_s=renew[0],
        renewal_transitions=renew[1],
        tracing=bool(template.value(props.get("Tracing", {})).get("Enabled", False)),
    )


def _renewal_loop(definition: Mapping[str, Any]) -> tuple[float, int]:
    """(seconds, states entered) of a Wait loop inside a Parallel branch: the lease renewal."""
    for state in definition["States"].values():
        for branch in state.get("Branches", []):
            states = branch["States"]
            for wait_name, wait in states.items():
                if wait["Type"] == "Wait" and "Seconds" in wait:
                    return float(wait["Seconds"]), _loop_length(states, wait_name)
    return 0.0, 0


def _loop_length(states: Mapping[str, Any], start: str) -> int:
    name, length = states[start].get("Next"), 1
    while name and name != start and length < 50:
        state = states[name]
        length += 1
        name = state.get("Next") or state.get("Default")
    return length if name == start else 0


def _alarm_metric(template: _Template, alarm: Mapping[str, Any]) -> str:
    """The metric a Metrics Insights alarm selects (`SELECT MAX(name) FROM ...`), else ""."""
    for query in alarm.get("Properties", {}).get("Metrics", []):
        expression = query.get("Expression")
        if isinstance(expression, dict) and "Fn::Sub" in expression:
            expression = expression["Fn::Sub"]
        if isinstance(expression, str):
            text = re.sub(
                r"\$\{(\w+)\}", lambda m: str(template.defaults.get(m.group(1), m.group(0))), expression
            )
            match = re.search(r"SELECT\s+\w+\((\w+)\)", text)
            if match:
                return match.group(1)
    return ""


def _xray_sampling(template: _Template) -> tuple[float, float]:
    rules = template.of_type("AWS::XRay::SamplingRule")
    if not rules:
        return 0.05, 1.0  # X-Ray's default rule: the first request each second, then 5%
    rule = min(
        (r["Properties"]["SamplingRule"] for r in rules.values()),
        key=lambda r: int(template.value(r.get("Priority", 9999))),
    )
    return float(template.value(rule["FixedRate"])), float(template.value(rule["ReservoirSize"]))


def _emr_max_vcpu(template: _Template, emr: Mapping[str, Any]) -> int:
    """The application's maximum vCPU ("16 vCPU"), as the functions' config reads it."""
    capacity = emr.get("Properties", {}).get("MaximumCapacity", {})
    cpu = template.value(capacity.get("Cpu", str(DEFAULT_MAX_VCPU)))
    return int(EmrServerlessRunnerConfig.model_validate({"max_vcpu": cpu}).max_vcpu)


def read_stack(template_path: Path = DEFAULT_TEMPLATE) -> DeployedStack:
    """The stack `template_path` deploys with its parameters' defaults.

    Raises `ConfigError` naming the file when it cannot be read or holds what the model cannot price.
    """
    template = _Template(template_path)
    emr = next(iter(template.of_type("AWS::EMRServerless::Application").values()), {})
    endpoints = template.of_type("AWS::EC2::VPCEndpoint").values()
    fixed_rate, reservoir = _xray_sampling(template)
    return DeployedStack(
        functions=_functions(template),
        state_machine=_state_machine(template),
        emr_architecture=str(template.value(emr.get("Properties", {}).get("Architecture", "X86_64"))),
        emr_max_vcpu=_emr_max_vcpu(template, emr),
        reconcile_every_s=_schedule_seconds(template, "ReconcilerFunction"),
        maintenance_every_s=_schedule_seconds(template, "MaintenanceFunction"),
        router_window_s=_router_window(template),
        log_retention_days=int(template.defaults.get("LogRetentionDays") or 0),
        alarm_metrics=tuple(
            _alarm_metric(template, a) for a in template.of_type("AWS::CloudWatch::Alarm").values()
        ),
        dashboards=len(template.of_type("AWS::CloudWatch::Dashboard")),
        xray_fixed_rate=fixed_rate,
        xray_reservoir_per_s=reservoir,
        nat_gateways=len(template.of_type("AWS::EC2::NatGateway")),
        interface_endpoints=sum(
            1 for e in endpoints if template.value(e["Properties"].get("VpcEndpointType")) == "Interface"
        ),
    )
