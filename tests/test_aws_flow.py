"""The AWS flow end to end on emulated services (`make test-aws`): S3 event -> router -> FIFO work
queue -> launcher -> the real state machine -> EMR Serverless job (local Spark) -> commit or abort,
with every AWS call checked against its role in template.yaml.

The box and each of its fakes (Lambda invoke, SQS event source mappings, time, EMR compute, the
catalog, IAM) are described in tests/support/aws_box.py, with what each does not cover.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest

from kafscale_iceberg.domain.events import TopicSignal, message_group_id
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key
from tests.support.aws_box import Box, local_emr_runner, open_box, timed_out
from tests.support.cfn_template import REGION
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import encode_segment, put_segment

pytestmark = [pytest.mark.slow, pytest.mark.aws]

TOPIC = "orders"
TABLE = "shop.orders"


@pytest.fixture
def spark_runner(spark: Any, moto_server: MotoEndpoint) -> Iterator[Any]:
    runner = local_emr_runner(moto_server.url)
    yield runner
    runner.close()


def _box(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    topic: str = TOPIC,
    **options: Any,
) -> Iterator[Box]:
    with open_box(
        moto_url=moto_server.url,
        etcd=etcd_server,
        spark_runner=spark_runner,
        tmp_path=tmp_path,
        monkeypatch=monkeypatch,
        mappings=[{"topic": topic, "table": TABLE, "create_table_if_missing": True}],
        **options,
    ) as box:
        yield box


@pytest.fixture
def box(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Box]:
    yield from _box(moto_server, etcd_server, spark_runner, tmp_path, monkeypatch)


def _assert_iam(box: Box) -> None:
    assert box.recorder.calls, "no AWS call was recorded"
    denied = box.recorder.denied()
    assert denied == [], "\n".join(map(str, denied))


def _statuses(box: Box) -> list[str]:
    return sorted(e["status"] for e in box.executions())


def test_segments_land_exactly_once_and_every_call_is_allowed(box: Box) -> None:
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 5)
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 1, 0, 3)
    box.pump()
    assert len(box.rows(TABLE)) == 8, box.describe()
    assert box.committed_offsets(TOPIC) == {0: 4, 1: 2}
    assert "SUCCEEDED" in _statuses(box)
    # (bench/cost.py prices the transitions of real executions: tests/test_aws_requests.py counts them.)
    # The job was waited on by startJobRun.sync (the state machine's own EMR calls, checked below),
    # and the run started exactly one job.
    assert box.recorder.count("emr-serverless:GetJobRun", "RunStateMachineRole") >= 1
    assert len(box.emr.started) == 1
    # The EMR job's own calls were seen (driver and Python workers) and are checked below.
    assert box.recorder.count("s3:GetObject", "EmrJobRole") >= 2  # the plan, the segments
    assert box.recorder.worker_requests >= 1
    # The template's catalog: the commit's Glue calls and the job's data files in the warehouse bucket.
    assert box.recorder.count("glue:GetTable", "CommitRole") >= 1
    lake = f"arn:aws:s3:::{box.warehouse.removeprefix('s3://').split('/')[0]}/"
    assert any(
        c.role == "EmrJobRole" and c.action == "s3:PutObject" and c.resource.startswith(lake)
        for c in box.recorder.calls
    )
    # A duplicate notification of a committed segment (the same object PUT again) changes nothing.
    key = format_segment_key(box.namespace, TOPIC, 0, 0, SegmentObjectKind.INDEX)
    body = box.s3.get_object(Bucket=box.segment_bucket, Key=key)["Body"].read()
    box.s3.put_object(Bucket=box.segment_bucket, Key=key, Body=body)
    box.pump()
    assert len(box.rows(TABLE)) == 8, box.describe()
    assert "FAILED" not in _statuses(box)
    _assert_iam(box)
    # The launcher described no execution, the steps ran in order, the commit step signalled the topic
    # itself (no state of its own after the commit: the execution ends at Commit).
    assert box.recorder.count("sqs:SendMessage", "CommitRole") >= 1
    assert box.recorder.count("sqs:SendMessage", "RunStateMachineRole") == 0
    assert box.fleet.count("CommitFunction") >= 1


def test_a_failed_emr_job_is_aborted_and_the_next_attempt_commits(box: Box) -> None:
    box.emr.faults.append("FAILED")
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 4)
    box.pump()
    assert len(box.rows(TABLE)) == 4
    assert box.committed_offsets(TOPIC) == {0: 3}
    assert _statuses(box) == ["FAILED", "SUCCEEDED"]  # the aborted run, then its next attempt
    assert box.fleet.count("AbortFunction") == 1
    _assert_iam(box)


def test_a_topic_below_its_minimum_batch_is_launched_when_its_wait_ends(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`runs.min_bytes_per_run` not reached and no more segments coming: the launcher returns the
    topic's work item to the queue for the rest of `max_wait_seconds`, and launches it then."""
    for box in _box(
        moto_server,
        etcd_server,
        spark_runner,
        tmp_path,
        monkeypatch,
        runs={"min_bytes_per_run": "1MiB", "max_wait_seconds": 10},  # routed well within it
    ):
        put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 5)
        box.pump()
        assert len(box.rows(TABLE)) == 5, box.describe()
        assert box.fleet.count("LauncherFunction") >= 2  # waiting, then started
        assert box.recorder.count("sqs:ChangeMessageVisibility", "LauncherRole") >= 1
        assert _statuses(box) == ["SUCCEEDED"]
        _assert_iam(box)


