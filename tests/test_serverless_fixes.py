"""Fixes that a first real deployment needs (issue 11, section 1), each checked against what AWS does.

IAM and template rules are evaluated with tests/support/cfn_template.py (CloudFormation's intrinsic
functions, IAM Allow matching); the state machine is read from infra/ as Step Functions would.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from typing import Any

import pytest

import kafscale_iceberg
from functions.runtime import RETRIED_ERROR, step_errors
from kafscale_iceberg.domain.events import TopicSignal, WorkItem, message_group_id
from kafscale_iceberg.exceptions import KafscaleIcebergError, RunNotCommittableError, TransientError
from tests.support.cfn_template import ACCOUNT, REGION, ROOT, Deployment
from tests.test_template import INSTALLATIONS

ASL = ROOT / "infra" / "state_machine.asl.json"


def _execution_arn(deployment: Deployment, name: str) -> str:
    machine = deployment.attribute("RunStateMachine", "Name")
    return f"arn:aws:states:{REGION}:{ACCOUNT}:execution:{machine}:{name}"


# -- 1.1 the launcher describes an execution that already exists ---------------------------------------


def test_the_launcher_may_describe_its_runs_executions() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    assert deployment.role_allows(
        "LauncherRole", "states:DescribeExecution", _execution_arn(deployment, "run-1")
    )
    other = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:SomeoneElses:run-1"
    assert not deployment.role_allows("LauncherRole", "states:DescribeExecution", other)


# -- 1.2 a Glue catalog needs its databases named ------------------------------------------------------


def test_a_glue_stack_without_database_names_is_refused_at_deploy_time() -> None:
    glue_without = Deployment({**INSTALLATIONS["existing-bucket"], "GlueDatabaseNames": ""})
    failed = glue_without.failed_rules()
    assert list(failed) == ["GlueDatabasesNamed"]
    assert "GlueDatabaseNames" in failed["GlueDatabasesNamed"]
    empty_element = Deployment({**INSTALLATIONS["existing-bucket"], "GlueDatabaseNames": "shop,,web"})
    assert list(empty_element.failed_rules()) == ["GlueDatabasesNamed"]
    assert Deployment(INSTALLATIONS["existing-bucket"]).failed_rules() == {}
    assert Deployment(INSTALLATIONS["created-bucket"]).failed_rules() == {}  # REST catalog: not needed


# -- 1.6 the error names the state machine sees ---------------------------------------------------------


def _transient_classes() -> list[type[KafscaleIcebergError]]:
    for module in pkgutil.walk_packages(kafscale_iceberg.__path__, "kafscale_iceberg."):
        if not module.name.startswith(("kafscale_iceberg.local", "kafscale_iceberg.commands")):
            importlib.import_module(module.name)
    found: list[type[KafscaleIcebergError]] = []
    pending: list[type[KafscaleIcebergError]] = [KafscaleIcebergError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.transient:
            found.append(cls)
    return found


def _raising(exc: BaseException) -> Any:
    def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
        raise exc

    return step_errors(handler)


def test_every_transient_error_reaches_the_state_machine_under_a_retried_name() -> None:
    classes = _transient_classes()
    names = {cls.__name__ for cls in classes}
    # The ones the issue found going straight to Abort, among others.
    assert {
        "ConcurrentOffsetUpdateError",
        "CommitOutcomeUnknownError",
        "TableChangedError",
        "CheckpointUnavailableError",
        "JobRunnerUnavailableError",
        "QueueUnavailableError",
    } <= names
    definition = json.loads(ASL.read_text())
    retried = {
        name: {e for retry in state["Retry"] for e in retry["ErrorEquals"]}
        for name, state in _all_states(definition).items()
        if state.get("Resource") == "arn:aws:states:::lambda:invoke" and name != "Abort"
    }
    assert {"StartJob", "Renew", "Commit"} <= set(retried)
    for cls in classes:
        exc = cls.__new__(cls)
        Exception.__init__(exc, "boom")
        with pytest.raises(KafscaleIcebergError) as raised:
            _raising(exc)({}, None)
        assert type(raised.value).__name__ == RETRIED_ERROR, cls
        assert cls is TransientError or str(raised.value) == f"{cls.__name__}: boom"
        for state, names_retried in retried.items():
            assert type(raised.value).__name__ in names_retried, (state, cls)


def test_terminal_errors_keep_their_names_and_reach_the_abort() -> None:
    error = RunNotCommittableError("r1", "the job failed")
    with pytest.raises(RunNotCommittableError):
        _raising(error)({}, None)
    definition = json.loads(ASL.read_text())
    for name in ("StartJob", "Commit"):
        catches = definition["States"][name]["Catch"]
        assert catches[0]["ErrorEquals"] == ["States.ALL"]
    # The Renew step's failures (and the job's) end the Parallel that holds it: caught there.
    catches = definition["States"]["RunJob"]["Catch"]
    assert catches[0]["ErrorEquals"] == ["JobSucceeded"]
    assert catches[0]["Next"] == "Commit"
    assert catches[-1]["ErrorEquals"] == ["States.ALL"]


def _all_states(definition: dict[str, Any]) -> dict[str, Any]:
    """The definition's states, those of Parallel branches included."""
    found: dict[str, Any] = {}
    for name, state in definition["States"].items():
        found[name] = state
        for branch in state.get("Branches", []):
            found |= _all_states(branch)
    return found


