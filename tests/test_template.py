"""template.yaml wires what the code needs, and no more: handlers, environment, state machine, IAM, alarms.

The template is evaluated as CloudFormation would (tests/support/cfn_template.py) for two
installations - KafScale's existing bucket through EventBridge with a venv archive and Glue, and a
stack-created bucket with a custom EMR image and a REST catalog - and each function's environment is
fed to the same config loading the functions run at cold start.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kafscale_iceberg.config import DEPLOYMENT_VARIABLES, apply_deployment_environment
from tests.support.cfn_template import (
    ACCOUNT,
    REGION,
    ROOT,
    Deployment,
    Function,
    environment_names,
    functions,
    load_template,
    s3_object_arn,
    template_resources,
    walk,
)

ASL = ROOT / "infra" / "state_machine.asl.json"
LAYER_REQUIREMENTS = ROOT / "infra" / "lambda" / "layer" / "requirements.txt"
IMAGE_REQUIREMENTS = ROOT / "infra" / "lambda" / "image" / "requirements.txt"
RUNNER_REQUIREMENTS = ROOT / "infra" / "lambda" / "runner" / "requirements.txt"

ETCD_SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:kafscale-etcd-AbCdEf"
CATALOG_SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:kafscale-catalog-AbCdEf"
COMMON = {
    "ConfigLocation": "s3://kafscale-config/iceberg/config.yaml",
    "SegmentBucketName": "kafscale-data",
    "SubnetIds": "subnet-0a,subnet-0b",
    "SecurityGroupIds": "sg-0c",
    "WarehouseBucket": "kafscale-lake",
}
INSTALLATIONS = {
    # KafScale's bucket (EventBridge), Glue, venv archive, etcd endpoints and credentials from the stack.
    "existing-bucket": {
        **COMMON,
        "Namespace": "production",
        "GlueDatabaseNames": "shop,web",
        "EtcdEndpoints": "https://etcd-0.internal:2379,https://etcd-1.internal:2379",
        "EtcdSecretArn": ETCD_SECRET,
        "SegmentBucketKmsKeyArn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    },
    # A bucket the stack creates, a REST catalog with a token, a custom EMR image, etcd from the file.
    "created-bucket": {
        **COMMON,
        "SegmentBucketMode": "create",
        "CatalogType": "rest",
        "CatalogUri": "https://catalog.example.com/api",
        "CatalogSecretArn": CATALOG_SECRET,
        "SparkImageUri": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/kafscale-spark:1",
    },
}
# The config files their users write: nothing the stack creates.
USER_FILES: dict[str, dict[str, Any]] = {
    "existing-bucket": {
        "s3": {"bucket": "kafscale-data", "namespace": "production"},
        "iceberg": {"catalog": {"type": "glue"}, "warehouse": "s3://kafscale-lake/warehouse"},
        "mappings": [{"topic": "orders", "table": "shop.orders"}, {"topic": "clicks", "table": "web.clicks"}],
    },
    "created-bucket": {
        "s3": {"bucket": "kafscale-data"},
        "iceberg": {"catalog": {"type": "rest", "uri": "https://old.example.com"}},
        "etcd": {"endpoints": ["https://etcd.internal:2379"]},
        "runner": {"type": "emr_serverless", "emr_serverless": {"venv_archive": "s3://old/venv.tar.gz"}},
        "mappings": [{"topic": "orders", "table": "shop.orders"}],
    },
}
SECRETS = {
    ETCD_SECRET: json.dumps({"username": "kafscale", "password": "etcd-pw"}),
    CATALOG_SECRET: json.dumps({"token": "catalog-token"}),
}

# Read by the code but deliberately not set by the template, each for a reason.
NOT_SET_BY_THE_TEMPLATE = {
    # Go-compatible per-installation overrides a user may add to a function; the config file says the same.
    "KAFSCALE_ICEBERG_LFS_MODE",
    "KAFSCALE_ICEBERG_LFS_MAX_INLINE_SIZE",
    "KAFSCALE_ICEBERG_LFS_STORE_METADATA",
    "KAFSCALE_ICEBERG_LFS_VALIDATE_CHECKSUM",
    "KAFSCALE_ICEBERG_LFS_RESOLVE_CONCURRENCY",
    # `kafscale-iceberg run` (one machine) serves /metrics; Lambda functions emit EMF instead.
    "KAFSCALE_METRICS_ADDR",
    # The one-machine runner hands a spark-submit run the schema registry's credentials this way; on
    # AWS the job reads them from schema_registry.credentials_secret (SchemaRegistrySecretArn).
    "KAFSCALE_ICEBERG_REGISTRY_USERNAME",
    "KAFSCALE_ICEBERG_REGISTRY_PASSWORD",
    "KAFSCALE_ICEBERG_REGISTRY_TOKEN",
    # Set by the Lambda runtime.
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",  # the Lambda runner's task threads (execution/in_process.py)
    "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_REGION",  # the default of s3.region (config/deployment.py)
}
# Set by the template for a library the functions ship, not read by this package's code.
READ_BY_LIBRARIES = {"POWERTOOLS_LOG_LEVEL": "aws_lambda_powertools"}
# The one-machine loop and the Spark job do not run in Lambda.
NOT_LAMBDA_CODE = ("kafscale_iceberg/local/",)


class FixedSecrets:
    def read_secret(self, secret_id: str) -> str:
        return SECRETS[secret_id]


@pytest.fixture(params=sorted(INSTALLATIONS), scope="module")
def installation(request: pytest.FixtureRequest) -> tuple[str, Deployment]:
    return request.param, Deployment(INSTALLATIONS[request.param])


def _function(logical_id: str) -> Function:
    return next(f for f in functions() if f.logical_id == logical_id)


# ---------------------------------------------------------------------------------------------------
# Handlers


@pytest.mark.parametrize("function", functions(), ids=lambda f: f.logical_id)
def test_every_handler_imports(function: Function) -> None:
    module, name = function.handler.rsplit(".", 1)
    assert callable(getattr(importlib.import_module(module), name))


# Imported here only because they are installed in this venv: neither is needed in Lambda.
OPTIONAL_IMPORTS = {
    "_distutils_hack",  # setuptools' site hook in this virtualenv, not imported by any module
    "certifi",  # botocore uses it when present, else its own CA bundle
}


def _distributions_of(requirements: Path) -> set[str]:
    return {
        canonicalize_name(Requirement(line.split("#")[0].strip()).name)
        for line in requirements.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }


_PROBE = """
import json, sys
first_importer = {}
for module in sys.argv[1:]:
    __import__(module)
    for name in sys.modules:
        first_importer.setdefault(name.split(".")[0], module)