def test_an_index_that_lands_before_its_segment_is_routed_seconds_after_the_segment(box: Box) -> None:
    """The stack is notified of `.index` objects only (the broker uploads both at once): an index
    whose `.kfs` is not there yet is redelivered soon, and routes the segment once it landed."""
    files = encode_segment(0, 0, 3)
    index_key = format_segment_key(box.namespace, TOPIC, 0, 0, SegmentObjectKind.INDEX)
    box.s3.put_object(Bucket=box.segment_bucket, Key=index_key, Body=files.index)
    box.pump(until=lambda: box.recorder.count("sqs:ChangeMessageVisibility", "RouterRole") >= 1, timeout_s=30)
    box.s3.put_object(
        Bucket=box.segment_bucket, Key=format_segment_key(box.namespace, TOPIC, 0, 0), Body=files.kfs
    )
    box.pump()
    assert len(box.rows(TABLE)) == 3
    _assert_iam(box)


def test_a_renew_step_that_times_out_is_retried_and_the_run_commits(box: Box) -> None:
    """The renewal branch's step (WatchFunction) times out once while the job runs (its renewals come
    every 180 s, 1.8 s in the box's time; the job is slow to start, so several come): retried, the
    run commits."""
    box.emr.faults.append("SLOW")
    box.fleet.faults["WatchFunction"] = [timed_out]
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 2)
    box.pump()
    assert len(box.rows(TABLE)) == 2
    assert _statuses(box) == ["SUCCEEDED"]
    assert box.fleet.faults["WatchFunction"] == []  # the fault did fire
    assert any(
        i.function == "WatchFunction" and i.error and "timed out" in i.error for i in box.fleet.invocations
    )
    _assert_iam(box)