# -- 1.3 the lease fits the state machine -------------------------------------------------------------

COLD_START_IN_VPC_S = 60  # a container-image commit function's cold start in a VPC, generously


def _longest_retry_wait(state: dict[str, Any]) -> float:
    waits = [
        retry["IntervalSeconds"] * retry.get("BackoffRate", 2.0) ** (retry["MaxAttempts"] - 1)
        for retry in state.get("Retry", [])
    ]
    return max(waits, default=0.0)


def test_the_deployed_lease_ttl_is_three_times_the_longest_gap_between_renewals() -> None:
    """Each lease-holding step renews when it starts; between two renewals lie at most a step's longest
    retry wait (or the wait before a renewal while startJobRun.sync waits on the job) plus a cold
    start."""
    states = json.loads(ASL.read_text())["States"]
    renewing = states["RunJob"]["Branches"][1]["States"]
    holding = [states["StartJob"], renewing["Renew"], states["Commit"]]
    retry_gaps = [_longest_retry_wait(state) for state in holding]
    watch_gap = renewing["RenewEvery"]["Seconds"] + _longest_retry_wait(renewing["Renew"])
    gap = max([*retry_gaps, watch_gap])
    gap += COLD_START_IN_VPC_S
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    ttl = int(deployment.parameters["LeaseTtlSeconds"])
    assert ttl >= 3 * gap, (ttl, gap)
    from tests.test_template import _function

    for function in (
        "StartJobFunction",
        "WatchFunction",
        "CommitFunction",
        "AbortFunction",
        "LauncherFunction",
    ):
        assert deployment.environment(_function(function))["KAFSCALE_ICEBERG_LEASE_TTL_SECONDS"] == str(ttl)


def test_the_lease_ttl_variable_sets_the_config_key() -> None:
    from kafscale_iceberg.config import apply_deployment_environment
    from tests.test_template import USER_FILES, FixedSecrets, _function

    deployment = Deployment({**INSTALLATIONS["existing-bucket"], "LeaseTtlSeconds": "1200"})
    environ = deployment.environment(_function("CommitFunction"))
    config = apply_deployment_environment(
        USER_FILES["existing-bucket"], environ, source="config.yaml", secrets=FixedSecrets()
    )
    assert config.offsets.lease_ttl_seconds == 1200


# -- 1.7 the abort step cancels the job it abandons ----------------------------------------------------


def test_the_abort_step_may_cancel_job_runs_and_read_the_plan() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    job = f"{deployment.attribute('EmrApplication', 'Arn')}/jobruns/00abc"
    assert deployment.role_allows("AbortRole", "emr-serverless:CancelJobRun", job)
    assert not deployment.role_allows("AbortRole", "emr-serverless:StartJobRun", job)
    runs = deployment.attribute("RunsBucket", "Ref")
    assert deployment.role_allows(
        "AbortRole", "s3:GetObject", f"arn:aws:s3:::{runs}/runs/orders/r1/plan.json"
    )


# -- 1.8 long topic names -------------------------------------------------------------------------------

LONG_TOPIC = "t" * 200 + ".orders-" + "x" * 41  # 249 characters, Kafka's limit