print(json.dumps(first_importer))
"""


@pytest.mark.slow  # a fresh interpreter
def test_zip_handlers_import_only_what_the_layer_ships() -> None:
    """A zip function has the layer's packages and the standard library, nothing else (no pyarrow)."""
    modules = sorted({f.handler.rsplit(".", 1)[0] for f in functions() if not f.is_image})
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules], check=True, capture_output=True, text=True, cwd=ROOT
    )
    first_importer: dict[str, str] = json.loads(probe.stdout)
    owners = packages_distributions()
    shipped = _distributions_of(LAYER_REQUIREMENTS)
    outside = {
        f"{name} ({', '.join(owners[name])})": module
        for name, module in first_importer.items()
        if name in owners
        and name not in {"kafscale_iceberg", "functions", *OPTIONAL_IMPORTS}
        and not {canonicalize_name(d) for d in owners[name]} & shipped
    }
    assert outside == {}, "imported by a zip handler, not shipped by the layer"
    assert {"aws_lambda_powertools", "pydantic", "yaml", "botocore"} <= set(first_importer)


# ---------------------------------------------------------------------------------------------------
# Environment


def _string_constants(path: Path) -> Iterator[tuple[str, ast.AST, ast.AST | None]]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, node, parents.get(node)


def _is_environ_lookup(call: ast.AST | None) -> bool:
    """`os.environ.get(X)`, `os.getenv(X)`, `os.environ.setdefault(X, ...)`, `os.environ[X]`, `env.get(X)`."""
    if isinstance(call, ast.Subscript):
        return "environ" in ast.unparse(call.value)
    if not isinstance(call, ast.Call):
        return False
    target = ast.unparse(call.func)
    return target in {"os.getenv", "os.environ.get", "os.environ.setdefault"} or (
        target.endswith(".get") and "env" in target.split(".")[0]
    )


