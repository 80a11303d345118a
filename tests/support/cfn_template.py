"""template.yaml as data: its functions, their environment and IAM, resolved as CloudFormation would.

`Deployment` evaluates the intrinsic functions of the template for one set of parameter values, with
the values CloudFormation would give each resource (queue URLs, ARNs, the EMR application id) made up
in AWS's formats. Tests use it to check what the stack actually wires, not how the YAML is spelled.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

from cfnlint.decode import cfn_yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

REGION = "eu-west-1"
ACCOUNT = "123456789012"
STACK = "kafscale-iceberg"


class _NoValue:
    """`AWS::NoValue`: the property or list element is left out."""


NO_VALUE = _NoValue()


@cache
def load_template() -> dict[str, Any]:
    """template.yaml, decoded as cfn-lint decodes it (short-form tags become `Ref`/`Fn::*` mappings)."""
    template: dict[str, Any] = cfn_yaml.load(str(TEMPLATE))
    return template


@dataclass(frozen=True)
class Function:
    """One `AWS::Serverless::Function`: its handler, packaging, environment and role."""

    logical_id: str
    properties: Mapping[str, Any]
    metadata: Mapping[str, Any]

    @property
    def is_image(self) -> bool:
        return self.properties.get("PackageType") == "Image"

    @property
    def handler(self) -> str:
        """`module.function`, from `Handler` (zip) or the image's `ImageConfig.Command`."""
        if self.is_image:
            command: list[str] = self.properties["ImageConfig"]["Command"]
            return command[0]
        handler: str = self.properties["Handler"]
        return handler

    @property
    def role_id(self) -> str:
        """The logical id of the function's IAM role (`Role: !GetAtt X.Arn`)."""
        role = self.properties["Role"]
        return str(role["Fn::GetAtt"][0] if isinstance(role["Fn::GetAtt"], list) else role["Fn::GetAtt"])

    @property
    def in_vpc(self) -> bool:
        return "VpcConfig" in self.properties


def template_resources() -> dict[str, Any]:
    """The template's resources as written, without its `Fn::ForEach` loops (the resources a loop makes
    depend on the parameters: `Deployment.resources` has them)."""
    return {
        name: resource
        for name, resource in load_template()["Resources"].items()
        if not name.startswith("Fn::ForEach::")
    }


def functions() -> list[Function]:
    """Every function of the template."""
    resources = template_resources()
    return [
        Function(name, resource.get("Properties", {}), resource.get("Metadata", {}))
        for name, resource in resources.items()
        if resource["Type"] == "AWS::Serverless::Function"
    ]


def environment_names() -> set[str]:
    """Every environment variable name the template sets on any function (Globals included)."""
    names = set(load_template()["Globals"]["Function"]["Environment"]["Variables"])
    for function in functions():
        names |= set(function.properties.get("Environment", {}).get("Variables", {}))
    return names


def s3_object_arn(uri: str) -> str:
    """`s3://bucket/key` as the ARN IAM matches against."""
    match = re.fullmatch(r"s3://([^/]+)/(.*)", uri)
    assert match, uri
    return f"arn:aws:s3:::{match.group(1)}/{match.group(2)}"


@dataclass(frozen=True)
class Statement:
    """One IAM statement, resolved: actions and resources as lists."""

    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    condition: Mapping[str, Any]

    def allows(self, action: str, resource: str) -> bool:
        return (
            self.effect == "Allow"
            and any(fnmatchcase(action, pattern) for pattern in self.actions)
            and any(fnmatchcase(resource, pattern) for pattern in self.resources)
        )