def test_fifo_ids_of_a_249_character_topic_fit_sqs() -> None:
    assert len(LONG_TOPIC) == 249
    signal = TopicSignal(topic=LONG_TOPIC, reason="run committed", nonce="r1")
    message = signal.sqs_message()
    assert len(message["MessageGroupId"]) <= 128
    assert len(message["MessageDeduplicationId"]) <= 128
    other = TopicSignal(topic=LONG_TOPIC, reason="run committed", nonce="r2").sqs_message()
    assert other["MessageDeduplicationId"] != message["MessageDeduplicationId"]  # was truncated away
    assert other["MessageGroupId"] == message["MessageGroupId"] == message_group_id(LONG_TOPIC)
    item = WorkItem(topic=LONG_TOPIC, partition=0, base_offset=0, last_offset=1, key="k" * 300, size=1)
    assert len(item.deduplication_id) <= 128
    assert message_group_id("orders") == "orders"  # short topics keep their readable group


def test_the_state_machine_sends_the_signal_the_abort_step_built() -> None:
    """No FIFO id is built in ASL: the abort's signal copies the fields of `TopicSignal.sqs_message`."""
    parameters = json.loads(ASL.read_text())["States"]["SignalAfterAbort"]["Parameters"]
    for field in ("MessageGroupId", "MessageDeduplicationId", "MessageBody"):
        assert parameters[f"{field}.$"] == f"$.signal.{field}", field


def test_a_committed_run_ends_at_its_commit_step_which_sends_the_signal() -> None:
    """The commit step signals the topic itself (functions/commit.py): no state of its own to pay for,
    and nothing after the commit that could fail the committed run."""
    states = json.loads(ASL.read_text())["States"]
    assert states["Commit"].get("End") is True
    assert not [
        n
        for n, s in states.items()
        if s.get("Resource") == "arn:aws:states:::sqs:sendMessage" and n != "SignalAfterAbort"
    ]


def test_the_commit_step_may_record_the_tables_field_ids_and_nothing_else_in_runs() -> None:
    """Found by `make test-aws`: the commit step writes `{runs.location}/{topic}/field-ids.json`."""
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    runs = deployment.attribute("RunsBucket", "Ref")
    assert deployment.role_allows(
        "CommitRole", "s3:PutObject", f"arn:aws:s3:::{runs}/runs/orders/field-ids.json"
    )
    assert not deployment.role_allows(
        "CommitRole", "s3:PutObject", f"arn:aws:s3:::{runs}/runs/orders/r1/plan.json"
    )


# -- §3 the state machine waits on the job with startJobRun.sync ------------------------------------------


def test_the_state_machine_role_allows_what_start_job_run_sync_needs() -> None:
    """What Step Functions' EMR Serverless integration calls for `startJobRun.sync` (its IAM page): the
    start (same request as the StartJob step, so PassRole and the tags too), reading and cancelling the
    job run, and its managed EventBridge rule. The box checks the calls it makes (tests/test_aws_flow.py);
    the rule's calls never happen in the box."""
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    application = str(deployment.attribute("EmrApplication", "Arn"))
    role = "RunStateMachineRole"
    assert deployment.role_allows(role, "emr-serverless:StartJobRun", application)
    for action in ("GetJobRun", "CancelJobRun", "TagResource"):
        assert deployment.role_allows(role, f"emr-serverless:{action}", f"{application}/jobruns/00abc")
    assert deployment.role_allows(role, "iam:PassRole", str(deployment.attribute("EmrJobRole", "Arn")))
    rule = f"arn:aws:events:{REGION}:{ACCOUNT}:rule/StepFunctionsGetEventsForEMRServerlessJobRule"
    for action in ("PutTargets", "PutRule", "DescribeRule"):
        assert deployment.role_allows(role, f"events:{action}", rule)
    assert not deployment.role_allows(role, "events:PutRule", rule.replace("EMRServerlessJob", "Other"))
    # The step's request is the one the .sync task repeats (same ClientToken: EMR returns that job).
    states = json.loads(ASL.read_text())["States"]
    waiting = states["RunJob"]["Branches"][0]["States"]["WaitOnJob"]["Parameters"]
    assert waiting["ClientToken.$"] == "$.job.ClientToken"
