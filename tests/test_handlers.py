"""The Lambda handlers with the event shapes AWS sends (samples in events/), on moto server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from functions import runtime
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.events import WorkItem
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runner_choice import RunnerKind
from kafscale_iceberg.domain.runs import RunCounts
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.services.backoff import TopicBackoff
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from tests.support.config_documents import local_document
from tests.support.iceberg_runs import RunFactory
from tests.support.lambdas import LambdaContext, emf_records, emf_values
from tests.support.moto import MotoEndpoint
from tests.support.plans import sample_plan
from tests.support.segments import put_segment

EVENTS = Path(__file__).resolve().parent.parent / "events"


@dataclass
class Stack:
    s3: Any
    sqs: Any
    bucket: str
    work_url: str
    rejected_url: str
    root: Path
    checkpoints: SqliteCheckpointStore


@pytest.fixture
def stack(moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    s3: Any = moto_server.client("s3")
    sqs: Any = moto_server.client("sqs")
    bucket = moto_server.new_bucket()
    work_url = sqs.create_queue(QueueName=f"{bucket}-work.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    rejected_url = sqs.create_queue(QueueName=f"{bucket}-rejected")["QueueUrl"]
    config = local_document(
        tmp_path,
        moto_server,
        bucket=bucket,
        namespace="production",
        notifications={"work_queue_url": work_url, "rejected_queue_url": rejected_url},
        runs={"location": str(tmp_path / "runs")},
        maintenance={"compaction_min_small_files": 3},
        mappings=[{"topic": "orders", "table": "prod.orders", "create_table_if_missing": True}],
    )
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("KAFSCALE_ICEBERG_CONFIG", str(path))
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "KafScaleIceberg")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto_server.url)
    runtime.assembly.cache_clear()
    yield Stack(
        s3, sqs, bucket, work_url, rejected_url, tmp_path, SqliteCheckpointStore(tmp_path / "offsets.sqlite")
    )
    runtime.assembly.cache_clear()


def _ticket(stack: Stack, run_id: str, *, plan_uri: str = "unused", attempt: int = 0) -> RunTicket:
    grant = stack.checkpoints.claim_lease("orders", owner_id="launcher", run_id=run_id)
    assert isinstance(grant, LeaseGrant)
    return RunTicket(
        topic="orders", run_id=run_id, plan_uri=plan_uri, grant=grant, attempt=attempt, job_id="j"
    )


def _router_event(bucket: str) -> dict[str, Any]:
    event = json.loads((EVENTS / "router_sqs_s3_notifications.json").read_text())
    for record in event["Records"]:
        body = json.loads(record["body"])
        for notification in body.get("Records", []):
            notification["s3"]["bucket"]["name"] = bucket
        record["body"] = json.dumps(body)
    return event


def _drain(stack: Stack, url: str) -> list[dict[str, Any]]:
    messages = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    return list(messages.get("Messages", []))


def test_router_handler_turns_the_sample_notification_into_one_work_item(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    from functions.router import handler

    put_segment(stack.s3, stack.bucket, "production", "orders", 0, 0, 5)
    response = handler(_router_event(stack.bucket), LambdaContext())
    assert response == {"batchItemFailures": []}
    (message,) = _drain(stack, stack.work_url)
    item = WorkItem.model_validate_json(message["Body"])
    assert (item.topic, item.partition, item.last_offset) == ("orders", 0, 4)
    records = emf_records(capsys.readouterr().out)
    assert emf_values(records, "work_items_total") == [({"service": "kafscale-iceberg"}, [1.0])]
    assert emf_values(records, "errors_total") == []


def test_router_handler_returns_an_incomplete_segment_for_redelivery(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    from functions.router import handler

    stack.s3.put_object(
        Bucket=stack.bucket, Key="production/orders/0/segment-00000000000000000000.kfs", Body=b"x" * 64
    )
    event = _router_event(stack.bucket)
    response = handler(event, LambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][1]["messageId"]}]}
    assert _drain(stack, stack.work_url) == []
    records = emf_records(capsys.readouterr().out)
    assert emf_values(records, "notifications_deferred_total") == [({"service": "kafscale-iceberg"}, [1.0])]
    assert emf_values(records, "errors_total") == []


@pytest.mark.slow
def test_router_handler_redelivers_a_kfs_before_its_index_in_seconds_not_the_visibility_timeout(
    stack: Stack,
) -> None:
    """SQS (moto server) delivers the message again once its changed visibility ends: 10 s, not 180 s."""
    from functions.router import INCOMPLETE_RETRY_SECONDS, handler

    events_url = stack.sqs.create_queue(
        QueueName=f"{stack.bucket}-events", Attributes={"VisibilityTimeout": "180"}
    )["QueueUrl"]
    arn = stack.sqs.get_queue_attributes(QueueUrl=events_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    stack.s3.put_object(
        Bucket=stack.bucket, Key="production/orders/0/segment-00000000000000000000.kfs", Body=b"x" * 64
    )
    test_event, record = _router_event(stack.bucket)["Records"]
    stack.sqs.send_message(QueueUrl=events_url, MessageBody=record["body"])
    (received,) = stack.sqs.receive_message(QueueUrl=events_url, AttributeNames=["All"])["Messages"]
    event = {
        "Records": [
            test_event,
            {
                **record,
                "messageId": received["MessageId"],
                "receiptHandle": received["ReceiptHandle"],
                "eventSourceARN": arn,
            },
        ]
    }
    response = handler(event, LambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": received["MessageId"]}]}
    attributes = stack.sqs.get_queue_attributes(QueueUrl=events_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"
    again = stack.sqs.receive_message(
        QueueUrl=events_url, WaitTimeSeconds=INCOMPLETE_RETRY_SECONDS + 2, AttributeNames=["All"]
    )
    (redelivered,) = again["Messages"]
    assert redelivered["MessageId"] == received["MessageId"]


def test_router_handler_parks_a_hopeless_message_with_its_reason(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    from functions.router import handler

    stack.s3.put_object(
        Bucket=stack.bucket, Key="production/orders/0/segment-00000000000000000000.kfs", Body=b"x" * 64
    )
    stack.s3.put_object(
        Bucket=stack.bucket, Key="production/orders/0/segment-00000000000000000000.index", Body=b"IDX"
    )
    response = handler(_router_event(stack.bucket), LambdaContext())
    assert response == {"batchItemFailures": []}
    (rejected,) = _drain(stack, stack.rejected_url)
    assert "END!" in rejected["MessageAttributes"]["reason"]["StringValue"]
    records = emf_records(capsys.readouterr().out)
    assert emf_values(records, "errors_total") == [({"stage": "route", "service": "kafscale-iceberg"}, [1.0])]


def _run_state_machine(stack: Stack, moto_server: MotoEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state machine on moto that succeeds at once, named to the launcher as the runs' machine."""
    sfn: Any = moto_server.client("stepfunctions")
    arn = sfn.create_state_machine(
        name=f"runs-{stack.bucket}",
        definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}',
        roleArn="arn:aws:iam::123456789012:role/steps",
    )["stateMachineArn"]
    monkeypatch.setenv("KAFSCALE_ICEBERG_STATE_MACHINE_ARN", arn)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SFN", moto_server.url)