class Deployment:
    """The template evaluated for one set of parameter values."""

    def __init__(self, parameters: Mapping[str, Any], *, stack: str = STACK) -> None:
        self.stack = stack
        self.template = load_template()
        self.parameters = {
            name: spec.get("Default") for name, spec in self.template["Parameters"].items()
        } | dict(parameters)
        missing = [name for name, value in self.parameters.items() if value is None]
        assert not missing, f"parameters without a value: {missing}"
        self.resources: dict[str, Any] = self._expand_loops(self.template["Resources"])
        self.conditions: dict[str, bool] = {}

    # -- what tests ask ----------------------------------------------------------------------------

    def condition(self, name: str) -> bool:
        if name not in self.conditions:
            self.conditions[name] = bool(self.evaluate(self.template["Conditions"][name]))
        return self.conditions[name]

    def exists(self, logical_id: str) -> bool:
        condition = self.resources[logical_id].get("Condition")
        return condition is None or self.condition(condition)

    def environment(self, function: Function) -> dict[str, str]:
        """The function's environment as Lambda would see it (Globals merged, NoValue dropped)."""
        variables = dict(self.template["Globals"]["Function"]["Environment"]["Variables"])
        variables |= function.properties.get("Environment", {}).get("Variables", {})
        resolved = {name: self.evaluate(value) for name, value in variables.items()}
        return {name: str(value) for name, value in resolved.items() if value is not NO_VALUE}

    def role_statements(self, role_id: str) -> list[Statement]:
        """Every statement the role grants: inline policies and the template's managed policies."""
        role = self.resources[role_id]["Properties"]
        documents = [policy["PolicyDocument"] for policy in role.get("Policies", [])]
        for arn in self.evaluate(role.get("ManagedPolicyArns", [])):
            policy_id = arn.removeprefix("managed-policy:")
            assert policy_id in self.resources, f"{role_id}: managed policy {arn} is not in the template"
            documents.append(self.resources[policy_id]["Properties"]["PolicyDocument"])
        return [statement for document in documents for statement in self.statements(document)]

    def statements(self, document: Mapping[str, Any]) -> list[Statement]:
        resolved = self.evaluate(document)
        found = []
        for raw in resolved["Statement"]:
            actions = raw.get("Action", [])
            resources = raw.get("Resource", [])
            found.append(
                Statement(
                    effect=raw["Effect"],
                    actions=tuple([actions] if isinstance(actions, str) else actions),
                    resources=tuple([resources] if isinstance(resources, str) else resources),
                    condition=raw.get("Condition", {}),
                )
            )
        return found

    def failed_rules(self) -> dict[str, str]:
        """The template's `Rules` whose assertions fail for these parameters: name -> assertion message.

        CloudFormation refuses to create or update a stack while any rule fails.
        """
        failed: dict[str, str] = {}
        for name, rule in self.template.get("Rules", {}).items():
            if "RuleCondition" in rule and not self.evaluate(rule["RuleCondition"]):
                continue
            for assertion in rule["Assertions"]:
                if not self.evaluate(assertion["Assert"]):
                    failed[name] = str(assertion.get("AssertDescription", ""))
        return failed

    def _expand_loops(self, resources: Mapping[str, Any]) -> dict[str, Any]:
        """`Fn::ForEach::Name: [Identifier, collection, {key: value}]` (AWS::LanguageExtensions) unrolled
        as CloudFormation does: per item of the collection, `${Identifier}` in keys and strings becomes
        the item, `&{Identifier}` the item without its non-alphanumeric characters, `Ref: Identifier`
        the item; loops nest."""
        expanded: dict[str, Any] = {}
        for key, value in resources.items():
            if not key.startswith("Fn::ForEach::"):
                expanded[key] = value
                continue
            identifier, collection, fragment = value
            for item in self.evaluate(collection):
                expanded |= self._expand_loops(_for_each_item(fragment, identifier, str(item)))
        return expanded

    def role_allows(self, role_id: str, action: str, resource: str) -> bool:
        return any(statement.allows(action, resource) for statement in self.role_statements(role_id))

    # -- intrinsic functions -----------------------------------------------------------------------

    def evaluate(self, node: Any) -> Any:
        if isinstance(node, list):
            items = [self.evaluate(item) for item in node]
            return [item for item in items if item is not NO_VALUE]
        if not isinstance(node, Mapping):
            return node
        if len(node) == 1:
            ((key, value),) = node.items()
            handler = _INTRINSICS.get(key)
            if handler is not None:
                return handler(self, value)
        items = {key: self.evaluate(value) for key, value in node.items()}
        return {key: value for key, value in items.items() if value is not NO_VALUE}

    def ref(self, name: str) -> Any:
        pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::StackName": self.stack,
            "AWS::NoValue": NO_VALUE,
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            spec = self.template["Parameters"][name]
            value = self.parameters[name]
            is_list = spec["Type"] == "CommaDelimitedList" or spec["Type"].startswith("List<")
            if is_list and isinstance(value, str):
                return [part.strip() for part in value.split(",")] if value else [""]
            return value
        return self.attribute(name, "Ref")

    def attribute(self, logical_id: str, attribute: str) -> Any:
        resource = self.resources[logical_id]
        kind = resource["Type"]
        properties = resource.get("Properties", {})
        lowered = logical_id.lower()
        if kind == "AWS::SQS::Queue":
            name = f"{self.stack}-{logical_id}" + (".fifo" if properties.get("FifoQueue") else "")
            return {
                "Ref": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}",
                "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}",
                "QueueName": name,
            }[attribute]
        if kind == "AWS::S3::Bucket":
            name = (
                str(self.evaluate(properties["BucketName"]))
                if "BucketName" in properties
                else f"{self.stack}-{lowered}-1a2b3c4d5e6f"
            )
            return {"Ref": name, "Arn": f"arn:aws:s3:::{name}"}[attribute]
        if kind == "AWS::EMRServerless::Application":
            return {
                "Ref": "00fabcdefg123456",
                "ApplicationId": "00fabcdefg123456",
                "Arn": f"arn:aws:emr-serverless:{REGION}:{ACCOUNT}:/applications/00fabcdefg123456",
            }[attribute]
        if kind == "AWS::IAM::Role":
            return {
                "Ref": f"{self.stack}-{logical_id}-ABC",
                "Arn": f"arn:aws:iam::{ACCOUNT}:role/{self.stack}-{logical_id}-ABC",
            }[attribute]
        if kind == "AWS::IAM::ManagedPolicy":
            return {"Ref": f"managed-policy:{logical_id}"}[attribute]
        if kind == "AWS::Serverless::Function":
            name = f"{self.stack}-{logical_id}-XYZ"
            return {"Ref": name, "Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"}[attribute]
        if kind == "AWS::Serverless::StateMachine":
            name = f"{logical_id}-XYZ" if self.stack == STACK else f"{self.stack}-{logical_id}"
            return {
                "Ref": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}",
                "Arn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}",
                "Name": name,
            }[attribute]
        if kind == "AWS::Logs::LogGroup":
            name = str(self.evaluate(properties["LogGroupName"]))
            return {"Ref": name, "Arn": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{name}:*"}[attribute]
        if kind == "AWS::Events::Rule":
            return {"Arn": f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{self.stack}-{logical_id}-XYZ"}[attribute]
        if kind == "AWS::Serverless::LayerVersion":
            return {"Ref": f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:{logical_id}:1"}[attribute]
        return f"<{logical_id}.{attribute}>"


def _for_each_item(node: Any, identifier: str, item: str) -> Any:
    if isinstance(node, str):
        alphanumeric = re.sub(r"[^A-Za-z0-9]", "", item)
        return node.replace("${" + identifier + "}", item).replace("&{" + identifier + "}", alphanumeric)
    if isinstance(node, list):
        return [_for_each_item(child, identifier, item) for child in node]
    if isinstance(node, Mapping):
        if dict(node) == {"Ref": identifier}:
            return item
        return {
            _for_each_item(key, identifier, item): _for_each_item(value, identifier, item)
            for key, value in node.items()
        }
    return node


def _get_att(deployment: Deployment, value: Any) -> Any:
    logical_id, attribute = value if isinstance(value, list) else str(value).split(".", 1)
    return deployment.attribute(logical_id, attribute)


def _sub(deployment: Deployment, value: Any) -> str:
    text, variables = (value, {}) if isinstance(value, str) else (value[0], value[1])
    local = {name: deployment.evaluate(node) for name, node in variables.items()}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name in local:
            return str(local[name])
        if "." in name and name.split(".", 1)[0] in deployment.resources:
            return str(deployment.attribute(*name.split(".", 1)))
        return str(deployment.ref(name))

    return re.sub(r"\$\{([^}]+)\}", replace, text)


def _if(deployment: Deployment, value: Any) -> Any:
    condition, when_true, when_false = value
    return deployment.evaluate(when_true if deployment.condition(condition) else when_false)


def _join(deployment: Deployment, value: Any) -> str:
    delimiter, items = value
    return str(delimiter).join(str(item) for item in deployment.evaluate(items))


def _split(deployment: Deployment, value: Any) -> list[str]:
    delimiter, text = value
    return str(deployment.evaluate(text)).split(delimiter)


def _select(deployment: Deployment, value: Any) -> Any:
    index, items = value
    return deployment.evaluate(items)[int(deployment.evaluate(index))]


def _equals(deployment: Deployment, value: Any) -> bool:
    left, right = (deployment.evaluate(item) for item in value)
    return str(left) == str(right)


_INTRINSICS: dict[str, Any] = {
    "Ref": lambda d, v: d.ref(v),
    "Fn::GetAtt": _get_att,
    "Fn::Sub": _sub,
    "Fn::If": _if,
    "Fn::Join": _join,
    "Fn::Split": _split,
    "Fn::Select": _select,
    "Fn::Equals": _equals,
    "Fn::Not": lambda d, v: not d.evaluate(v[0]),
    "Fn::And": lambda d, v: all(d.evaluate(item) for item in v),
    "Fn::Or": lambda d, v: any(d.evaluate(item) for item in v),
    "Condition": lambda d, v: d.condition(v),
    # Rule functions (`Rules` assertions).
    "Fn::Contains": lambda d, v: str(d.evaluate(v[1])) in [str(x) for x in d.evaluate(v[0])],
}


def walk(node: Any) -> Iterator[Any]:
    """Every node of a decoded template, depth first."""
    yield node
    if isinstance(node, Mapping):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)