def test_a_topic_of_249_characters_lands(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = "t" * 200 + ".orders-" + "x" * 41
    for box in _box(moto_server, etcd_server, spark_runner, tmp_path, monkeypatch, topic=topic):
        put_segment(box.s3, box.segment_bucket, box.namespace, topic, 0, 0, 3)
        box.pump()
        assert len(box.rows(TABLE)) == 3
        assert _statuses(box) == ["SUCCEEDED"]
        _assert_iam(box)


def test_an_execution_that_dies_mid_run_is_recovered_by_the_reconciler(box: Box) -> None:
    """The launcher finds the dead run's execution (ExecutionAlreadyExists -> DescribeExecution, which
    its role must allow), records the spent attempt, and the next attempt commits."""
    box.emr.faults.append("STUCK")
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 3)
    box.pump(until=lambda: box.fleet.count("WatchFunction") >= 2, timeout_s=60)
    (execution,) = box.executions()
    box.sfn.stop_execution(executionArn=execution["executionArn"], error="States.Runtime", cause="steps died")
    box.pump()
    assert box.rows(TABLE) == []
    box.fleet.invoke("ReconcilerFunction", {"source": "aws.events", "detail-type": "Scheduled Event"})
    box.pump()
    assert len(box.rows(TABLE)) == 3, box.describe()
    assert box.committed_offsets(TOPIC) == {0: 2}
    assert "SUCCEEDED" in _statuses(box)
    _assert_iam(box)


@pytest.fixture
def box_with_short_job_timeout(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Box]:
    # runs.timeout_minutes is the job's executionTimeoutMinutes: EMR's minimum, 3 s in the box's time.
    yield from _box(
        moto_server, etcd_server, spark_runner, tmp_path, monkeypatch, runs={"timeout_minutes": 5}
    )


def test_a_job_stuck_past_its_timeout_is_aborted_and_the_next_attempt_commits(
    box_with_short_job_timeout: Box,
) -> None:
    box = box_with_short_job_timeout
    box.emr.faults.append("STUCK")
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 3)
    box.pump()
    assert len(box.rows(TABLE)) == 3, box.describe()
    assert _statuses(box) == ["FAILED", "SUCCEEDED"]
    _assert_iam(box)


def _expire_leases(box: Box) -> None:
    """What a lease TTL running out does in etcd: the lease and its keys are gone (etcd's TTL is wall
    time, so the box revokes the lease instead of waiting the deployed 900 s)."""
    client = box.etcd.raw_client()
    for _, meta in client.get_prefix(f"{box.key_prefix}/leases/"):
        client.revoke_lease(meta.lease_id)


def test_a_commit_that_starts_after_the_lease_lapsed_lands_once(box: Box) -> None:
    """The commit starts after the run's lease lapsed and nobody claimed the topic: it reclaims the
    lease, commits exactly once, and the topic's next signal finds nothing to do."""
    box.fleet.faults["CommitFunction"] = [lambda: _expire_leases(box)]
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 4)
    box.pump()
    assert len(box.rows(TABLE)) == 4, box.describe()
    assert box.committed_offsets(TOPIC) == {0: 3}
    assert _statuses(box) == ["SUCCEEDED"]
    assert box.fleet.count("AbortFunction") == 0
    _assert_iam(box)


def test_a_run_that_loses_its_lease_has_its_still_running_job_cancelled_by_the_abort_step(box: Box) -> None:
    """The state machine started the job (the ticket has no job id): when the run is aborted (here its
    lease is lost while the job runs), the abort step finds the job by the run id (ListJobRuns) and
    cancels it, so it stops costing, whether or not Step Functions cancelled the stopped .sync task
    (the box's does not)."""
    box.emr.faults.append("STUCK")  # RUNNING until its timeout
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 3)
    box.pump(until=lambda: box.fleet.count("WatchFunction") >= 1, timeout_s=60)
    _expire_leases(box)
    box.pump(until=lambda: box.fleet.count("AbortFunction") >= 1, timeout_s=60)
    emr = boto3.client("emr-serverless", endpoint_url=box.moto_url, region_name=REGION)
    stuck = box.emr.started[0]
    (state,) = [  # the session's moto holds every box's application: this box's job, by its id
        run["state"]
        for application in emr.list_applications()["applications"]
        for run in emr.list_job_runs(applicationId=application["id"])["jobRuns"]
        if run["id"] == stuck
    ]
    assert state == "CANCELLED"
    assert box.recorder.count("emr-serverless:CancelJobRun", role="AbortRole") == 1
    assert box.recorder.count("emr-serverless:ListJobRuns", role="AbortRole") >= 1
    _assert_iam(box)


