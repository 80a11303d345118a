"""End to end through the wiring template.yaml declares, on moto server and on LocalStack community.

A segment PUT -> the segment events queue (S3 notification of a stack-created bucket, or KafScale's
bucket through the EventBridge rule) -> the router handler with the router's environment from the
template -> one work item on the FIFO work queue. Then, on LocalStack only (the AWS box runs the same
definition on moto's interpreter with the real handlers), the run state machine as CloudFormation
hands it to Step Functions (`DefinitionSubstitutions` applied, the deployed work queue's URL in it) is
created and executed by LocalStack's own ASL interpreter, both runners' paths, its SQS tasks sending
to the deployed FIFO work queue for real.

The queues, the notification filter, the EventBridge pattern, the queue policy and the state machine
are built from the template's own properties, through the services' APIs (not CloudFormation: the
template is SAM, and most of its resources are ones LocalStack community cannot run). LocalStack runs
in host mode, started once per session (`tests/support/localstack.py`; `make test` builds its Python
3.13 venv). What LocalStack community cannot do, so what this does not cover: Lambda (it needs
Docker: the router runs in this process, and the state machine's Lambda tasks are LocalStack's mocked
service integrations, answering what the steps answer), EMR Serverless and Glue (paid plan), the
`emr-serverless:startJobRun.sync` integration (LocalStack's Step Functions offers only the callback
pattern for EMR Serverless and fails the state with `States.Runtime`, mocked or not: the EMR branch
runs in the AWS box only), mocking an error in the `States.` namespace (a failed job's
`States.TaskFailed`), and IAM enforcement (tests/support/aws_box.py checks every call against the
template's roles).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import boto3
import pytest

from functions import runtime
from kafscale_iceberg.domain.events import TopicSignal, WorkItem
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runner_choice import RunnerKind
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.domain.tickets import RunTicket
from tests.support.aws_box import substituted_definition
from tests.support.cfn_template import Deployment, functions
from tests.support.lambdas import LambdaContext
from tests.support.localstack import LocalStack
from tests.support.moto import MotoEndpoint
from tests.support.plans import sample_plan_fields
from tests.support.segments import put_segment

REGION = "us-east-1"
NAMESPACE = "production"
EVENTS = Path(__file__).resolve().parent.parent / "events"


@dataclass(frozen=True)
class Backend:
    name: str
    url: str

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )


@pytest.fixture(params=["moto", pytest.param("localstack", marks=pytest.mark.slow)])
def backend(request: pytest.FixtureRequest, moto_server: MotoEndpoint) -> Backend:
    if request.param == "moto":
        return Backend("moto", moto_server.url)
    localstack: LocalStack = request.getfixturevalue("localstack")
    return Backend("localstack", localstack.url)


@dataclass
class DeployedQueues:
    events_url: str
    work_url: str
    rejected_url: str
    arns: dict[str, str]


class TemplateWiring:
    """The template's segment-event path, created on a backend with the template's properties."""

    def __init__(self, backend: Backend, parameters: dict[str, str]) -> None:
        self.backend = backend
        self.s3 = backend.client("s3")
        self.sqs = backend.client("sqs")
        self.events = backend.client("events")
        self.prefix = f"t{uuid4().hex[:10]}"
        self.bucket = f"{self.prefix}-kafscale-data"
        self.deployment = Deployment(
            {
                "ConfigLocation": f"s3://{self.bucket}-config/config.yaml",
                "SegmentBucketName": self.bucket,
                "Namespace": NAMESPACE,
                "SubnetIds": "subnet-0a",
                "SecurityGroupIds": "sg-0c",
                "WarehouseBucket": "kafscale-lake",
                "GlueDatabaseNames": "shop",
                **parameters,
            }
        )
        self.real: dict[str, str] = {}  # the deployment's made-up values -> what the backend gave

    def resolved(self, node: Any) -> Any:
        """A template node evaluated, with made-up resource values replaced by the backend's."""
        text = json.dumps(self.deployment.evaluate(node))
        for made_up, real in sorted(self.real.items(), key=lambda item: -len(item[0])):
            text = text.replace(made_up, real)
        return json.loads(text)

    def create_queue(self, logical_id: str) -> str:
        properties = self.resolved(self.deployment.resources[logical_id]["Properties"])
        attributes = {
            key: str(value).lower() if isinstance(value, bool) else str(value)
            for key, value in properties.items()
            if key != "RedrivePolicy"
        }
        if "RedrivePolicy" in properties:
            attributes["RedrivePolicy"] = json.dumps(properties["RedrivePolicy"])
        if self.backend.name == "moto":
            attributes.pop("SqsManagedSseEnabled", None)  # moto 5.2 rejects the attribute
        name = f"{self.prefix}-{logical_id}" + (".fifo" if properties.get("FifoQueue") else "")
        url: str = self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        self.real[self.deployment.attribute(logical_id, "Ref")] = url
        self.real[self.deployment.attribute(logical_id, "Arn")] = arn
        return url

    def deploy_queues(self) -> DeployedQueues:
        # Dead-letter queues first: the others' redrive policies name them.
        for dlq in ("SegmentEventsDLQ", "WorkDLQ"):
            self.create_queue(dlq)
        events_url = self.create_queue("SegmentEventsQueue")
        work_url = self.create_queue("WorkQueue")
        rejected_url = self.create_queue("RejectedQueue")
        return DeployedQueues(events_url, work_url, rejected_url, dict(self.real))

    def deploy_segment_events(self, queues: DeployedQueues) -> None:
        self.s3.create_bucket(Bucket=self.bucket)
        if self.deployment.exists("SegmentBucket"):
            bucket = self.resolved(self.deployment.resources["SegmentBucket"]["Properties"])
            self.set_queue_policy("SegmentEventsQueuePolicy", queues.events_url)
            # CloudFormation's shape of the notification, in the S3 API's.
            queues_config = [
                {
                    "QueueArn": c["Queue"],
                    "Events": [c["Event"]],
                    "Filter": {"Key": {"FilterRules": c["Filter"]["S3Key"]["Rules"]}},
                }
                for c in bucket["NotificationConfiguration"]["QueueConfigurations"]
            ]
            self.s3.put_bucket_notification_configuration(
                Bucket=self.bucket, NotificationConfiguration={"QueueConfigurations": queues_config}
            )
        else:
            rule = self.resolved(self.deployment.resources["SegmentCreatedRule"]["Properties"])
            self.s3.put_bucket_notification_configuration(
                Bucket=self.bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )
            name = f"{self.prefix}-segment-created"
            arn = self.events.put_rule(Name=name, EventPattern=json.dumps(rule["EventPattern"]))["RuleArn"]
            self.real[self.deployment.attribute("SegmentCreatedRule", "Arn")] = arn
            targets = [{"Id": t["Id"], "Arn": t["Arn"]} for t in rule["Targets"]]
            self.events.put_targets(Rule=name, Targets=targets)
            self.set_queue_policy("SegmentEventsQueuePolicy", queues.events_url)

    def set_queue_policy(self, logical_id: str, queue_url: str) -> None:
        policy = self.resolved(self.deployment.resources[logical_id]["Properties"]["PolicyDocument"])
        self.sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"Policy": json.dumps(policy)})

    def router_environment(self, queues: DeployedQueues, config_uri: str) -> dict[str, str]:
        router = next(f for f in functions() if f.logical_id == "RouterFunction")
        env = self.deployment.environment(router)
        return {name: self.real.get(value, value) for name, value in env.items()} | {
            "KAFSCALE_ICEBERG_CONFIG": config_uri
        }


