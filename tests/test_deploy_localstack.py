"""End to end through the wiring template.yaml declares: a segment PUT -> the segment events queue (S3
notification of a stack-created bucket, or KafScale's bucket through the EventBridge rule) -> the router
handler with the router's environment from the template -> one work item on the FIFO work queue.

The queues, the notification filter, the EventBridge pattern and the queue policy are built from the
template's own properties. It runs against moto server always, and against LocalStack when an endpoint
answers (`LOCALSTACK_ENDPOINT`, default http://localhost:4566); LocalStack needs Docker, so without it
that variant skips and says so.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import boto3
import pytest

from functions import runtime
from kafscale_iceberg.domain.events import WorkItem
from tests.support.cfn_template import Deployment, functions
from tests.support.lambdas import LambdaContext
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

REGION = "us-east-1"
NAMESPACE = "production"
EVENTS = Path(__file__).resolve().parent.parent / "events"
LOCALSTACK_DEFAULT = "http://localhost:4566"


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


def localstack_or_skip() -> Backend:
    endpoint = os.environ.get("LOCALSTACK_ENDPOINT", LOCALSTACK_DEFAULT).rstrip("/")
    try:
        with urllib.request.urlopen(f"{endpoint}/_localstack/health", timeout=3) as response:
            health = json.loads(response.read())
    except (OSError, ValueError) as exc:
        pytest.skip(
            f"no LocalStack answers at {endpoint} ({exc}); it needs Docker: start it and set "
            "LOCALSTACK_ENDPOINT to run this variant (the moto variant ran)"
        )
    services = health.get("services", {})
    missing = [s for s in ("s3", "sqs", "events") if services.get(s) not in {"available", "running"}]
    if missing:
        pytest.skip(f"LocalStack at {endpoint} does not offer {', '.join(missing)}: {services}")
    return Backend("localstack", endpoint)


@pytest.fixture(params=["moto", "localstack"])
def backend(request: pytest.FixtureRequest, moto_server: MotoEndpoint) -> Backend:
    if request.param == "moto":
        return Backend("moto", moto_server.url)
    return localstack_or_skip()


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