def test_replay_and_reset_offsets_through_the_replay_function(box: Box) -> None:
    """`aws lambda invoke` of the replay function: a replay of a committed range adds nothing; a reset
    from offset 2 deletes rows 2.. and re-ingests them (same rows, offsets back where they were)."""
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 5)
    box.pump()
    before = sorted(r["offset"] for r in box.rows(TABLE))
    assert before == [0, 1, 2, 3, 4]
    replayed = box.fleet.invoke("ReplayFunction", {"topic": TOPIC, "partitions": None, "from_offset": None})
    assert replayed["topic"] == TOPIC
    box.pump()
    assert sorted(r["offset"] for r in box.rows(TABLE)) == before
    reset = box.fleet.invoke(
        "ReplayFunction",
        {"topic": TOPIC, "partitions": [0], "from_offset": 2, "reset_offsets": True, "confirm": TOPIC},
    )
    assert reset["topic"] == TOPIC
    box.pump()
    assert sorted(r["offset"] for r in box.rows(TABLE)) == before, box.describe()
    assert box.committed_offsets(TOPIC) == {0: 4}
    _assert_iam(box)


def test_notifications_out_of_offset_order_land_in_order_exactly_once(box: Box) -> None:
    """A partition's second segment is complete (and notified) while the first still lacks its
    `.index` (so is not notified yet): nothing is planned past the missing index (a run never skips
    offsets), and when it lands both segments commit in offset order, once each."""
    first = encode_segment(0, 0, 3)
    box.s3.put_object(
        Bucket=box.segment_bucket, Key=format_segment_key(box.namespace, TOPIC, 0, 0), Body=first.kfs
    )
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 3, 4)  # offsets 3..6, complete
    box.pump(until=lambda: box.fleet.count("LauncherFunction") >= 1, timeout_s=30)
    assert box.rows(TABLE) == []
    assert box.executions() == []  # the launcher saw the partition blocked on the first segment
    index_key = format_segment_key(box.namespace, TOPIC, 0, 0, SegmentObjectKind.INDEX)
    box.s3.put_object(Bucket=box.segment_bucket, Key=index_key, Body=first.index)
    box.pump()
    assert sorted(r["offset"] for r in box.rows(TABLE)) == list(range(7)), box.describe()
    assert box.committed_offsets(TOPIC) == {0: 6}
    assert "FAILED" not in _statuses(box)
    _assert_iam(box)


def test_a_poison_work_item_goes_to_the_dlq_and_lands_once_when_redriven(box: Box) -> None:
    """The launcher fails on every delivery of a topic's work item (a fault: a broken deployment):
    after the template's `maxReceiveCount` deliveries SQS moves it to the WorkDLQ and nothing is
    launched. With the launcher fixed, the operator's redrive (DLQ -> WorkQueue) lands the topic's
    segments once; a second redrive of the same item (moved again) adds nothing."""
    redrive = box.deployment.evaluate(box.deployment.resources["WorkQueue"]["Properties"]["RedrivePolicy"])
    receives = int(redrive["maxReceiveCount"])

    def broken() -> None:
        raise RuntimeError("ImportModuleError: the launcher's package is broken (fault)")

    box.fleet.faults["LauncherFunction"] = [broken] * (receives + 5)
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 5)
    box.pump(timeout_s=90)
    assert box.fleet.count("LauncherFunction") == receives  # then SQS moved it to the DLQ
    assert box.executions() == []
    box.fleet.faults["LauncherFunction"] = []
    (item,) = box.sqs.receive_message(
        QueueUrl=box.queue_urls["WorkDLQ"], VisibilityTimeout=0, AttributeNames=["All"]
    )["Messages"]
    assert box.redrive("WorkDLQ", "WorkQueue") == 1
    box.pump()
    assert sorted(r["offset"] for r in box.rows(TABLE)) == [0, 1, 2, 3, 4], box.describe()
    assert box.committed_offsets(TOPIC) == {0: 4}
    # The same work item once more (as a redrive of a copy would): the launcher finds nothing pending.
    box.sqs.send_message(
        QueueUrl=box.queue_urls["WorkQueue"],
        MessageBody=item["Body"],
        MessageGroupId=item["Attributes"]["MessageGroupId"],
        MessageDeduplicationId="again",
    )
    box.pump()
    assert sorted(r["offset"] for r in box.rows(TABLE)) == [0, 1, 2, 3, 4]
    assert _statuses(box) == ["SUCCEEDED"]
    _assert_iam(box)