def receive_all(sqs: Any, url: str, *, expect: int, wait_s: float = 10.0) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        batch = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["All"]
        ).get("Messages", [])
        messages += batch
        if len(messages) >= expect and not batch:
            break
    return messages


@pytest.fixture
def clean_assembly() -> Iterator[None]:
    runtime.assembly.cache_clear()
    yield
    runtime.assembly.cache_clear()


@pytest.mark.usefixtures("clean_assembly")
@pytest.mark.parametrize("mode", ["create", "existing"])
def test_a_segment_put_becomes_one_work_item_through_the_template_wiring(
    backend: Backend, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    wiring = TemplateWiring(backend, {"SegmentBucketMode": mode})
    queues = wiring.deploy_queues()
    wiring.deploy_segment_events(queues)

    # The user's config file, in S3 like in AWS; the stack's variables complete it.
    config_bucket = f"{wiring.bucket}-config"
    wiring.s3.create_bucket(Bucket=config_bucket)
    config = {
        "s3": {"bucket": "set-by-the-stack", "endpoint": backend.url, "path_style": True, "region": REGION},
        "iceberg": {"catalog": {"type": "glue"}, "warehouse": "s3://kafscale-lake/warehouse"},
        "etcd": {"endpoints": ["https://etcd.internal:2379"]},
        "mappings": [{"topic": "orders", "table": "shop.orders"}],
    }
    wiring.s3.put_object(Bucket=config_bucket, Key="config.yaml", Body=json.dumps(config).encode())

    # A broker writes a segment (.kfs then .index); other objects must not reach the queue.
    put_segment(wiring.s3, wiring.bucket, NAMESPACE, "orders", 0, 0, 5)
    wiring.s3.put_object(
        Bucket=wiring.bucket, Key="elsewhere/orders/0/segment-00000000000000000000.kfs", Body=b"x"
    )
    wiring.s3.put_object(Bucket=wiring.bucket, Key=f"{NAMESPACE}/orders/0/notes.txt", Body=b"x")

    delivered = [
        m for m in receive_all(wiring.sqs, queues.events_url, expect=1) if "s3:TestEvent" not in m["Body"]
    ]
    assert len(delivered) == 1, [m["Body"][:200] for m in delivered]

    env = wiring.router_environment(queues, f"s3://{config_bucket}/config.yaml")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name, value in {
        "AWS_ENDPOINT_URL": backend.url,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": REGION,
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    from functions.router import handler

    template_event = json.loads((EVENTS / "router_sqs_s3_notifications.json").read_text())["Records"][0]
    record = {
        **template_event,
        "messageId": delivered[0]["MessageId"],
        "receiptHandle": delivered[0]["ReceiptHandle"],
        "body": delivered[0]["Body"],
        "eventSourceARN": queues.arns[wiring.deployment.attribute("SegmentEventsQueue", "Arn")],
    }
    response = handler({"Records": [record]}, LambdaContext())

    assert response == {"batchItemFailures": []}
    (work_item,) = receive_all(wiring.sqs, queues.work_url, expect=1)
    assert work_item["Attributes"]["MessageGroupId"] == "orders"
    item = WorkItem.model_validate_json(work_item["Body"])
    assert (item.topic, item.partition, item.base_offset, item.last_offset) == ("orders", 0, 0, 4)


# ---------------------------------------------------------------------------------------------------
# The run state machine on LocalStack's Step Functions


class DeployedRuns:
    """The run state machine as deployed on LocalStack, beside the template's queues; its Lambda
    (and EMR) tasks answered by Step Functions' mocked service integrations, one test case a run."""

    def __init__(self, localstack: LocalStack) -> None:
        self.localstack = localstack
        self.wiring = TemplateWiring(Backend("localstack", localstack.url), {})
        self.queues = self.wiring.deploy_queues()
        self.sfn = self.wiring.backend.client("stepfunctions")
        definition = substituted_definition(self.wiring.deployment)
        for made_up, real in self.wiring.real.items():
            definition = definition.replace(made_up, real)
        assert self.queues.work_url in definition  # SignalAfterAbort sends to the deployed queue
        self.name = f"{self.wiring.prefix}-runs"
        self.arn: str = self.sfn.create_state_machine(
            name=self.name,
            definition=definition,
            roleArn=self.wiring.deployment.attribute("RunStateMachineRole", "Arn"),
            type=self.wiring.deployment.resources["RunStateMachine"]["Properties"]["Type"],
        )["stateMachineArn"]

    def function_arn(self, logical_id: str) -> str:
        arn: str = self.wiring.deployment.attribute(logical_id, "Arn")
        return arn

    def run(self, ticket: RunTicket, mocked: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
        """Execute the run of `ticket` with these states' answers (state name -> `Return`/`Throw`);
        returns the finished execution and its history."""
        case = f"run{uuid4().hex[:8]}"
        self.localstack.mock_step_functions(
            {
                "StateMachines": {self.name: {"TestCases": {case: {s: f"{case}-{s}" for s in mocked}}}},
                "MockedResponses": {f"{case}-{s}": {"0": answer} for s, answer in mocked.items()},
            }
        )
        execution = self.sfn.start_execution(
            stateMachineArn=f"{self.arn}#{case}",
            name=ticket.run_id,
            input=json.dumps({"ticket": ticket.model_dump(mode="json")}),
        )["executionArn"]
        deadline = time.monotonic() + 60
        while (described := self.sfn.describe_execution(executionArn=execution))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "the execution did not end within 60 s"
            time.sleep(0.2)
        events = self.sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
        return described, events


def _invoked(payload: dict[str, Any]) -> dict[str, Any]:
    """What `lambda:invoke` returns when the function returned `payload`."""
    return {"Return": {"StatusCode": 200, "ExecutedVersion": "$LATEST", "Payload": payload}}


def _entered(events: list[Any]) -> list[str]:
    return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]


def _scheduled(events: list[Any], resource_type: str, resource: str) -> list[dict[str, Any]]:
    return [
        json.loads(e["taskScheduledEventDetails"]["parameters"])
        for e in events
        if e["type"] == "TaskScheduled"
        and (e["taskScheduledEventDetails"]["resourceType"], e["taskScheduledEventDetails"]["resource"])
        == (resource_type, resource)
    ]


def _ticket(runner: RunnerKind) -> RunTicket:
    plan = RunPlan.model_validate(sample_plan_fields())
    grant = LeaseGrant(
        topic=plan.topic,
        owner_id="launcher",
        run_id=plan.run_id,
        token=1,
        lease_id=7,
        ttl_seconds=900,
        claimed_at_ms=1,
    )
    return RunTicket(
        topic=plan.topic,
        run_id=plan.run_id,
        plan_uri="s3://runs/orders/r/plan.json",
        grant=grant,
        runner=runner,
    )


@pytest.fixture
def deployed_runs(localstack: LocalStack) -> DeployedRuns:
    return DeployedRuns(localstack)


@pytest.mark.slow
def test_a_lambda_run_goes_to_the_runner_function_then_ends_at_its_commit(
    deployed_runs: DeployedRuns,
) -> None:
    """The commit step (mocked here) signals the topic itself; the state machine sends nothing after
    it (the AWS box runs the real commit function and sees its signal)."""
    ticket = _ticket(RunnerKind.LAMBDA)
    execution, events = deployed_runs.run(
        ticket,
        {
            "StartJob": _invoked({"ticket": ticket.model_dump(mode="json"), "job": {}}),
            "RunInLambda": _invoked({"run_id": ticket.run_id}),
            "Commit": _invoked({"topic": ticket.topic, "table_committed": True, "signalled": True}),
        },
    )

    assert execution["status"] == "SUCCEEDED", events[-3:]
    entered = _entered(events)
    assert "WaitOnJob" not in entered
    assert [s for s in entered if s in {"StartJob", "RunInLambda", "Commit"}] == [
        "StartJob",
        "RunInLambda",
        "Commit",
    ]
    assert entered[-1] == "Commit"
    (runner_call,) = [
        p
        for p in _scheduled(events, "lambda", "invoke")
        if p["FunctionName"] == deployed_runs.function_arn("PlanRunnerFunction")
    ]
    assert runner_call["Payload"] == {"ticket": ticket.model_dump(mode="json")}
    assert not _scheduled(events, "sqs", "sendMessage")


@pytest.mark.slow
def test_a_runner_killed_at_its_timeout_is_aborted_and_its_topic_resignalled_after_the_backoff(
    deployed_runs: DeployedRuns,
) -> None:
    """RunInLambda has no Catch: Lambda's error for a killed invocation fails the branch, RunJob's
    Catch describes it and the abort step records it; its re-signal goes out after the backoff."""
    ticket = _ticket(RunnerKind.LAMBDA)
    retry = TopicSignal(topic=ticket.topic, reason="retry after a failed run", nonce="n1").sqs_message()
    execution, events = deployed_runs.run(
        ticket,
        {
            "StartJob": _invoked({"ticket": ticket.model_dump(mode="json"), "job": {}}),
            "RunInLambda": {
                "Throw": {"Error": "Sandbox.Timedout", "Cause": "Task timed out after 900.00 seconds"}
            },
            "Abort": _invoked(
                {"topic": ticket.topic, "resignal_after_seconds": 1, "alarm": False, "signal": retry}
            ),
        },
    )

    assert (execution["status"], execution.get("error")) == ("FAILED", "RunAborted"), events[-3:]
    entered = _entered(events)
    assert "Commit" not in entered
    assert [s for s in entered if s in {"RunInLambda", "Abort", "Backoff", "SignalAfterAbort"}] == [
        "RunInLambda",
        "Abort",
        "Backoff",
        "SignalAfterAbort",
    ]
    (aborting,) = [
        p
        for p in _scheduled(events, "lambda", "invoke")
        if p["FunctionName"] == deployed_runs.function_arn("AbortFunction")
    ]
    assert aborting["Payload"] == {
        "ticket": ticket.model_dump(mode="json"),
        "error": "Sandbox.Timedout",  # the failed task's error name: what tells a kill (killed_by)
        "reason": "the job or its lease renewal failed: Sandbox.Timedout: "
        "Task timed out after 900.00 seconds",
    }
    (sent,) = receive_all(deployed_runs.wiring.sqs, deployed_runs.queues.work_url, expect=1, wait_s=5)
    assert sent["Attributes"]["MessageDeduplicationId"] == retry["MessageDeduplicationId"]
    assert TopicSignal.model_validate_json(sent["Body"]).reason == "retry after a failed run"