@cache
def variables_read_by_lambda_code() -> frozenset[str]:
    """Environment variables the Lambda code reads: names passed to an environ lookup, and every
    `KAFSCALE_*` string constant (names kept in constants such as `CONFIG_ENV`)."""
    names: set[str] = set()
    for folder in ("kafscale_iceberg", "functions"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.relative_to(ROOT).as_posix().startswith(NOT_LAMBDA_CODE):
                continue
            for value, node, parent in _string_constants(path):
                if re.fullmatch(r"KAFSCALE_[A-Z0-9_]*[A-Z0-9]", value):
                    names.add(value)
                elif re.fullmatch(r"[A-Z][A-Z0-9_]+", value) and _is_environ_lookup(parent):
                    assert parent is not None
                    args = parent.args if isinstance(parent, ast.Call) else [parent.slice]
                    if args and args[0] is node:
                        names.add(value)
    return frozenset(names)


def test_the_scan_finds_the_variables_the_code_is_known_to_read() -> None:
    found = variables_read_by_lambda_code()
    assert {
        "KAFSCALE_ICEBERG_CONFIG",
        "KAFSCALE_ICEBERG_STATE_MACHINE_ARN",
        "AWS_LAMBDA_FUNCTION_NAME",
    } <= found
    assert {v.name for v in DEPLOYMENT_VARIABLES} <= found


def test_every_variable_the_code_reads_is_set_by_the_template() -> None:
    missing = variables_read_by_lambda_code() - environment_names() - NOT_SET_BY_THE_TEMPLATE
    assert missing == set(), "read by the code, set by no function in template.yaml"


def test_every_variable_the_template_sets_is_read() -> None:
    unread = environment_names() - variables_read_by_lambda_code() - set(READ_BY_LIBRARIES)
    assert unread == set(), "set in template.yaml, read by nothing"
    for name, package in READ_BY_LIBRARIES.items():
        source = Path(importlib.import_module(package).__file__ or "").parent
        assert any(name in path.read_text() for path in source.rglob("*.py")), f"{package} never reads {name}"


def test_the_deliberately_unset_variables_are_still_read() -> None:
    """The exceptions list shrinks with the code: an entry nothing reads any more must go."""
    assert variables_read_by_lambda_code() >= NOT_SET_BY_THE_TEMPLATE


@pytest.mark.parametrize("function", functions(), ids=lambda f: f.logical_id)
def test_each_function_builds_the_deployed_config(
    installation: tuple[str, Deployment], function: Function
) -> None:
    """The user's file plus the function's environment validate, and point at the stack's resources."""
    name, deployment = installation
    env = deployment.environment(function)
    config = apply_deployment_environment(USER_FILES[name], env, source="config.yaml", secrets=FixedSecrets())

    emr = config.runner.emr_serverless
    runs_bucket = deployment.attribute("RunsBucket", "Ref")
    assert config.runner.type == "emr_serverless"
    assert config.offsets.backend == "etcd"
    assert config.notifications.work_queue_url == deployment.attribute("WorkQueue", "Ref")
    assert config.notifications.work_queue_url.endswith(".fifo")
    assert config.notifications.rejected_queue_url == deployment.attribute("RejectedQueue", "Ref")
    assert config.runs.location == f"s3://{runs_bucket}/runs"
    assert emr.application_id == deployment.attribute("EmrApplication", "ApplicationId")
    assert emr.execution_role_arn == deployment.attribute("EmrJobRole", "Arn")
    assert emr.entry_point == f"s3://{runs_bucket}/spark/spark_app/main.py"
    assert config.iceberg.warehouse == "s3://kafscale-lake/warehouse"
    if name == "existing-bucket":
        assert emr.venv_archive == f"s3://{runs_bucket}/spark/kafscale-iceberg-venv.tar.gz"
        assert emr.image == ""
        assert config.etcd.endpoints == ("https://etcd-0.internal:2379", "https://etcd-1.internal:2379")
        assert config.s3.namespace == "production"
    else:
        assert emr.image == INSTALLATIONS[name]["SparkImageUri"]
        assert emr.venv_archive == ""
        assert config.iceberg.catalog.uri == "https://catalog.example.com/api"
        assert config.etcd.endpoints == ("https://etcd.internal:2379",)
    if function.in_vpc and name == "existing-bucket":
        assert config.etcd.username == "kafscale"  # every function that talks to etcd gets its credentials
    if function.is_image and function.logical_id != "PlanRunnerFunction" and name == "created-bucket":
        assert config.iceberg.catalog.token.get_secret_value() == "catalog-token"


def test_the_checkpoint_function_is_the_one_in_the_vpc_and_the_others_reach_etcd_through_it() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    assert [f.logical_id for f in functions() if f.in_vpc] == ["CheckpointFunction"]
    checkpoint = deployment.attribute("CheckpointFunction", "Arn")
    for function in functions():
        environment = deployment.environment(function)
        has_secret = "KAFSCALE_ICEBERG_ETCD_SECRET_ARN" in environment
        assert has_secret == function.in_vpc, function.logical_id
        # Every function that calls the checkpoint store is told the function and may invoke it; the
        # router and the Lambda runner touch S3 only (the runner's lease is the state machine's).
        calls_store = function.logical_id not in {
            "CheckpointFunction",
            "RouterFunction",
            "PlanRunnerFunction",
        }
        named = environment.get("KAFSCALE_ICEBERG_CHECKPOINT_FUNCTION") == checkpoint  # the ARN IAM matches
        assert named == calls_store, function.logical_id
        assert deployment.role_allows(function.role_id, "lambda:InvokeFunction", checkpoint) == calls_store


# What a function in the VPC may call without a NAT gateway or an interface endpoint: its logs and
# traces (delivered by Lambda), its network interfaces (managed by Lambda), and etcd's credentials.
_NO_ENDPOINT_ACTIONS = ("logs:", "xray:", "ec2:", "secretsmanager:GetSecretValue", "kms:Decrypt")


def vpc_functions_calling_aws_apis(
    deployment: Deployment, candidates: list[Function] | None = None
) -> list[str]:
    """The functions in the VPC whose role allows an AWS API beyond `_NO_ENDPOINT_ACTIONS`: each would
    need a NAT gateway (~$33 per AZ-month) or an interface endpoint (~$7.30 per AZ-month each)."""
    calling = []
    for function in functions() if candidates is None else candidates:
        if not function.in_vpc:
            continue
        actions = {
            a for s in deployment.role_statements(function.role_id) if s.effect == "Allow" for a in s.actions
        }
        if any(not a.startswith(_NO_ENDPOINT_ACTIONS) for a in actions):
            calling.append(function.logical_id)
    return calling


@pytest.mark.parametrize("installation", sorted(INSTALLATIONS))
def test_no_function_in_the_vpc_calls_an_aws_api_so_the_vpc_needs_no_nat_and_no_interface_endpoint(
    installation: str,
) -> None:
    """Issue 33's `vpc_functions_calling_aws_apis`, from template.yaml as deployed (with an etcd secret:
    the one endpoint it costs is Secrets Manager's, or none with EtcdUsername/EtcdPassword)."""
    deployment = Deployment({**INSTALLATIONS[installation], "EtcdSecretArn": ETCD_SECRET})
    assert vpc_functions_calling_aws_apis(deployment) == []
    # The check can fail: the launcher in the VPC, as it was before the checkpoint function (SQS, S3,
    # Step Functions).
    (launcher,) = [f for f in functions() if f.logical_id == "LauncherFunction"]
    in_vpc = Function(launcher.logical_id, {**launcher.properties, "VpcConfig": {}}, launcher.metadata)
    assert vpc_functions_calling_aws_apis(deployment, [in_vpc]) == ["LauncherFunction"]


def test_the_state_machine_arn_goes_to_the_functions_that_start_or_track_runs() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    given = {
        f.logical_id
        for f in functions()
        if deployment.environment(f).get("KAFSCALE_ICEBERG_STATE_MACHINE_ARN")
        == deployment.attribute("RunStateMachine", "Ref")
    }
    assert given == {"LauncherFunction", "ReconcilerFunction"}


# ---------------------------------------------------------------------------------------------------
# The state machine


def test_the_state_machine_substitutions_are_the_run_step_functions() -> None:
    from tests.test_state_machine import HANDLERS

    machine = load_template()["Resources"]["RunStateMachine"]["Properties"]
    assert machine["DefinitionUri"] == "infra/state_machine.asl.json"
    substitutions = machine["DefinitionSubstitutions"]
    assert set(substitutions) == set(re.findall(r"\$\{(\w+)\}", ASL.read_text()))
    for name, handler in HANDLERS.items():
        logical_id, attribute = substitutions[name]["Fn::GetAtt"]
        assert attribute == "Arn"
        assert _function(logical_id).handler == handler, name
    assert substitutions["WorkQueueUrl"] == {"Ref": "WorkQueue"}


def test_the_state_machine_may_invoke_exactly_the_run_steps_and_signal_the_work_queue() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    statements = deployment.role_statements("RunStateMachineRole")
    invocable = {r for s in statements if "lambda:InvokeFunction" in s.actions for r in s.resources}
    steps = ["StartJobFunction", "PlanRunnerFunction", "WatchFunction", "CommitFunction", "AbortFunction"]
    assert invocable == {deployment.attribute(step, "Arn") for step in steps}
    assert deployment.role_allows(
        "RunStateMachineRole", "sqs:SendMessage", deployment.attribute("WorkQueue", "Arn")
    )


# ---------------------------------------------------------------------------------------------------
# IAM: least privilege

ROLES = {f.role_id for f in functions()} | {"EmrJobRole", "RunStateMachineRole"}
# Actions AWS offers no resource-level permission for.
UNSCOPABLE = {
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_no_role_allows_all_resources_or_all_actions_of_a_service(
    installation: tuple[str, Deployment], role: str
) -> None:
    _, deployment = installation
    for statement in deployment.role_statements(role):
        assert statement.effect == "Allow"
        assert not any(action.endswith("*") for action in statement.actions), statement
        if "*" in statement.resources:
            assert set(statement.actions) <= UNSCOPABLE, statement


def test_only_job_starters_pass_a_role_and_only_the_emr_job_role_to_emr() -> None:
    """The state machine's startJobRun.sync starts a run's job (the StartJob step only hands it the
    request); the maintenance function starts compaction jobs."""
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    passing = set()
    for role in ROLES:
        for statement in deployment.role_statements(role):
            if "iam:PassRole" not in statement.actions:
                continue
            passing.add(role)
            assert role in {"RunStateMachineRole", "MaintenanceRole"}
            assert statement.resources == (deployment.attribute("EmrJobRole", "Arn"),)
            assert statement.condition == {
                "StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}
            }
    assert passing == {"RunStateMachineRole", "MaintenanceRole"}


def test_each_role_writes_only_its_own_log_group() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    for function in functions():
        group = function.properties["LoggingConfig"]["LogGroup"]["Ref"]
        granted = {
            r
            for s in deployment.role_statements(function.role_id)
            if "logs:PutLogEvents" in s.actions
            for r in s.resources
        }
        assert granted == {deployment.attribute(group, "Arn")}, function.logical_id


def _uris(deployment: Deployment) -> dict[str, str]:
    runs = deployment.attribute("RunsBucket", "Ref")
    namespace = deployment.parameters["Namespace"]
    segment_key = f"{namespace + '/' if namespace else ''}orders/0/segment-00000000000000000000.kfs"
    uris = {
        "config": deployment.parameters["ConfigLocation"],
        "segment": f"s3://kafscale-data/{segment_key}",
        "plan": f"s3://{runs}/runs/orders/orders-abc-a0/plan.json",
        "field ids": f"s3://{runs}/runs/orders/field-ids.json",
        "compaction job": f"s3://{runs}/runs/maintenance/shop.orders/compaction-1-0a1b2c3d/job.json",
        "run data": f"s3://{runs}/runs/data/orders/orders-abc-a0/part-0.parquet",
        "entry point": f"s3://{runs}/spark/spark_app/main.py",
        "venv archive": f"s3://{runs}/spark/kafscale-iceberg-venv.tar.gz",
        "job log": f"s3://{runs}/emr-logs/applications/x/jobs/y/stdout.gz",
        "table metadata": "s3://kafscale-lake/warehouse/shop.db/orders/metadata/00001.metadata.json",
        "other bucket": "s3://somebody-elses-bucket/secret.txt",
    }
    if namespace:  # without one, the whole bucket is KafScale's
        uris["outside the namespace"] = "s3://kafscale-data/other/orders/0/segment-00000000000000000000.kfs"
    return uris


# (role, action, what) the role must be allowed; every other (role, s3 action, what) below is refused.
# IAM scopes run documents and run data files together: both live under the runs prefix.
S3_ACCESS = {
    ("RouterRole", "s3:GetObject", "config"),
    ("RouterRole", "s3:GetObject", "segment"),
    ("LauncherRole", "s3:GetObject", "config"),
    ("LauncherRole", "s3:GetObject", "segment"),
    ("LauncherRole", "s3:GetObject", "plan"),
    ("LauncherRole", "s3:PutObject", "plan"),
    ("LauncherRole", "s3:GetObject", "run data"),
    ("LauncherRole", "s3:PutObject", "run data"),
    ("StartJobRole", "s3:GetObject", "config"),
    ("StartJobRole", "s3:GetObject", "plan"),
    ("StartJobRole", "s3:GetObject", "run data"),
    ("WatchRole", "s3:GetObject", "config"),
    ("AbortRole", "s3:GetObject", "config"),
    ("AbortRole", "s3:GetObject", "plan"),  # data locations for cleanup; result and backoff.json
    ("AbortRole", "s3:GetObject", "run data"),
    ("AbortRole", "s3:PutObject", "plan"),
    ("AbortRole", "s3:PutObject", "run data"),
    ("CommitRole", "s3:GetObject", "config"),
    ("CommitRole", "s3:GetObject", "plan"),
    ("CommitRole", "s3:GetObject", "run data"),
    ("CommitRole", "s3:GetObject", "table metadata"),
    ("CommitRole", "s3:PutObject", "table metadata"),
    ("ReconcilerRole", "s3:GetObject", "config"),
    ("ReconcilerRole", "s3:GetObject", "segment"),
    ("ReplayRole", "s3:GetObject", "config"),
    ("ReplayRole", "s3:GetObject", "segment"),
    ("ReplayRole", "s3:GetObject", "plan"),
    ("ReplayRole", "s3:GetObject", "run data"),
    ("ReplayRole", "s3:GetObject", "table metadata"),
    ("ReplayRole", "s3:PutObject", "table metadata"),
    ("EmrJobRole", "s3:GetObject", "segment"),
    ("EmrJobRole", "s3:GetObject", "plan"),
    ("EmrJobRole", "s3:PutObject", "plan"),
    ("EmrJobRole", "s3:PutObject", "run data"),
    ("EmrJobRole", "s3:GetObject", "run data"),
    ("EmrJobRole", "s3:GetObject", "entry point"),
    ("EmrJobRole", "s3:GetObject", "venv archive"),
    ("EmrJobRole", "s3:PutObject", "job log"),
    ("EmrJobRole", "s3:GetObject", "table metadata"),
    ("EmrJobRole", "s3:PutObject", "table metadata"),
    # field-ids.json: written by the commit step, read by the launcher (beside the runs, so every role
    # reading or writing run documents may).
    ("CommitRole", "s3:PutObject", "field ids"),
    ("CommitRole", "s3:GetObject", "field ids"),
    ("LauncherRole", "s3:GetObject", "field ids"),
    ("LauncherRole", "s3:PutObject", "field ids"),
    ("AbortRole", "s3:PutObject", "field ids"),
    ("AbortRole", "s3:GetObject", "field ids"),
    ("StartJobRole", "s3:GetObject", "field ids"),
    ("ReplayRole", "s3:GetObject", "field ids"),
    ("EmrJobRole", "s3:GetObject", "field ids"),
    ("EmrJobRole", "s3:PutObject", "field ids"),
    # Maintenance: compaction reads and writes data files, expiry deletes manifests, orphan cleanup
    # deletes run data files; run documents are readable with the run data (one prefix).
    ("MaintenanceRole", "s3:GetObject", "config"),
    ("MaintenanceRole", "s3:GetObject", "plan"),
    ("MaintenanceRole", "s3:GetObject", "field ids"),
    ("MaintenanceRole", "s3:PutObject", "field ids"),  # an upsert table's compacted version
    ("MaintenanceRole", "s3:GetObject", "run data"),
    ("MaintenanceRole", "s3:PutObject", "run data"),
    ("MaintenanceRole", "s3:DeleteObject", "run data"),
    ("MaintenanceRole", "s3:GetObject", "table metadata"),
    ("MaintenanceRole", "s3:PutObject", "table metadata"),
    ("MaintenanceRole", "s3:DeleteObject", "table metadata"),
    # Compaction jobs: the maintenance pass writes the job and its pending record, the EMR job reads
    # the job and writes its result beside it (run documents: the roles reading runs may read them).
    ("MaintenanceRole", "s3:GetObject", "compaction job"),
    ("MaintenanceRole", "s3:PutObject", "compaction job"),
    ("EmrJobRole", "s3:GetObject", "compaction job"),
    ("EmrJobRole", "s3:PutObject", "compaction job"),
    ("CommitRole", "s3:GetObject", "compaction job"),
    ("LauncherRole", "s3:GetObject", "compaction job"),
    ("LauncherRole", "s3:PutObject", "compaction job"),
    ("AbortRole", "s3:PutObject", "compaction job"),
    ("AbortRole", "s3:GetObject", "compaction job"),
    ("StartJobRole", "s3:GetObject", "compaction job"),
    ("ReplayRole", "s3:GetObject", "compaction job"),
    # The Lambda runner: what the EMR job's tasks and driver touch (RunTasksPolicy), not Spark's code or
    # logs; the config file, read when it starts.
    ("PlanRunnerRole", "s3:GetObject", "config"),
    ("PlanRunnerRole", "s3:GetObject", "segment"),
    ("PlanRunnerRole", "s3:GetObject", "plan"),
    ("PlanRunnerRole", "s3:PutObject", "plan"),
    ("PlanRunnerRole", "s3:GetObject", "run data"),
    ("PlanRunnerRole", "s3:PutObject", "run data"),
    ("PlanRunnerRole", "s3:GetObject", "field ids"),
    ("PlanRunnerRole", "s3:PutObject", "field ids"),
    ("PlanRunnerRole", "s3:GetObject", "compaction job"),
    ("PlanRunnerRole", "s3:PutObject", "compaction job"),
    ("PlanRunnerRole", "s3:GetObject", "table metadata"),
    ("PlanRunnerRole", "s3:PutObject", "table metadata"),
}


def test_s3_access_is_exactly_what_each_role_needs(installation: tuple[str, Deployment]) -> None:
    _, deployment = installation
    uris = _uris(deployment)
    granted = {
        (role, action, what)
        for role in ROLES
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")
        for what, uri in uris.items()
        if deployment.role_allows(role, action, s3_object_arn(uri))
    }
    assert granted - S3_ACCESS == set(), "granted beyond need"
    assert S3_ACCESS - granted == set(), "needed, not granted"


def test_the_locations_the_functions_are_given_are_the_ones_iam_grants() -> None:
    """The env's entry point and venv archive are what the job role may read (no drift between them)."""
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    env = deployment.environment(_function("StartJobFunction"))
    for variable in ("KAFSCALE_ICEBERG_EMR_ENTRY_POINT", "KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE"):
        assert deployment.role_allows("EmrJobRole", "s3:GetObject", s3_object_arn(env[variable])), variable
    plan = env["KAFSCALE_ICEBERG_RUNS_LOCATION"] + "/orders/run/plan.json"
    assert deployment.role_allows("LauncherRole", "s3:PutObject", s3_object_arn(plan))
    assert deployment.role_allows(
        "EmrJobRole", "s3:PutObject", s3_object_arn(env["KAFSCALE_ICEBERG_EMR_LOG_URI"] + "x")
    )


def test_segment_reads_need_the_bucket_key_only_when_it_has_one() -> None:
    key = INSTALLATIONS["existing-bucket"]["SegmentBucketKmsKeyArn"]
    with_key = Deployment(INSTALLATIONS["existing-bucket"])
    without_key = Deployment(INSTALLATIONS["created-bucket"])
    for role in ("RouterRole", "LauncherRole", "EmrJobRole", "PlanRunnerRole"):
        assert with_key.role_allows(role, "kms:Decrypt", key)
        assert not without_key.role_allows(role, "kms:Decrypt", key)
    assert not with_key.role_allows("CommitRole", "kms:Decrypt", key)


def test_glue_access_is_limited_to_the_named_databases() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    database = f"arn:aws:glue:{REGION}:{ACCOUNT}:database/shop"
    table = f"arn:aws:glue:{REGION}:{ACCOUNT}:table/web/clicks"
    for role in ("CommitRole", "ReplayRole"):
        assert deployment.role_allows(role, "glue:UpdateTable", table)
        assert deployment.role_allows(role, "glue:CreateDatabase", database)
        assert not deployment.role_allows(
            role, "glue:UpdateTable", f"arn:aws:glue:{REGION}:{ACCOUNT}:table/hr/pay"
        )
    assert not deployment.role_allows("LauncherRole", "glue:GetTable", table)
    glue = [s for s in deployment.role_statements("CommitRole") if "glue:UpdateTable" in s.actions]
    assert glue[0].condition == {
        "StringEquals": {"aws:ResourceAccount": ACCOUNT, "aws:RequestedRegion": REGION}
    }
    rest = Deployment(INSTALLATIONS["created-bucket"])
    assert not rest.role_allows("CommitRole", "glue:UpdateTable", table)


def _lake_formation_grants(deployment: Deployment) -> dict[tuple[str, str], set[str]]:
    """(principal, resource) -> permissions, of the Lake Formation grants the stack would create."""
    grants: dict[tuple[str, str], set[str]] = {}
    for logical_id, resource in deployment.resources.items():
        if resource["Type"] == "AWS::LakeFormation::PrincipalPermissions" and deployment.exists(logical_id):
            properties = deployment.evaluate(resource["Properties"])
            assert properties["PermissionsWithGrantOption"] == []
            key = (properties["Principal"]["DataLakePrincipalIdentifier"], json.dumps(properties["Resource"]))
            grants[key] = set(properties["Permissions"])
    return grants


def test_lake_formation_grants_are_opt_in_and_go_to_every_role_that_creates_or_alters_tables() -> None:
    """`LakeFormationGrants: "true"`: each database of GlueDatabaseNames and its tables are granted to
    exactly the roles whose IAM lets them create tables there (Lake Formation refuses them otherwise):
    create and alter tables in the database; alter, describe, read and write its tables, never drop."""
    assert _lake_formation_grants(Deployment(INSTALLATIONS["existing-bucket"])) == {}
    deployment = Deployment({**INSTALLATIONS["existing-bucket"], "LakeFormationGrants": "true"})
    assert deployment.failed_rules() == {}
    roles = [r for r, resource in deployment.resources.items() if resource["Type"] == "AWS::IAM::Role"]
    table_creators = {
        deployment.attribute(role, "Arn")
        for role in roles
        if deployment.role_allows(role, "glue:CreateTable", f"arn:aws:glue:{REGION}:{ACCOUNT}:database/shop")
    }
    assert len(table_creators) == 3  # commit, replay, maintenance
    expected = {}
    for role in table_creators:
        for database in ("shop", "web"):
            on_database = {"Database": {"CatalogId": ACCOUNT, "Name": database}}
            on_tables = {"Table": {"CatalogId": ACCOUNT, "DatabaseName": database, "TableWildcard": {}}}
            expected[role, json.dumps(on_database)] = {"CREATE_TABLE", "ALTER", "DESCRIBE"}
            expected[role, json.dumps(on_tables)] = {"ALTER", "DESCRIBE", "SELECT", "INSERT", "DELETE"}
    assert _lake_formation_grants(deployment) == expected


def test_lake_formation_grants_need_the_glue_catalog() -> None:
    rest = Deployment({**INSTALLATIONS["created-bucket"], "LakeFormationGrants": "true"})
    assert "CatalogType glue" in rest.failed_rules()["LakeFormationGrantsNeedGlue"]
    assert _lake_formation_grants(rest) == {}


def test_glue_schema_versions_are_readable_by_the_task_runners_by_version_id_on_any_resource() -> None:
    """A version read by the id in a record's header (`SchemaVersionId` alone) is authorized on `*`
    on AWS (docs/deploy.md says where that is documented): the task runners get exactly that action."""
    deployment = Deployment({**INSTALLATIONS["created-bucket"], "GlueSchemaRegistryName": "orders"})
    schema = f"arn:aws:glue:{REGION}:{ACCOUNT}:schema/orders/pizzas-value"
    readers = {
        f.role_id for f in functions() if deployment.role_allows(f.role_id, "glue:GetSchemaVersion", "*")
    }
    assert readers == {"PlanRunnerRole"}
    for role in ("EmrJobRole", "PlanRunnerRole"):
        assert deployment.role_allows(role, "glue:GetSchemaVersion", "*")
        assert deployment.role_allows(role, "glue:GetSchemaVersion", schema)  # latest version, by name
        for action in (
            "glue:RegisterSchemaVersion",
            "glue:GetSchemaByDefinition",
            "glue:DeleteSchemaVersions",
        ):
            assert not deployment.role_allows(role, action, "*")
    without = Deployment(INSTALLATIONS["created-bucket"])
    assert not without.role_allows("EmrJobRole", "glue:GetSchemaVersion", "*")


def test_secrets_are_readable_only_by_the_functions_that_use_them() -> None:
    deployment = Deployment({**INSTALLATIONS["created-bucket"], "EtcdSecretArn": ETCD_SECRET})
    for function in functions():
        role = function.role_id
        # Only the checkpoint function (the one in the VPC, the only etcd client) reads etcd's.
        assert deployment.role_allows(role, "secretsmanager:GetSecretValue", ETCD_SECRET) == function.in_vpc
        catalog = function.is_image and function.logical_id != "PlanRunnerFunction"  # the commit image's
        assert deployment.role_allows(role, "secretsmanager:GetSecretValue", CATALOG_SECRET) == catalog


def test_emr_and_queue_actions_are_scoped_to_the_stack_resources() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    application = deployment.attribute("EmrApplication", "Arn")
    job = f"{application}/jobruns/00abc"
    # The state machine's startJobRun.sync is the one call that starts a run's job.
    assert not deployment.role_allows("StartJobRole", "emr-serverless:StartJobRun", application)
    assert deployment.role_allows("RunStateMachineRole", "emr-serverless:StartJobRun", application)
    assert deployment.role_allows("WatchRole", "emr-serverless:GetJobRun", job)
    assert deployment.role_allows("WatchRole", "emr-serverless:CancelJobRun", job)
    assert not deployment.role_allows("WatchRole", "emr-serverless:StartJobRun", application)
    # The abort step finds the run's job by its run id and cancels it (the state machine started it).
    assert deployment.role_allows("AbortRole", "emr-serverless:ListJobRuns", application)
    assert deployment.role_allows("AbortRole", "emr-serverless:CancelJobRun", job)
    assert not deployment.role_allows("AbortRole", "emr-serverless:StartJobRun", application)
    assert not deployment.role_allows(
        "StartJobRole", "emr-serverless:GetJobRun", "arn:aws:emr-serverless:x:y:/applications/other/jobruns/1"
    )
    work = deployment.attribute("WorkQueue", "Arn")
    # The commit step signals its topic after the commit (functions/commit.py); the state machine the
    # abort's re-signal.
    for role in (
        "RouterRole",
        "LauncherRole",
        "ReconcilerRole",
        "ReplayRole",
        "RunStateMachineRole",
        "CommitRole",
    ):
        assert deployment.role_allows(role, "sqs:SendMessage", work), role
    for role in ("StartJobRole", "WatchRole", "AbortRole", "EmrJobRole"):
        assert not deployment.role_allows(role, "sqs:SendMessage", work), role
    execution = (
        f"arn:aws:states:{REGION}:{ACCOUNT}:execution:{deployment.attribute('RunStateMachine', 'Name')}:run-1"
    )
    assert deployment.role_allows("ReconcilerRole", "states:DescribeExecution", execution)
    assert deployment.role_allows(
        "LauncherRole", "states:StartExecution", deployment.attribute("RunStateMachine", "Ref")
    )


def test_the_emr_job_role_trusts_only_this_application() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    trust = deployment.evaluate(deployment.resources["EmrJobRole"]["Properties"]["AssumeRolePolicyDocument"])
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "emr-serverless.amazonaws.com"}
    assert statement["Condition"]["ArnLike"]["aws:SourceArn"] == deployment.attribute("EmrApplication", "Arn")


# ---------------------------------------------------------------------------------------------------
# Segment events, encryption, transport


def test_a_created_bucket_notifies_the_queue_after_the_queue_allows_it() -> None:
    deployment = Deployment(INSTALLATIONS["created-bucket"])
    bucket = deployment.resources["SegmentBucket"]
    assert deployment.exists("SegmentBucket")
    assert not deployment.exists("SegmentCreatedRule")
    assert bucket["DependsOn"] == "SegmentEventsQueuePolicy"
    (notification,) = deployment.evaluate(bucket["Properties"]["NotificationConfiguration"])[
        "QueueConfigurations"
    ]
    assert notification["Queue"] == deployment.attribute("SegmentEventsQueue", "Arn")
    assert notification["Filter"]["S3Key"]["Rules"] == [{"Name": "suffix", "Value": ".index"}]
    policy = deployment.evaluate(deployment.resources["SegmentEventsQueuePolicy"]["Properties"])
    allow = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert [s["Principal"] for s in allow] == [{"Service": "s3.amazonaws.com"}]
    assert allow[0]["Condition"] == {
        "ArnEquals": {"aws:SourceArn": "arn:aws:s3:::kafscale-data"},
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
    }


def test_an_existing_bucket_reaches_the_queue_through_its_eventbridge_rule_only() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    assert deployment.exists("SegmentCreatedRule")
    assert not deployment.exists("SegmentBucket")
    rule = deployment.evaluate(deployment.resources["SegmentCreatedRule"]["Properties"])
    assert rule["EventPattern"] == {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {
            "bucket": {"name": ["kafscale-data"]},
            "object": {"key": [{"wildcard": "production/*.index"}]},
        },
    }
    (target,) = rule["Targets"]
    assert target["Arn"] == deployment.attribute("SegmentEventsQueue", "Arn")
    assert target["DeadLetterConfig"]["Arn"] == deployment.attribute("SegmentEventsDLQ", "Arn")
    for policy_id in ("SegmentEventsQueuePolicy", "SegmentEventsDLQPolicy"):
        policy = deployment.evaluate(deployment.resources[policy_id]["Properties"])
        allow = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
        assert [s["Principal"] for s in allow] == [{"Service": "events.amazonaws.com"}]
        assert allow[0]["Condition"]["ArnEquals"] == {
            "aws:SourceArn": deployment.attribute("SegmentCreatedRule", "Arn")
        }


def test_every_queue_and_bucket_is_encrypted_and_refuses_plain_http() -> None:
    deployment = Deployment(INSTALLATIONS["created-bucket"])
    resources = deployment.resources
    policies = {
        deployment.evaluate(r["Properties"]["Bucket"]): r["Properties"]["PolicyDocument"]
        for r in resources.values()
        if r["Type"] == "AWS::S3::BucketPolicy"
    }
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::SQS::Queue":
            assert resource["Properties"]["SqsManagedSseEnabled"] is True, logical_id
        if resource["Type"] == "AWS::S3::Bucket":
            encryption = resource["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
            assert encryption[0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
            denies = deployment.evaluate(policies[deployment.attribute(logical_id, "Ref")])["Statement"]
            assert {"Bool": {"aws:SecureTransport": "false"}} in [s["Condition"] for s in denies], logical_id
            assert resource["Properties"]["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"] is True


def test_queue_timeouts_cover_their_consumers() -> None:
    """AWS's rule for Lambda event sources: visibility timeout at least 6x the function's timeout."""
    resources = load_template()["Resources"]
    for function_id, queue_id in (
        ("RouterFunction", "SegmentEventsQueue"),
        ("LauncherFunction", "WorkQueue"),
    ):
        timeout = resources[function_id]["Properties"]["Timeout"]
        assert resources[queue_id]["Properties"]["VisibilityTimeout"] >= 6 * timeout


# ---------------------------------------------------------------------------------------------------
# Alarms and metrics


def test_alarm_metrics_are_the_ones_the_functions_emit() -> None:
    from kafscale_iceberg import metrics

    parameters = load_template()["Parameters"]
    assert parameters["MetricsNamespace"]["Default"] == metrics.EMF_NAMESPACE
    by_name = {definition.name: definition for definition in metrics.ALL_METRICS}
    runs = by_name[parameters["RunsMetricName"]["Default"]]
    assert {"topic", "outcome"} <= set(runs.labels)
    assert "committed" in {label.value for label in metrics.RunOutcomeLabel}
    failures = by_name[parameters["ConsecutiveFailuresMetricName"]["Default"]]
    assert failures.labels == ("topic",)
    kills = by_name[parameters["LambdaRunnerKillsMetricName"]["Default"]]
    assert kills.labels == ("topic", "cause")
    age = by_name[parameters["WatermarkAgeMetricName"]["Default"]]
    assert age.labels == ("topic",)
    assert age.per_topic


def test_every_function_emits_into_the_alarms_namespace() -> None:
    from kafscale_iceberg.metrics import EMF_NAMESPACE

    namespaces = {}
    for path in (ROOT / "functions").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Metrics":
                keyword = next(k.value for k in node.keywords if k.arg == "namespace")
                namespaces[path.name] = (
                    keyword.value
                    if isinstance(keyword, ast.Constant)
                    else {"EMF_NAMESPACE": EMF_NAMESPACE}[keyword.id]  # type: ignore[attr-defined]
                )
    assert namespaces, "no Metrics(namespace=...) found in functions/"
    assert set(namespaces.values()) == {load_template()["Parameters"]["MetricsNamespace"]["Default"]}


def test_every_alarm_query_names_the_metric_parameters() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    expressions = [
        metric["Expression"]
        for resource in deployment.resources.values()
        if resource["Type"] == "AWS::CloudWatch::Alarm"
        for metric in deployment.evaluate(resource["Properties"]).get("Metrics", [])
    ]
    assert sorted(expressions) == [
        'SELECT MAX(consecutive_failures) FROM "KafScaleIceberg"',
        'SELECT MAX(watermark_age_seconds) FROM "KafScaleIceberg"',
        'SELECT MIN(watermark_age_seconds) FROM "KafScaleIceberg" GROUP BY topic',
        'SELECT SUM(lambda_runner_kills_total) FROM "KafScaleIceberg"',
        "SELECT SUM(runs_total) FROM \"KafScaleIceberg\" WHERE outcome = 'committed'",
    ]


def test_every_dead_letter_queue_has_an_alarm() -> None:
    resources = template_resources()
    alarmed = {
        r["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and r["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
    }
    dead_letter_targets = {
        node["deadLetterTargetArn"]["Fn::GetAtt"][0]
        for node in walk(resources)
        if isinstance(node, dict) and "deadLetterTargetArn" in node
    }
    assert dead_letter_targets | {"RejectedQueue"} <= alarmed


def test_the_dashboard_is_valid_json_for_every_installation(installation: tuple[str, Deployment]) -> None:
    _, deployment = installation
    body = json.loads(deployment.evaluate(deployment.resources["Dashboard"]["Properties"]["DashboardBody"]))
    assert len(body["widgets"]) >= 5


# ---------------------------------------------------------------------------------------------------
# Packaging of the functions


@pytest.mark.slow  # runs make
@pytest.mark.parametrize("function", [f for f in functions() if not f.is_image], ids=lambda f: f.logical_id)
def test_every_zip_function_is_built_by_the_lambda_makefile_and_uses_the_layer(
    function: Function, tmp_path: Path
) -> None:
    """What `sam build` runs for the function (make build-<id> in the repository root) gives its source."""
    subprocess.run(
        ["make", "--no-print-directory", "-f", "infra/lambda/Makefile", f"build-{function.logical_id}"],
        check=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "ARTIFACTS_DIR": str(tmp_path)},
        capture_output=True,
    )
    module = function.handler.rsplit(".", 1)[0]
    assert (tmp_path / (module.replace(".", "/") + ".py")).is_file()
    assert (tmp_path / "kafscale_iceberg" / "config" / "deployment.py").is_file()
    assert not list(tmp_path.rglob("__pycache__"))
    assert {p.name for p in tmp_path.iterdir()} == {"functions", "kafscale_iceberg"}
    assert function.metadata["BuildMethod"] == "makefile"
    assert function.metadata["WorkingDirectory"] == "."
    assert function.properties["CodeUri"] == "infra/lambda/"
    assert function.properties["Layers"] == [{"Ref": "ControlPlaneDependencies"}]
    assert function.properties["Runtime"] == "python3.12"


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith((" ", "#")):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", line
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


@pytest.mark.parametrize(
    ("requirements", "extras"),
    [
        (LAYER_REQUIREMENTS, {"aws"}),
        (IMAGE_REQUIREMENTS, {"aws", "iceberg"}),
        (RUNNER_REQUIREMENTS, {"aws", "runner", "codec"}),
    ],
)
def test_function_dependencies_are_pinned_within_pyproject(requirements: Path, extras: set[str]) -> None:
    """Every dependency of the core install and the extras is pinned, at a version pyproject allows."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"]]
    declared += [Requirement(r) for extra in sorted(extras) for r in project["optional-dependencies"][extra]]
    pins = _pins(requirements)
    for requirement in declared:
        name = canonicalize_name(requirement.name)
        if name == "kafscale-iceberg":  # an extra naming another (listed in `extras` too)
            continue
        assert name in pins, f"{requirements.name}: {name} is not pinned (make lambda-requirements)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} vs {requirement}"
        )


def test_the_plan_runner_runs_its_own_arm64_image_with_a_warm_numba_cache() -> None:
    (runner,) = [f for f in functions() if f.logical_id == "PlanRunnerFunction"]
    assert runner.is_image
    assert runner.handler == "functions.plan_runner.handler"
    assert runner.properties["Architectures"] == ["arm64"]
    assert runner.metadata["Dockerfile"] == "infra/lambda/runner.Dockerfile"
    dockerfile = (ROOT / "infra" / "lambda" / "runner.Dockerfile").read_text()
    assert "FROM public.ecr.aws/lambda/python:3.12\n" in dockerfile
    assert "infra/lambda/runner/requirements.txt" in dockerfile
    # The cache is filled at build time, for any CPU of the architecture, and checked to exist.
    assert "NUMBA_CACHE_DIR=/opt/numba-cache" in dockerfile
    assert "NUMBA_CPU_NAME=generic" in dockerfile
    assert "python -m kafscale_iceberg.execution.warm_cache" in dockerfile
    assert "!infra/lambda/runner/requirements.txt" in (ROOT / ".dockerignore").read_text().splitlines()


def test_image_functions_run_the_commit_image_with_their_own_handler() -> None:
    images = [f for f in functions() if f.is_image and f.logical_id != "PlanRunnerFunction"]
    assert {f.logical_id for f in images} == {"CommitFunction", "ReplayFunction", "MaintenanceFunction"}
    dockerfile = (ROOT / "infra" / "lambda" / "commit.Dockerfile").read_text()
    assert "FROM public.ecr.aws/lambda/python:3.12\n" in dockerfile
    for folder in ("kafscale_iceberg", "functions"):
        assert f"COPY {folder} ${{LAMBDA_TASK_ROOT}}/{folder}" in dockerfile
    assert "infra/lambda/image/requirements.txt" in dockerfile
    for function in images:
        assert function.metadata["Dockerfile"] == "infra/lambda/commit.Dockerfile"
        assert function.metadata["DockerContext"] == "."
    dockerignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert dockerignore[dockerignore.index("*") :][:1] == ["*"]  # only what is listed is sent
    for needed in ("!kafscale_iceberg/", "!functions/", "!infra/lambda/image/requirements.txt"):
        assert needed in dockerignore


def test_the_maintenance_function_runs_on_its_schedule_with_the_commit_image() -> None:
    """The scheduled pass of `maintain` (compaction, expiry, orphans): the parameter drives the rule."""
    template = load_template()
    function = template["Resources"]["MaintenanceFunction"]["Properties"]
    assert function["ImageConfig"]["Command"] == ["functions.maintenance.handler"]
    (event,) = function["Events"].values()
    assert event["Type"] == "Schedule"
    assert event["Properties"]["Schedule"] == {"Ref": "MaintenanceSchedule"}
    assert template["Parameters"]["MaintenanceSchedule"]["Default"] == "rate(1 hour)"
    assert function["Timeout"] == 900


def test_the_no_commit_alarm_cannot_ask_for_more_than_a_metrics_insights_alarm_evaluates() -> None:
    """A Metrics Insights alarm evaluates at most 3 hours of data: a longer NoCommitAlarmMinutes
    would fail the stack update (EvaluationPeriods x Period)."""
    parameter = load_template()["Parameters"]["NoCommitAlarmMinutes"]
    alarm = load_template()["Resources"]["NoCommitAlarm"]["Properties"]
    (query,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert parameter["MaxValue"] * query["Period"] <= 3 * 3600


def test_every_traced_role_may_read_the_sampling_rules() -> None:
    """A traced state machine (and the X-Ray SDK in the functions) reads the account's sampling rules
    and targets: without `xray:GetSamplingRules` / `GetSamplingTargets` every trace is refused them."""
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    for role in ("RunStateMachineRole", "CommitRole", "RouterRole"):
        for action in ("xray:GetSamplingRules", "xray:GetSamplingTargets", "xray:PutTraceSegments"):
            assert deployment.role_allows(role, action, "*"), (role, action)