def test_a_large_run_passes_only_references_through_the_state_machine(box: Box) -> None:
    """Step Functions caps a state's input and output at 256 KB (and Lambda a payload at 6 MB, which
    the box enforces on every invoke): the run's plan travels as its S3 URI, so a run of 40 segments
    passes no segment through the state machine, and its largest state payload is a few KB."""
    for partition in range(4):
        for base in range(0, 20, 2):
            put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, partition, base, 2)
    box.pump(timeout_s=240)
    assert len(box.rows(TABLE)) == 80, box.describe()
    assert box.committed_offsets(TOPIC) == dict.fromkeys(range(4), 19)
    largest = 0
    for execution in box.executions():
        for event in box.history(execution["executionArn"]):
            for details in event.values():
                if isinstance(details, dict) and ("input" in details or "output" in details):
                    payload = str(details.get("input", "")) + str(details.get("output", ""))
                    assert ".kfs" not in payload, event["type"]
                    largest = max(largest, len(payload.encode()))
    assert 0 < largest < 16 * 1024, largest
    _assert_iam(box)


@pytest.fixture
def two_topic_box(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Box]:
    with open_box(
        moto_url=moto_server.url,
        etcd=etcd_server,
        spark_runner=spark_runner,
        tmp_path=tmp_path,
        monkeypatch=monkeypatch,
        mappings=[
            {"topic": TOPIC, "table": TABLE, "create_table_if_missing": True},
            {"topic": "payments", "table": "shop.payments", "create_table_if_missing": True},
        ],
        # Longer than any launcher invocation here: a batch must not come back while still in flight.
        visibility_seconds=20,
    ) as box:
        yield box


def test_two_pollers_hold_one_batch_per_topic_and_different_topics_at_once(two_topic_box: Box) -> None:
    """Two launcher pollers at once (Lambda runs several per event source): while one holds a batch
    of a topic (its FIFO group), the other receives the other topic's work but not the first topic's
    newer item, so two launches of one topic never race; everything lands once. The work items are
    sent as the router sends them (`TopicSignal.sqs_message`), so that the first batch holds one
    topic only; the router's own items follow through the ordinary pump."""
    box = two_topic_box
    (work,) = [source for source in box.mappings.sources if source.function == "LauncherFunction"]
    for topic in (TOPIC, "payments"):
        put_segment(box.s3, box.segment_bucket, box.namespace, topic, 0, 0, 3)

    def signal(topic: str) -> None:
        message = TopicSignal(topic=topic, reason="segment", nonce=uuid.uuid4().hex).sqs_message()
        box.sqs.send_message(QueueUrl=box.queue_urls["WorkQueue"], **message)

    def slow() -> None:  # the first launch takes a while: the second poller receives meanwhile
        time.sleep(1.0)

    box.fleet.faults["LauncherFunction"] = [slow]
    signal(TOPIC)
    first = threading.Thread(target=box.mappings.poll_source, args=(work,))
    first.start()
    orders_group, payments_group = message_group_id(TOPIC), message_group_id("payments")
    deadline = time.monotonic() + 10
    while not box.mappings.in_flight[work.queue_url][orders_group] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert box.mappings.in_flight[work.queue_url][orders_group] == 1
    signal(TOPIC)  # a newer item of the topic in flight: SQS must not hand it to the second poller
    signal("payments")
    second = threading.Thread(target=box.mappings.poll_source, args=(work,))
    second.start()
    first.join()
    second.join()
    assert box.mappings.violations == []
    assert (payments_group, orders_group) in box.mappings.overlaps
    assert box.fleet.count("LauncherFunction") == 2
    box.pump(pollers=2, timeout_s=240)  # the rest (the router's items, the newer orders item)
    assert sorted(r["offset"] for r in box.rows(TABLE)) == [0, 1, 2], box.describe()
    assert sorted(r["offset"] for r in box.rows("shop.payments")) == [0, 1, 2]
    assert box.committed_offsets(TOPIC) == {0: 2}
    assert box.committed_offsets("payments") == {0: 2}
    assert box.mappings.violations == []
    assert "FAILED" not in _statuses(box)
    _assert_iam(box)


