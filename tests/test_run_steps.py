"""Watching a running job (lease renewal, cancellation on loss) and aborting a failed run.

EMR Serverless job states come from botocore's Stubber: moto's job runs finish at once."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.emr_serverless import EmrServerlessJobRunner
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.config import EmrServerlessRunnerConfig, RunsConfig
from kafscale_iceberg.domain.jobs import JobState
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.tickets import OUTCOME_NAME, FailedAttempt, RunTicket, run_document_uri
from kafscale_iceberg.exceptions import LeaseLostError
from kafscale_iceberg.services.backoff import BackoffRecords, TopicBackoff
from kafscale_iceberg.services.run_steps import RunSteps, failure_reason
from tests.support.plans import sample_plan

ROLE = "arn:aws:iam::123456789012:role/job"


class Steps:
    def __init__(self, tmp_path: Path) -> None:
        self.now_ms = 1_000_000
        self.checkpoints = SqliteCheckpointStore(
            tmp_path / "o.sqlite", lease_ttl_seconds=30, now_ms=lambda: self.now_ms
        )
        client = boto3.client("emr-serverless", region_name="us-east-1")
        self.stubber = Stubber(client)
        settings = EmrServerlessRunnerConfig(
            application_id="00abc", execution_role_arn=ROLE, entry_point="s3://a/main.py", image="x"
        )
        runner = EmrServerlessJobRunner(settings, client, timeout_minutes=5)
        self.runs = RunsConfig(location=str(tmp_path / "runs"), max_consecutive_failures=2)
        self.documents = DocumentStore()
        self.steps = RunSteps(self.runs, self.checkpoints, runner, self.documents, clock=lambda: 5.0)

    def ticket(self, attempt: int = 0) -> RunTicket:
        grant = self.checkpoints.claim_lease("orders", owner_id="launcher", run_id="r1")
        assert isinstance(grant, LeaseGrant)
        return RunTicket(
            topic="orders",
            run_id="r1",
            plan_uri="p",
            job_id="j",
            grant=grant,
            attempt=attempt,
        )

    def job_state(self, state: str) -> None:
        now = datetime(2026, 11, 20, tzinfo=UTC)
        job = {
            "applicationId": "00abc",
            "jobRunId": "j",
            "arn": "arn:aws:emr-serverless:us-east-1:123456789012:/applications/00abc/jobruns/j",
            "createdBy": "arn:aws:iam::123456789012:user/me",
            "createdAt": now,
            "updatedAt": now,
            "executionRole": ROLE,
            "state": state,
            "stateDetails": "Job failed: OOM" if state == "FAILED" else "running",
            "releaseLabel": "emr-spark-8.0.0",
            "jobDriver": {"sparkSubmit": {"entryPoint": "s3://a/main.py"}},
        }
        self.stubber.add_response("get_job_run", {"jobRun": job})

    def cancel_accepted(self, times: int = 1) -> None:
        for _ in range(times):
            self.stubber.add_response(
                "cancel_job_run",
                {"applicationId": "00abc", "jobRunId": "j"},
                {"applicationId": "00abc", "jobRunId": "j"},
            )


@pytest.fixture
def steps(tmp_path: Path) -> Steps:
    return Steps(tmp_path)


def test_start_job_starts_the_plans_job_under_the_lease(steps: Steps, tmp_path: Path) -> None:
    plan = sample_plan()
    plan_uri = str(tmp_path / "plan.json")
    steps.documents.write_text(plan_uri, plan.model_dump_json())
    ticket = steps.ticket().model_copy(update={"job_id": None, "plan_uri": plan_uri})
    steps.stubber.add_response(
        "start_job_run",
        {
            "applicationId": "00abc",
            "jobRunId": "job-9",
            "arn": "arn:aws:emr-serverless:us-east-1:123456789012:/applications/00abc/jobruns/job-9",
        },
        {
            "applicationId": "00abc",
            "clientToken": plan.run_id,
            "name": plan.run_id,
            "executionRoleArn": ROLE,
            "jobDriver": ANY,
            "tags": ANY,
            "executionTimeoutMinutes": 5,
            "configurationOverrides": {},  # always named: the state machine's .sync task repeats it
        },
    )
    with steps.stubber:
        started = steps.steps.start_job(ticket)
    assert started.job_id == "job-9"
    assert started.run_id == ticket.run_id


def test_a_job_is_not_started_once_the_lease_lapsed(steps: Steps, tmp_path: Path) -> None:
    ticket = steps.ticket().model_copy(update={"job_id": None})
    steps.now_ms += 31_000
    with pytest.raises(LeaseLostError):
        steps.steps.start_job(ticket)


def test_watching_a_running_job_renews_the_lease(steps: Steps) -> None:
    ticket = steps.ticket()
    steps.job_state("RUNNING")
    steps.now_ms += 25_000  # most of the 30 s TTL gone
    with steps.stubber:
        result = steps.steps.watch(ticket)
    assert result.status.state is JobState.RUNNING
    assert not result.is_final
    steps.now_ms += 25_000  # past the original expiry: still held thanks to the renewal
    assert steps.checkpoints.read_lease_holder("orders") is not None


def test_a_lost_lease_cancels_the_job(steps: Steps) -> None:
    ticket = steps.ticket()
    steps.now_ms += 31_000  # expired
    other: Any = steps.checkpoints.claim_lease("orders", owner_id="other", run_id="r2")
    assert isinstance(other, LeaseGrant)
    steps.job_state("RUNNING")
    steps.stubber.add_response("cancel_job_run", {"applicationId": "00abc", "jobRunId": "j"})
    with steps.stubber:
        result = steps.steps.watch(ticket)
    steps.stubber.assert_no_pending_responses()
    assert result.lease_lost
    assert result.is_final
    assert "lease lost" in failure_reason(result.status, lease_lost=True)


def test_a_lost_lease_without_a_job_to_cancel_says_the_abort_step_stops_the_run(
    steps: Steps, caplog: pytest.LogCaptureFixture
) -> None:
    # On AWS the ticket has no job id (the state machine's startJobRun.sync started the job, or the
    # Lambda runner runs the tasks): this step cancels nothing, and its log must not say it does.
    ticket = steps.ticket().model_copy(update={"job_id": None})
    steps.now_ms += 31_000
    assert isinstance(steps.checkpoints.claim_lease("orders", owner_id="other", run_id="r2"), LeaseGrant)
    with steps.stubber:  # no EMR call queued: any call would fail the stubber
        result = steps.steps.watch(ticket)
    assert result.lease_lost
    (message,) = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    assert "cancelling" not in message
    assert "the abort step cancels a job still running" in message


def test_a_finished_job_is_final_and_its_lease_still_renewed(steps: Steps) -> None:
    """The run holds the topic until commit or abort: watch renews even once the job is final."""
    ticket = steps.ticket()
    steps.job_state("FAILED")
    steps.now_ms += 25_000
    with steps.stubber:
        result = steps.steps.watch(ticket)
    assert result.status.state is JobState.FAILED
    assert not result.lease_lost
    assert failure_reason(result.status, lease_lost=False) == "job j ended FAILED: Job failed: OOM"
    steps.now_ms += 25_000  # past the claim's expiry: renewed by the look at the finished job
    assert steps.checkpoints.read_lease_holder("orders") is not None


def test_a_finished_job_whose_lease_was_taken_is_not_cancelled(steps: Steps) -> None:
    ticket = steps.ticket()
    steps.now_ms += 31_000
    assert isinstance(steps.checkpoints.claim_lease("orders", owner_id="other", run_id="r2"), LeaseGrant)
    steps.job_state("SUCCESS")
    with steps.stubber:  # no cancel_job_run queued: a call would fail the stubber
        result = steps.steps.watch(ticket)
    assert result.lease_lost


def test_abort_records_the_attempt_releases_and_backs_off(steps: Steps) -> None:
    ticket = steps.ticket(attempt=0)
    steps.cancel_accepted(times=2)
    with steps.stubber:
        first = steps.steps.abort(ticket, "job j ended FAILED")
    assert first.lease_released
    assert first.consecutive_failures == 1
    assert not first.alarm
    assert first.resignal_after_seconds == steps.runs.retry_backoff_seconds
    assert steps.checkpoints.read_lease_holder("orders") is None
    outcome = FailedAttempt.model_validate_json(
        steps.documents.read_text(run_document_uri(steps.runs.location, "orders", "r1", OUTCOME_NAME))
    )
    assert (outcome.status, outcome.attempt) == ("aborted", 0)
    with steps.stubber:
        again = steps.steps.abort(ticket, "job j ended FAILED")  # a retried step changes nothing more
    assert not again.lease_released
    steps.stubber.assert_no_pending_responses()  # each abort asked EMR to cancel the job


def test_abort_alarms_after_the_configured_consecutive_failures(steps: Steps) -> None:
    steps.cancel_accepted()
    with steps.stubber:
        result = steps.steps.abort(steps.ticket(attempt=1), "job j ended FAILED")
    assert result.consecutive_failures == 2
    assert result.alarm
    assert result.resignal_after_seconds == steps.runs.retry_backoff_seconds * 2


def test_abort_cancels_the_job_and_lists_where_the_run_wrote(steps: Steps, tmp_path: Path) -> None:
    # The abort looks for the run's result (absent here) on this machine: sample_plan's s3:// result
    # URI sent requests to AWS, retried for seconds, once an earlier test had set credentials.
    plan = sample_plan().model_copy(update={"result_uri": str(tmp_path / "result.json")})
    plan_uri = str(tmp_path / "plan.json")
    steps.documents.write_text(plan_uri, plan.model_dump_json())
    ticket = steps.ticket().model_copy(update={"plan_uri": plan_uri})
    steps.cancel_accepted()
    with steps.stubber:
        steps.steps.abort(ticket, "watching the job failed: timeout")
    steps.stubber.assert_no_pending_responses()
    outcome = FailedAttempt.model_validate_json(
        steps.documents.read_text(run_document_uri(steps.runs.location, "orders", "r1", OUTCOME_NAME))
    )
    assert outcome.written_under == (plan.table.data_uri, plan.dead_letter_table.data_uri)


def test_abort_of_a_job_that_already_ended_still_completes(steps: Steps) -> None:
    steps.stubber.add_client_error("cancel_job_run", "ValidationException", "job is in a final state")
    with steps.stubber:
        result = steps.steps.abort(steps.ticket(), "job j ended FAILED")
    assert result.lease_released


def test_a_commit_whose_lease_lapsed_unclaimed_reclaims_it_and_one_taken_does_not(steps: Steps) -> None:
    ticket = steps.ticket()
    steps.now_ms += 31_000  # lapsed; nobody claimed the topic since
    grant = steps.steps._hold_or_reclaim(ticket)  # the commit's lease step alone
    assert grant.run_id == "r1"
    assert grant.token != ticket.grant.token
    holder = steps.checkpoints.read_lease_holder("orders")
    assert holder is not None
    assert holder.run_id == "r1"
    steps.now_ms += 31_000
    other = steps.checkpoints.claim_lease("orders", owner_id="other", run_id="r2")
    assert isinstance(other, LeaseGrant)
    with pytest.raises(LeaseLostError):
        steps.steps._hold_or_reclaim(ticket.model_copy(update={"grant": grant}))


def test_abort_of_a_stale_plan_does_not_back_off(steps: Steps, tmp_path: Path) -> None:
    """Issue 12 §1 on AWS: a plan refused because the store was behind the table (and repaired under
    the run's lease) is not the topic's failure: re-signalled at once, no backoff, no streak."""
    from kafscale_iceberg.domain.offsets import OffsetUpdate

    plan = sample_plan()
    plan_uri = str(tmp_path / "plan.json")
    steps.documents.write_text(plan_uri, plan.model_dump_json())
    ticket = steps.ticket().model_copy(update={"plan_uri": plan_uri})
    (first,) = plan.partitions
    steps.checkpoints.commit_offsets(
        ticket.grant, {first.partition: OffsetUpdate(first.start_exclusive + 5, 0)}
    )  # the repair the refusal made
    steps.cancel_accepted()
    with steps.stubber:
        result = steps.steps.abort(
            ticket, "refusing to commit ... repaired to the table's offsets", error="OffsetMismatchError"
        )
    assert (result.resignal_after_seconds, result.consecutive_failures) == (0, 0)


def test_abort_of_an_upsert_plan_located_in_a_replaced_version_does_not_back_off(
    steps: Steps, tmp_path: Path
) -> None:
    """A commit refused because the table version the run located in no longer stands (a compaction
    took a file it replaces) records the table's current version; the abort sees the plan is stale:
    re-signalled at once, no backoff, no streak."""
    from kafscale_iceberg.domain.field_ids import TableFieldIds, TopicFieldIds, field_ids_uri

    plan = sample_plan(
        conversion={
            "columns": [{"name": "id", "type": "long", "required": True}],
            "upsert": {"key": ["id"]},
        },
        result_uri=str(tmp_path / "result.json"),
    )
    plan = plan.model_copy(update={"table": plan.table.model_copy(update={"metadata_location": "v1.json"})})
    plan_uri = str(tmp_path / "plan.json")
    steps.documents.write_text(plan_uri, plan.model_dump_json())
    recorded = TableFieldIds(
        identifier="prod.orders", field_ids={}, last_column_id=9, metadata_location="v2.json"
    )
    document = TopicFieldIds(tables=(recorded,)).model_dump_json()
    steps.documents.write_text(field_ids_uri(steps.runs.location, "orders"), document)
    ticket = steps.ticket().model_copy(update={"plan_uri": plan_uri})
    steps.cancel_accepted()
    with steps.stubber:
        result = steps.steps.abort(
            ticket,
            "the run located its changed keys in snapshot 1, which no longer stands",
            error="UpsertLocateStaleError",
        )
    assert (result.resignal_after_seconds, result.consecutive_failures) == (0, 0)


def test_abort_of_a_run_fenced_after_its_table_commit_says_its_rows_are_in(
    steps: Steps, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A lease lost between the tables' commit and the offset write (`OffsetsFencedError`): fencing,
    not the topic's failure, and not told as "not committed"."""
    plan = sample_plan()
    plan_uri = str(tmp_path / "plan.json")
    steps.documents.write_text(plan_uri, plan.model_dump_json())
    ticket = steps.ticket().model_copy(update={"plan_uri": plan_uri})
    steps.cancel_accepted()
    with steps.stubber, caplog.at_level(logging.INFO):
        result = steps.steps.abort(ticket, "is committed to its tables", error="OffsetsFencedError")
    assert (result.resignal_after_seconds, result.consecutive_failures) == (0, 0)
    assert f"run {ticket.run_id} committed, its offsets not written (fenced)" in caplog.text
    assert "not committed" not in caplog.text


def test_a_backoff_document_written_before_the_rename_still_sends_the_topic_to_emr() -> None:
    # `lambda_kill_reason` was `lambda_failed`: a topic's document from before keeps its meaning.
    before = (
        '{"failures":1,"not_before_ms":0,"offsets":{"0":-1},"run_id":"r1","reason":"killed",'
        '"held":{},"lambda_failed":"timed out"}'
    )
    backoff = TopicBackoff.model_validate_json(before)
    assert BackoffRecords.lambda_kill_reason(backoff, {0: -1}) == "timed out"
    assert BackoffRecords.lambda_kill_reason(backoff, {0: 5}) == ""  # a commit since ended the streak