def test_launcher_handler_counts_the_started_run(
    stack: Stack,
    moto_server: MotoEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from functions.launcher import handler

    _run_state_machine(stack, moto_server, monkeypatch)
    put_segment(stack.s3, stack.bucket, "production", "orders", 0, 0, 5)
    event = json.loads((EVENTS / "launcher_sqs_fifo_work_items.json").read_text())

    assert handler(event, LambdaContext(function_name="launcher")) == {"batchItemFailures": []}
    records = emf_values(emf_records(capsys.readouterr().out), "runs_total")
    assert records == [({"outcome": "started", "service": "kafscale-iceberg"}, [1.0])]
    holder = stack.checkpoints.read_lease_holder("orders")
    assert holder is not None


def _work_item_record(template: dict[str, Any], topic: str, number: int) -> dict[str, Any]:
    """A copy of the sample FIFO record naming `topic` (its message group, as the router sends it)."""
    record = json.loads(json.dumps(template))
    body = json.loads(record["body"])
    body.update(topic=topic, key=f"production/{topic}/0/segment-{number:020d}.kfs")
    record["body"] = json.dumps(body)
    record["messageId"] = f"{topic}-{number}"
    record["attributes"]["MessageGroupId"] = topic
    return record


def test_launcher_handler_fails_a_failed_topics_later_items_and_launches_the_others_once(
    stack: Stack,
    moto_server: MotoEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """FIFO order per topic: a topic whose launch failed (here: not mapped) has all its items reported
    for redelivery and is tried once; the other topic is launched once for its two items."""
    from functions.launcher import handler

    _run_state_machine(stack, moto_server, monkeypatch)
    put_segment(stack.s3, stack.bucket, "production", "orders", 0, 0, 5)
    (template,) = json.loads((EVENTS / "launcher_sqs_fifo_work_items.json").read_text())["Records"]
    records = [
        _work_item_record(template, "ghosts", 0),
        _work_item_record(template, "orders", 0),
        _work_item_record(template, "ghosts", 5),
        _work_item_record(template, "orders", 5),
    ]

    response = handler({"Records": records}, LambdaContext(function_name="launcher"))

    assert response == {"batchItemFailures": [{"itemIdentifier": "ghosts-0"}, {"itemIdentifier": "ghosts-5"}]}
    emitted = emf_records(capsys.readouterr().out)
    assert emf_values(emitted, "errors_total") == [
        ({"stage": "launch", "service": "kafscale-iceberg"}, [1.0])
    ]
    assert emf_values(emitted, "launches_total") == [
        ({"status": "started", "service": "kafscale-iceberg"}, [1.0])
    ]


def test_launcher_handler_reports_every_item_when_every_topic_fails(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch of failed items is answered item by item (redelivered), not by failing the invocation."""
    from functions.launcher import handler

    (template,) = json.loads((EVENTS / "launcher_sqs_fifo_work_items.json").read_text())["Records"]
    records = [_work_item_record(template, "ghosts", 0), _work_item_record(template, "ghosts", 5)]

    response = handler({"Records": records}, LambdaContext(function_name="launcher"))

    assert response == {"batchItemFailures": [{"itemIdentifier": "ghosts-0"}, {"itemIdentifier": "ghosts-5"}]}


def test_abort_handler_emits_the_failure_count_for_alarms(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    from functions.steps import abort

    # A run whose job never started (no EMR application here: a started one would be cancelled).
    ticket = _ticket(stack, "orders-abc-a1", attempt=1).model_copy(update={"job_id": None})
    response = abort({"ticket": ticket.model_dump(mode="json"), "reason": "job failed"}, LambdaContext())

    assert response["topic"] == "orders"
    records = emf_records(capsys.readouterr().out)
    assert emf_values(records, "runs_total") == [
        ({"outcome": "aborted", "service": "kafscale-iceberg"}, [1.0])
    ]
    assert emf_values(records, "consecutive_failures") == [
        ({"topic": "orders", "service": "kafscale-iceberg"}, [2.0])
    ]
    assert emf_values(records, "errors_total") == [({"stage": "job", "service": "kafscale-iceberg"}, [1.0])]
    ((dimensions, (duration,)),) = emf_values(records, "run_duration_seconds")
    assert dimensions == {"outcome": "aborted", "service": "kafscale-iceberg"}
    assert duration >= 0
    assert stack.checkpoints.read_lease_holder("orders") is None


@pytest.mark.parametrize(
    ("error", "killed"),
    [
        ("Sandbox.Timedout", ("timeout", "timed out")),
        ("Runtime.OutOfMemory", ("out_of_memory", "ran out of memory")),
        ("States.TaskFailed", None),  # failed on its own, whatever its text quotes
    ],
)
def test_abort_handler_counts_a_lambda_runner_lambda_killed_from_the_failed_tasks_error_name(
    stack: Stack, capsys: pytest.CaptureFixture[str], error: str, killed: tuple[str, str] | None
) -> None:
    from functions.steps import abort

    plan = sample_plan(result_uri=str(stack.root / "runs" / "orders" / "r" / "result.json"))
    plan_uri = stack.root / "runs" / "orders" / "r" / "plan.json"
    plan_uri.parent.mkdir(parents=True)
    plan_uri.write_text(plan.model_dump_json())
    ticket = _ticket(stack, plan.run_id, plan_uri=str(plan_uri)).model_copy(
        update={"job_id": None, "runner": RunnerKind.LAMBDA}
    )
    # The state machine's abort input: the failure's text and, apart, the failed task's error name.
    reason = "the job or its lease renewal failed: Sandbox.Timedout: Task timed out after 900.00 seconds"
    abort({"ticket": ticket.model_dump(mode="json"), "error": error, "reason": reason}, LambdaContext())

    kills = emf_values(emf_records(capsys.readouterr().out), "lambda_runner_kills_total")
    backoff = TopicBackoff.model_validate_json((stack.root / "runs" / "orders" / "backoff.json").read_text())
    if killed is None:
        assert kills == []
        assert backoff.lambda_kill_reason == ""
    else:
        assert kills == [({"cause": killed[0], "service": "kafscale-iceberg"}, [1.0])]
        assert backoff.lambda_kill_reason == killed[1]  # the topic's next runs go to EMR


def test_commit_handler_emits_the_runs_records_once(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    from functions.commit import handler

    runs = RunFactory(stack.root, table="prod.orders", dead_letter_table="prod.orders__dlq")
    plan = runs.plan({0: (-1, 9), 1: (-1, 4)})
    result = runs.result(plan, dead_letters={0: [3, 4]})
    # The counts the Spark job reports beside its per-partition outcomes.
    result = result.model_copy(update={"counts": RunCounts(written=13, dead_lettered=2, segments_read=2)})
    plan_path = stack.root / "runs" / "orders" / plan.run_id / "plan.json"
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_text(plan.model_dump_json())
    Path(plan.result_uri.removeprefix("file://")).write_text(result.model_dump_json())
    ticket = _ticket(stack, plan.run_id, plan_uri=str(plan_path))

    response = handler({"ticket": ticket.model_dump(mode="json")}, LambdaContext(function_name="commit"))

    assert response["table_committed"] is True
    assert response["offsets"] == {"0": 9, "1": 4}
    recorded = json.loads((stack.root / "runs" / "orders" / "field-ids.json").read_text())
    assert [t["identifier"] for t in recorded["tables"]] == ["prod.orders", "prod.orders__dlq"]
    records = emf_records(capsys.readouterr().out)
    by_result = {d["result"]: v for d, v in emf_values(records, "records_total")}
    assert by_result == {
        "written": [13.0],
        "invalid": [2.0],
        "dropped": [0.0],
        "quarantined": [0.0],
        "overlapped": [0.0],
    }
    assert emf_values(records, "runs_total") == [
        ({"outcome": "committed", "service": "kafscale-iceberg"}, [1.0])
    ]
    last_offsets = {r["partition"]: r["last_offset"] for r in records if "last_offset" in r}
    assert last_offsets == {0: [9.0], 1: [4.0]}

    retry = _ticket(stack, plan.run_id, plan_uri=str(plan_path))
    again = handler({"ticket": retry.model_dump(mode="json")}, LambdaContext(function_name="commit"))
    assert again["table_committed"] is False
    records = emf_records(capsys.readouterr().out)
    assert emf_values(records, "records_total") == []
    assert emf_values(records, "runs_total") == [
        ({"outcome": "already_committed", "service": "kafscale-iceberg"}, [1.0])
    ]


@pytest.mark.slow  # a fresh interpreter
def test_control_plane_functions_import_no_data_plane_libraries() -> None:
    import subprocess
    import sys

    code = (
        "import sys, functions.router, functions.launcher, functions.steps; "
        "from kafscale_iceberg.execution.job_runner import InProcessJobRunner; "
        "InProcessJobRunner().step_request(None, ''); "  # the StartJob step asks the Lambda runner
        "print(sorted(m for m in ('pyarrow', 'pyiceberg', 'pyspark', 'numpy', 'numba') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_reconciler_handler_signals_a_topic_whose_notification_was_lost(
    stack: Stack,
    moto_server: MotoEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from functions.reconciler import handler

    sfn: Any = moto_server.client("stepfunctions")
    machine = sfn.create_state_machine(
        name=f"runs-{stack.bucket}",
        definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}',
        roleArn="arn:aws:iam::123456789012:role/steps",
    )["stateMachineArn"]
    monkeypatch.setenv("KAFSCALE_ICEBERG_STATE_MACHINE_ARN", machine)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STEPFUNCTIONS", moto_server.url)
    put_segment(stack.s3, stack.bucket, "production", "orders", 0, 0, 5)  # no notification arrived
    event = json.loads((EVENTS / "reconciler_schedule.json").read_text())
    response = handler(event, LambdaContext(function_name="reconciler"))
    assert response["topics"]["orders"]["action"] == "signalled"
    (message,) = _drain(stack, stack.work_url)
    assert json.loads(message["Body"])["topic"] == "orders"
    emitted = emf_records(capsys.readouterr().out)
    assert emf_values(emitted, "reconciler_signals_total") == [({"service": "kafscale-iceberg"}, [1.0])]
    assert emf_values(emitted, "reconciler_released_leases_total") == [
        ({"service": "kafscale-iceberg"}, [0.0])
    ]


def test_maintenance_handler_compacts_and_reports_each_table(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    from functions.maintenance import handler

    runs = RunFactory(stack.root, table="prod.orders", dead_letter_table="prod.orders__dlq")
    commits = runtime.assembly().commits
    for start, end in ((-1, 9), (9, 19), (19, 29)):
        plan = runs.plan({0: (start, end)})
        grant = stack.checkpoints.claim_lease("orders", owner_id="launcher", run_id=plan.run_id)
        assert isinstance(grant, LeaseGrant)
        commits.commit_run(plan, runs.result(plan), grant, TablePolicy(create_table_if_missing=True))
    event = json.loads((EVENTS / "maintenance_schedule.json").read_text())

    dry = handler({**event, "dry_run": True}, LambdaContext(function_name="maintenance"))
    response = handler(event, LambdaContext(function_name="maintenance"))

    (dry_table,) = dry["tables"]
    assert (dry_table["table"], dry_table["compaction"]["candidates"]) == ("prod.orders", 3)
    (table,) = response["tables"]
    assert table["compaction"]["committed"] is True
    assert (table["before"]["files"], table["after"]["files"]) == (3, 1)
    records = emf_records(capsys.readouterr().out)
    assert emf_values(records, "maintenance_files_compacted_total")[-1][1] == [3.0]


def test_offset_gaps_and_overlaps_the_commit_step_records_are_in_status(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 12 §6 on the AWS path: the commit Lambda writes the run's gaps and overlapped records into
    its snapshot summary, so `status` shows them per partition whichever path committed."""
    from functions.commit import handler
    from kafscale_iceberg.cli import main
    from kafscale_iceberg.domain.runs import OffsetGap

    runs = RunFactory(stack.root, table="prod.orders", dead_letter_table="prod.orders__dlq")
    plan = runs.plan({0: (-1, 9), 1: (-1, 4)})
    result = runs.result(plan)
    first, second = result.partitions
    result = result.model_copy(
        update={
            "partitions": (
                first.model_copy(update={"gaps": (OffsetGap(first=3, last=4),), "records_overlapped": 2}),
                second,
            )
        }
    )
    plan_path = stack.root / "runs" / "orders" / plan.run_id / "plan.json"
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_text(plan.model_dump_json())
    Path(plan.result_uri.removeprefix("file://")).write_text(result.model_dump_json())
    ticket = _ticket(stack, plan.run_id, plan_uri=str(plan_path))
    assert handler({"ticket": ticket.model_dump(mode="json")}, LambdaContext(function_name="commit"))[
        "table_committed"
    ]
    capsys.readouterr()

    assert main(["status", "--config", str(stack.root / "config.yaml"), "--json"]) == 0
    (topic,) = json.loads(capsys.readouterr().out)["topics"]
    partitions = {p["partition"]: p for p in topic["partitions"]}
    assert partitions[0]["offset_gaps"] == {"missing": 2, "ranges": [[3, 4]]}
    assert partitions[0]["overlapped_records"] == 2
    assert (partitions[1]["offset_gaps"], partitions[1]["overlapped_records"]) == (
        {"missing": 0, "ranges": []},
        0,
    )


def test_the_lambda_runner_runs_a_plan_and_fails_a_failed_run_under_a_name_the_state_machine_aborts(
    stack: Stack, tmp_path: Path
) -> None:
    """functions/plan_runner.py: a succeeded run returns the ticket with its job id; a failed one raises
    `RunNotCommittableError` (not `TransientError`: RunInLambda does not retry it, RunJob's Catch
    aborts the run) naming the failure, its failed result written beside the plan."""
    from functions.plan_runner import handler
    from kafscale_iceberg.exceptions import RunNotCommittableError
    from tests.support.spark_job import SegmentFolder, make_plan, write_plan

    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 10)
    good = make_plan(folder, str(tmp_path / "good"), ranges={0: (-1, 9)})
    ticket = _ticket(stack, good.run_id, plan_uri=write_plan(good))
    response = handler({"ticket": ticket.model_dump(mode="json")}, LambdaContext(function_name="runner"))
    assert response["ticket"]["job_id"] == good.run_id
    assert json.loads(Path(good.result_uri).read_text())["status"] == "succeeded"

    missing = folder.add_orders(1, 0, 5)
    (folder.root / missing.key).unlink()
    bad = make_plan(folder, str(tmp_path / "bad"), ranges={1: (-1, 4)})
    ticket = ticket.model_copy(update={"run_id": bad.run_id, "plan_uri": write_plan(bad)})
    with pytest.raises(RunNotCommittableError, match="segment_unavailable") as raised:
        handler({"ticket": ticket.model_dump(mode="json")}, LambdaContext(function_name="runner"))
    assert not raised.value.transient
    assert json.loads(Path(bad.result_uri).read_text())["status"] == "failed"