def test_the_emr_jobs_worker_requests_are_checked_against_its_role() -> None:
    """The recorder attributes requests signed with the job's key to EmrJobRole and maps S3 REST
    requests to IAM actions: a read of the runs bucket's run documents is allowed, a read of another
    bucket and a write of the segment bucket are not (the check can fail)."""
    import io

    from tests.support.aws_box import EMR_JOB_ACCESS_KEY, CallRecorder
    from tests.support.cfn_template import Deployment
    from tests.test_template import INSTALLATIONS

    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    recorder = CallRecorder(deployment, {})
    runs_bucket = deployment.attribute("RunsBucket", "Ref")
    signed = f"AWS4-HMAC-SHA256 Credential={EMR_JOB_ACCESS_KEY}/20261123/eu-west-1/s3/aws4_request, X"

    def request(method: str, path: str, query: str = "", body: bytes = b"") -> None:
        recorder.server_hook(
            {
                "HTTP_AUTHORIZATION": signed,
                "REQUEST_METHOD": method,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_LENGTH": str(len(body)),
                "wsgi.input": io.BytesIO(body),
            }
        )

    request("GET", f"/{runs_bucket}/runs/orders/r-a0/plan.json")
    request("PUT", f"/{runs_bucket}/runs/orders/r-a0/result.json")
    request("GET", f"/{runs_bucket}", "list-type=2&prefix=runs%2Forders%2F")
    assert recorder.denied() == []
    request("GET", "/someone-elses-bucket/secret")
    request(
        "POST", f"/{runs_bucket}", "delete=", b"<Delete><Object><Key>spark/main.py</Key></Object></Delete>"
    )
    recorder.server_hook(
        {"HTTP_AUTHORIZATION": "Credential=OTHER/x/eu-west-1/s3/aws4_request", "PATH_INFO": "/x"}
    )
    assert [(c.action, c.resource) for c in recorder.denied()] == [
        ("s3:DeleteObject", f"arn:aws:s3:::{runs_bucket}/spark/main.py"),
        ("s3:GetObject", "arn:aws:s3:::someone-elses-bucket/secret"),
    ]
    assert recorder.worker_requests == 5


