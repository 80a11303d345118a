"""The reconciler and discovery on real parts: moto server (S3, SQS FIFO, Step Functions), real etcd.

A lost notification (segments in S3, no work item) is recovered by a topic signal the launcher then
plans; a lease whose run's execution ended is released (fenced) and the topic signalled; a running
run, and a KafScale Go processor's lease, are left alone; discovery filters by etcd's metadata
snapshot in `etcd`/`auto` modes as the Go processor does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore
from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, make_s3_client
from kafscale_iceberg.adapters.sqs_queues import SqsWorkQueue
from kafscale_iceberg.adapters.step_functions import StepFunctionsRunStarter, execution_arn
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.events import parse_topic_message
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.exceptions import DiscoveryError
from kafscale_iceberg.services.discovery import TopicDiscovery
from kafscale_iceberg.services.launch import Launcher, LaunchStatus
from kafscale_iceberg.services.reconcile import Action, Reconciler
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

ROLE = "arn:aws:iam::123456789012:role/kafscale-iceberg-steps"
NAMESPACE = "prod"


class World:
    """A bucket, a FIFO work queue, a state machine, etcd, and the reconciler over them."""

    def __init__(self, moto: MotoEndpoint, etcd: EtcdServer, tmp_path: Path, mode: str = "s3") -> None:
        self.s3: Any = moto.client("s3")
        self.sqs: Any = moto.client("sqs")
        self.sfn: Any = moto.client("stepfunctions")
        self.bucket = moto.new_bucket()
        self.queue_url = self.sqs.create_queue(
            QueueName=f"{self.bucket}-work.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"]
        self.machine = self.sfn.create_state_machine(
            name=f"runs-{self.bucket}",
            definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}',
            roleArn=ROLE,
        )["stateMachineArn"]
        self.prefix = f"t-{uuid4().hex[:8]}"
        self.snapshot_key = f"/{self.prefix}/kafscale/metadata/snapshot"
        self.etcd = etcd
        self.checkpoints = EtcdCheckpointStore(
            [etcd.url], key_prefix=self.prefix, metadata_snapshot_key=self.snapshot_key
        )
        self.config = config_from_mapping(
            {
                "s3": {
                    "bucket": self.bucket,
                    "namespace": NAMESPACE,
                    "endpoint": moto.url,
                    "path_style": True,
                },
                "iceberg": {"catalog": {"type": "glue"}, "warehouse": f"file://{tmp_path}/warehouse"},
                "etcd": {"endpoints": [etcd.url]},
                "offsets": {"key_prefix": self.prefix},
                "runs": {"min_bytes_per_run": 0},  # tiny segments: run at once
                "mappings": [
                    {"topic": "orders", "table": "prod.orders"},
                    {"topic": "payments", "table": "prod.pay"},
                ],
            },
            source="test",
        )
        segments = S3SegmentStore(make_s3_client(moto.s3_settings()), self.bucket, NAMESPACE)
        self.discovery = TopicDiscovery(mode, self.config.mapped_topics, segments, self.checkpoints)
        self.starter = StepFunctionsRunStarter(self.sfn, self.machine)
        self.documents = DocumentStore(moto.s3_settings())
        self.reconciler = Reconciler(
            self.checkpoints,
            segments,
            self.discovery,
            SqsWorkQueue(self.sqs, self.queue_url),
            runs=self.starter,
            lease_ttl_seconds=30,
        )
        self.launcher = Launcher(
            self.config,
            self.checkpoints,
            segments,
            self.documents,
            self.starter,
            owner_id="launcher",
            partition_filter=self.discovery.partitions,
        )

    def put(self, topic: str, partition: int, base: int, count: int) -> None:
        put_segment(self.s3, self.bucket, NAMESPACE, topic, partition, base, count)

    def signals(self) -> list[str]:
        response = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
        return [parse_topic_message(m["Body"]).topic for m in response.get("Messages", [])]

    def snapshot(self, partitions: dict[str, list[int]]) -> None:
        topics = [
            {"ErrorCode": 0, "Topic": t, "Partitions": [{"ErrorCode": 0, "Partition": p} for p in ps]}
            for t, ps in partitions.items()
        ]
        self.etcd.raw_client().put(self.snapshot_key, json.dumps({"Topics": topics}).encode())


@pytest.fixture
def world(moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path) -> World:
    return World(moto_server, etcd_server, tmp_path)


def test_a_lost_notification_is_recovered_by_a_topic_signal(world: World) -> None:
    world.put("orders", 0, 0, 10)  # its S3 event never reached the queue
    report = world.reconciler.reconcile()
    (check,) = report.checks
    assert (check.topic, check.action, check.pending_segments) == ("orders", Action.SIGNALLED, 1)
    assert world.signals() == ["orders"]
    outcome = world.launcher.launch("orders")
    assert outcome.status is LaunchStatus.STARTED


def test_committed_topics_are_idle_and_unmapped_topics_are_not_looked_at(world: World) -> None:
    world.put("orders", 0, 0, 10)
    world.put("clicks", 0, 0, 10)  # not mapped
    grant = world.checkpoints.claim_lease("orders", owner_id="x", run_id="r")
    assert isinstance(grant, LeaseGrant)
    world.checkpoints.commit_offsets(grant, {0: OffsetUpdate(9, 0)})
    world.checkpoints.release_lease(grant)
    report = world.reconciler.reconcile()
    assert [(c.topic, c.action) for c in report.checks] == [("orders", Action.IDLE)]
    assert world.signals() == []


def test_a_running_run_keeps_its_lease(world: World) -> None:
    world.put("orders", 0, 0, 10)
    outcome = world.launcher.launch("orders")
    assert outcome.ticket is not None
    (check,) = world.reconciler.reconcile().checks
    assert check.action is Action.BUSY
    assert world.checkpoints.read_lease_holder("orders") is not None


def test_the_lease_of_a_run_whose_steps_ended_is_released_and_the_topic_signalled(world: World) -> None:
    world.put("orders", 0, 0, 10)
    ticket = world.launcher.launch("orders").ticket
    assert ticket is not None
    world.sfn.stop_execution(executionArn=execution_arn(world.machine, ticket.run_id))  # the steps died
    (check,) = world.reconciler.reconcile().checks
    assert check.action is Action.SIGNALLED
    assert check.released_lease_of == ticket.run_id
    assert world.checkpoints.read_lease_holder("orders") is None
    assert world.signals() == ["orders"]
    relaunched = world.launcher.launch("orders")  # the attempt is spent: the next one runs
    assert relaunched.ticket is not None
    assert relaunched.ticket.run_id.endswith("-a1")


def test_a_go_processor_lease_is_left_alone(world: World) -> None:
    world.put("orders", 0, 0, 10)
    key = f"{world.prefix}/leases/orders/0"
    raw = world.etcd.raw_client()
    lease = raw.lease(30)
    raw.put(
        key, json.dumps({"owner_id": "go-processor-0", "lease_expires_at": 0, "generation": 1}), lease=lease
    )
    (check,) = world.reconciler.reconcile().checks
    assert check.action is Action.GO_PROCESSOR
    assert "go-processor-0" in check.detail
    assert world.signals() == []


def test_etcd_discovery_filters_topics_and_partitions_by_the_metadata_snapshot(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    world = World(moto_server, etcd_server, tmp_path, mode="etcd")
    with pytest.raises(DiscoveryError, match="does not exist"):
        world.reconciler.reconcile()  # etcd mode: no snapshot fails the pass, never widens it
    world.put("orders", 0, 0, 10)
    world.put("orders", 1, 0, 10)
    world.put("payments", 0, 0, 10)
    world.snapshot({"orders": [1]})
    report = world.reconciler.reconcile()
    assert report.source == "etcd"
    assert [(c.topic, c.pending_segments) for c in report.checks] == [("orders", 1)]
    ticket = world.launcher.launch("orders").ticket
    assert ticket is not None
    plan = RunPlan.model_validate_json(world.documents.read_text(ticket.plan_uri))
    assert plan.end_offsets() == {1: 9}  # partition 0 is not in the snapshot: left out of the run


def test_auto_discovery_falls_back_to_s3_without_a_snapshot(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    world = World(moto_server, etcd_server, tmp_path, mode="auto")
    world.put("orders", 0, 0, 10)
    world.put("payments", 3, 0, 10)
    report = world.reconciler.reconcile()
    assert report.source == "s3 (fallback: no metadata snapshot)"
    assert sorted(report.signalled) == ["orders", "payments"]
    world.snapshot({"payments": [3]})
    assert world.discovery.discover().topics == ("payments",)