def test_the_box_holds_lambda_to_its_6_mb_payload_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The box's Lambda invoke refuses a request over 6 MB (as Lambda does, before the function runs)
    and reports a response over 6 MB as `Function.ResponseSizeTooLarge`, so a handler whose payload
    grew with the run would fail the flow tests rather than pass them."""
    from botocore.exceptions import ClientError

    from tests.support.aws_box import PAYLOAD_LIMIT, LambdaFleet
    from tests.support.cfn_template import Deployment
    from tests.test_template import INSTALLATIONS

    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    fleet = LambdaFleet(deployment, {})
    watch = str(deployment.attribute("WatchFunction", "Arn"))
    with pytest.raises(ClientError) as refused:
        fleet.invoke_payload(watch, b'{"x": "' + b"a" * PAYLOAD_LIMIT + b'"}')
    assert refused.value.response["Error"]["Code"] == "RequestEntityTooLargeException"
    monkeypatch.setattr(fleet, "invoke", lambda logical_id, event: {"blob": "a" * PAYLOAD_LIMIT})
    answered = fleet.invoke_payload(watch, b"{}")
    assert answered["FunctionError"] == "Unhandled"
    assert answered["Payload"]["errorType"] == "Function.ResponseSizeTooLarge"
    monkeypatch.setattr(fleet, "invoke", lambda logical_id, event: {"small": True})
    assert fleet.invoke_payload(watch, b"{}")["Payload"] == {"small": True}


@pytest.fixture
def routed_box(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Box]:
    """`orders` routed by `store_id` (fixed routes, a default table) and, beside it, by a template."""
    with open_box(
        moto_url=moto_server.url,
        etcd=etcd_server,
        spark_runner=spark_runner,
        tmp_path=tmp_path,
        monkeypatch=monkeypatch,
        mappings=[
            {
                "topic": TOPIC,
                "route": {
                    "field": "store_id",
                    "tables": {"store-0": "shop.orders_s0"},
                    "default_table": TABLE,
                },
                "create_table_if_missing": True,
                "schema": {"columns": [{"name": "order_id", "type": "long"}]},
            },
            {
                "topic": TOPIC,
                "route": {"field": "kind", "table_template": "shop.kind_{value}"},
                "dead_letter_table": "shop.kind__dlq",
            },
        ],
    ) as box:
        yield box


def test_a_routed_topic_lands_once_in_each_table_with_every_call_allowed(routed_box: Box) -> None:
    """Routing on the AWS path: the job splits rows by table, the commit function commits every table
    (the anchor last, a template's tables created in Glue), the replay function resets every table;
    every call is allowed by its role in template.yaml."""
    box = routed_box
    values = [
        json.dumps(
            {"order_id": o, "store_id": f"store-{o % 5}", "kind": ("pizza", "pasta", "Soup")[o % 3]}
        ).encode()
        for o in range(10)
    ]
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 10, values=values)
    box.pump()

    def offsets(table: str) -> list[int]:
        return sorted(r["offset"] for r in box.rows(table))

    def check() -> None:
        assert offsets("shop.orders_s0") == [0, 5], box.describe()
        assert offsets(TABLE) == [1, 2, 3, 4, 6, 7, 8, 9]
        assert offsets("shop.kind_pizza") == [0, 3, 6, 9]
        assert offsets("shop.kind_pasta") == [1, 4, 7]
        # "Soup" is not a table name (lowercase only): a dead letter, never a silent mismatch.
        assert {r["offset"]: r["error_kind"] for r in box.rows("shop.kind__dlq")} == {
            2: "route_invalid",
            5: "route_invalid",
            8: "route_invalid",
        }
        assert box.committed_offsets(TOPIC) == {0: 9}

    check()
    reset = box.fleet.invoke(
        "ReplayFunction",
        {"topic": TOPIC, "partitions": [0], "from_offset": 3, "reset_offsets": True, "confirm": TOPIC},
    )
    assert {"shop.orders_s0", "shop.kind_pizza", "shop.kind_pasta"} <= set(reset["more_tables"])
    box.pump()
    check()
    assert box.recorder.count("glue:CreateTable", "CommitRole") >= 5
    # The maintenance function passes over every table of the topic, a template's found in Glue
    # (shop.orders__dlq never got a row, so it was never created).
    maintained = box.fleet.invoke("MaintenanceFunction", {"topics": [TOPIC], "dry_run": True})
    assert sorted(t["table"] for t in maintained["tables"]) == sorted(
        [TABLE, "shop.orders_s0", "shop.kind_pizza", "shop.kind_pasta", "shop.kind__dlq"]
    )
    _assert_iam(box)


def test_a_commit_step_failing_between_two_tables_is_retried_and_lands_once(
    routed_box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit function fails right after a table before the anchor landed (a transient catalog
    error): the state machine retries the commit step, which finds that table COMMITTED, skips it and
    commits the rest - every record once, offsets after the anchor."""
    from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
    from kafscale_iceberg.exceptions import CatalogUnavailableError

    real_commit = IcebergTableCommitter.commit
    failed: list[str] = []

    def commit_then_fail_once(self: IcebergTableCommitter, expected: Any, commit: Any) -> Any:
        after = real_commit(self, expected, commit)
        if expected.table == "shop.orders_s0" and not failed:
            failed.append(expected.table)
            raise CatalogUnavailableError("glue", "commit to 'shop.orders_s0'", "connection reset (fault)")
        return after

    monkeypatch.setattr(IcebergTableCommitter, "commit", commit_then_fail_once)
    box = routed_box
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 10)
    box.pump()
    assert failed == ["shop.orders_s0"]
    assert box.fleet.count("CommitFunction") >= 2  # the retry
    assert sorted(r["offset"] for r in box.rows("shop.orders_s0")) == [0, 5], box.describe()
    assert sorted(r["offset"] for r in box.rows(TABLE)) == [1, 2, 3, 4, 6, 7, 8, 9]
    assert box.committed_offsets(TOPIC) == {0: 9}
    assert _statuses(box) == ["SUCCEEDED"]
    _assert_iam(box)


def test_a_signal_after_commit_that_cannot_be_sent_leaves_the_run_committed(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit step sends its topic's signal itself (the execution ends at Commit): SQS failing that
    send (a fault) leaves the run committed and the execution SUCCEEDED, with nothing retried or
    aborted; the next segment lands once after it."""
    from kafscale_iceberg.adapters.sqs_queues import SqsWorkQueue
    from kafscale_iceberg.exceptions import QueueUnavailableError

    real_send = SqsWorkQueue.send_signal
    refused: list[str] = []

    def refuse_once(self: SqsWorkQueue, signal: Any) -> None:
        if refused:
            return real_send(self, signal)
        refused.append(signal.nonce)
        raise QueueUnavailableError(f"{self.queue_url}: sending work items failed: throttled (fault)")

    monkeypatch.setattr(SqsWorkQueue, "send_signal", refuse_once)
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 5)
    box.pump()
    assert len(refused) == 1, refused
    assert box.fleet.count("CommitFunction") == 1  # not retried: the send's failure is not the step's
    assert len(box.rows(TABLE)) == 5, box.describe()
    assert box.committed_offsets(TOPIC) == {0: 4}
    assert _statuses(box) == ["SUCCEEDED"]
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 5, 3)
    box.pump()
    assert sorted(r["offset"] for r in box.rows(TABLE)) == list(range(8)), box.describe()
    assert box.committed_offsets(TOPIC) == {0: 7}
    _assert_iam(box)


def test_strict_schema_mode_refuses_a_column_no_record_fills_at_the_commit_step(
    box: Box, tmp_path: Path
) -> None:
    """Issue 35 on AWS: the commit step decides as `run` does (the same `CommitService`): under
    `schema.mode: strict` a mapping column no record carries refuses the run before its commit, naming
    the column and the field the records carry; the abort step takes it as rejected data."""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{TOPIC}.json").write_text('{"type": "object"}')
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(schemas))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        box.rewrite_config(
            schema={
                "mode": "strict",
                "registry": {"base_url": f"http://127.0.0.1:{server.server_address[1]}"},
            },
            mappings=[
                {
                    "topic": TOPIC,
                    "table": TABLE,
                    "create_table_if_missing": True,
                    "schema": {
                        "columns": [
                            {"name": "order_id", "type": "long", "required": True},
                            {"name": "store", "type": "string"},  # the records carry `store_id`
                        ]
                    },
                }
            ],
        )
        put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 4)
        box.pump(until=lambda: box.fleet.count("AbortFunction") >= 1)
    finally:
        server.shutdown()
        server.server_close()
    assert box.rows(TABLE) == []
    assert box.committed_offsets(TOPIC) == {}
    failed = [e for e in box.executions() if e["status"] == "FAILED"]
    assert failed, box.describe()
    details = json.dumps([box.history(e["executionArn"]) for e in failed], default=str)
    assert "UnfilledColumnError" in details, details
    assert "they carry `store_id`" in details, details
    _assert_iam(box)
