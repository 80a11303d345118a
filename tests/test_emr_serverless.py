"""The EMR Serverless job runner: moto server for the happy path, botocore Stubber for the states and
throttling moto cannot produce (its job runs report SUCCESS at once)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ParamValidationError
from botocore.stub import Stubber

from kafscale_iceberg.adapters.emr_serverless import EmrServerlessJobRunner
from kafscale_iceberg.config import EmrServerlessRunnerConfig
from kafscale_iceberg.domain.job_sizing import GIB, job_size, sizing_conf
from kafscale_iceberg.domain.jobs import JobState
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.exceptions import JobRunnerError, JobRunnerUnavailableError
from kafscale_iceberg.local.pipeline import is_outage
from tests.support.moto import MotoEndpoint
from tests.support.plans import sample_plan, sample_plan_fields

ROLE = "arn:aws:iam::123456789012:role/kafscale-iceberg-job"
PLAN_URI = "s3://runs/orders/r/plan.json"


def _settings(application_id: str = "00abc") -> EmrServerlessRunnerConfig:
    return EmrServerlessRunnerConfig(
        application_id=application_id,
        execution_role_arn=ROLE,
        entry_point="s3://artifacts/spark_app/main.py",
        venv_archive="s3://artifacts/env.tar.gz",
        log_uri="s3://artifacts/logs/",
    )


def test_starts_a_job_on_moto_with_the_plan_and_python_environment(moto_server: MotoEndpoint) -> None:
    emr: Any = moto_server.client("emr-serverless")
    app_id = emr.create_application(name="kafscale", releaseLabel="emr-7.2.0", type="SPARK")["applicationId"]
    runner = EmrServerlessJobRunner(_settings(app_id), emr, timeout_minutes=60)
    job_id = runner.start(sample_plan(), PLAN_URI)
    status = runner.status(job_id)
    assert status.job_id == job_id
    assert status.state in {JobState.SUCCEEDED, JobState.RUNNING, JobState.PENDING}
    job = emr.get_job_run(applicationId=app_id, jobRunId=job_id)["jobRun"]
    assert job["jobDriver"]["sparkSubmit"]["entryPointArguments"] == ["--plan", PLAN_URI]
    assert (
        "spark.archives=s3://artifacts/env.tar.gz#environment"
        in job["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    )


def test_the_state_machine_gets_the_job_request_and_no_job_is_started_for_it(
    moto_server: MotoEndpoint,
) -> None:
    """The StartJob step hands the state machine's startJobRun.sync task the request, in Step Functions'
    field names (each one the task passes on), without calling EMR: the task's StartJobRun is the one
    call that starts the job (AWS does not document StartJobRun as idempotent; the AWS box checks one
    StartJobRun per run in tests/test_aws_flow.py). The request is the runner's own `start` request."""
    import json
    from pathlib import Path

    emr: Any = moto_server.client("emr-serverless")
    app_id = emr.create_application(name="kafscale", releaseLabel="emr-7.2.0", type="SPARK")["applicationId"]
    runner = EmrServerlessJobRunner(_settings(app_id), emr, timeout_minutes=60)
    plan = sample_plan()
    calls: list[str] = []
    emr.meta.events.register("before-call.emr-serverless", lambda model, **_: calls.append(model.name))
    request = runner.step_request(plan, PLAN_URI)
    assert calls == []
    asl = json.loads((Path(__file__).parent.parent / "infra" / "state_machine.asl.json").read_text())
    fields = asl["States"]["RunJob"]["Branches"][0]["States"]["WaitOnJob"]["Parameters"]
    assert {name.removesuffix(".$") for name in fields} == set(request)
    assert request["ClientToken"] == plan.run_id
    assert request["JobDriver"]["SparkSubmit"]["EntryPointArguments"] == ["--plan", PLAN_URI]
    assert request["Tags"] == {"kafscale:topic": plan.topic, "kafscale:run-id": plan.run_id}
    job_id = runner.start(plan, PLAN_URI)
    assert calls == ["StartJobRun"]  # the hook sees the calls
    started = emr.get_job_run(applicationId=app_id, jobRunId=job_id)["jobRun"]
    assert started["jobDriver"]["sparkSubmit"] == {
        key[:1].lower() + key[1:]: value for key, value in request["JobDriver"]["SparkSubmit"].items()
    }


def test_the_job_is_told_its_region_for_regional_s3_endpoints(moto_server: MotoEndpoint) -> None:
    emr: Any = moto_server.client("emr-serverless")
    app_id = emr.create_application(name="kafscale", releaseLabel="emr-7.2.0", type="SPARK")["applicationId"]
    runner = EmrServerlessJobRunner(_settings(app_id), emr, timeout_minutes=60)
    job_id = runner.start(sample_plan(), PLAN_URI)
    parameters = emr.get_job_run(applicationId=app_id, jobRunId=job_id)["jobRun"]["jobDriver"]["sparkSubmit"][
        "sparkSubmitParameters"
    ].split()
    region = emr.meta.region_name
    for conf in (
        f"spark.emr-serverless.driverEnv.AWS_REGION={region}",
        f"spark.executorEnv.AWS_REGION={region}",
        f"spark.executorEnv.AWS_DEFAULT_REGION={region}",
    ):
        assert conf in parameters


def _stubbed() -> tuple[EmrServerlessJobRunner, Stubber, list[float]]:
    client = boto3.client("emr-serverless", region_name="us-east-1")
    stubber = Stubber(client)
    sleeps: list[float] = []
    return (
        EmrServerlessJobRunner(_settings(), client, timeout_minutes=30, sleep=sleeps.append),
        stubber,
        sleeps,
    )


def test_throttled_start_is_retried_with_the_same_client_token() -> None:
    runner, stubber, sleeps = _stubbed()
    plan = sample_plan()
    expected = {
        "applicationId": "00abc",
        "clientToken": plan.run_id,
        "name": plan.run_id,
        "executionRoleArn": ROLE,
        "jobDriver": stubber_any(),
        "tags": {"kafscale:topic": "orders", "kafscale:run-id": plan.run_id},
        "executionTimeoutMinutes": 30,
        "configurationOverrides": stubber_any(),
    }
    stubber.add_client_error("start_job_run", "ThrottlingException", expected_params=expected)
    stubber.add_client_error("start_job_run", "ThrottlingException", expected_params=expected)
    stubber.add_response(
        "start_job_run",
        {
            "applicationId": "00abc",
            "jobRunId": "job-1",
            "arn": "arn:aws:emr-serverless:us-east-1:123456789012:/applications/00abc/jobruns/job-1",
        },
        expected,
    )
    with stubber:
        assert runner.start(plan, PLAN_URI) == "job-1"
    assert sleeps == [1.0, 2.0]
    stubber.assert_no_pending_responses()


def test_persistent_throttling_is_transient() -> None:
    runner, stubber, _ = _stubbed()
    for _ in range(6):
        stubber.add_client_error("start_job_run", "ThrottlingException")
    with stubber, pytest.raises(JobRunnerUnavailableError, match="retry later") as info:
        runner.start(sample_plan(), PLAN_URI)
    assert info.value.transient


def test_a_refused_start_is_terminal_and_names_the_application() -> None:
    runner, stubber, _ = _stubbed()
    stubber.add_client_error("start_job_run", "ResourceNotFoundException", "Application 00abc not found")
    with stubber, pytest.raises(JobRunnerError, match="00abc") as info:
        runner.start(sample_plan(), PLAN_URI)
    assert not info.value.transient


@pytest.mark.parametrize(
    "call",
    [
        lambda runner: runner.start(sample_plan(), PLAN_URI),
        lambda runner: runner.status("j"),
        lambda runner: runner.cancel("j"),
    ],
    ids=["start", "status", "cancel"],
)
def test_a_request_botocore_refuses_to_send_is_terminal_and_names_the_parameter(call: Any) -> None:
    # An empty application id is refused by botocore before anything is sent (it checks types,
    # lengths and ranges): the same request fails every time, so retrying it is never right.
    client = boto3.client("emr-serverless", region_name="us-east-1")
    runner = EmrServerlessJobRunner(_settings(application_id=""), client, timeout_minutes=30)
    with pytest.raises(JobRunnerError, match="applicationId") as info:
        call(runner)
    assert not info.value.transient
    assert "runner.emr_serverless.application_id" in str(info.value)
    assert isinstance(info.value.__cause__, ParamValidationError)
    assert not is_outage(info.value)  # `run` stops with the message instead of waiting it out


@pytest.mark.parametrize(
    ("emr_state", "state"),
    [
        ("SUBMITTED", JobState.PENDING),
        ("QUEUED", JobState.PENDING),
        ("SCHEDULED", JobState.PENDING),
        ("RUNNING", JobState.RUNNING),
        ("CANCELLING", JobState.RUNNING),
        ("SUCCESS", JobState.SUCCEEDED),
        ("FAILED", JobState.FAILED),
        ("CANCELLED", JobState.CANCELLED),
    ],
)
def test_job_states_are_folded(emr_state: str, state: JobState) -> None:
    runner, stubber, _ = _stubbed()
    stubber.add_response(
        "get_job_run", {"jobRun": _job_run(emr_state)}, {"applicationId": "00abc", "jobRunId": "j"}
    )
    with stubber:
        status = runner.status("j")
    assert status.state is state
    assert status.runner_state == emr_state
    assert status.state.is_final == (state in {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


def test_cancel_of_a_finished_job_is_not_an_error() -> None:
    runner, stubber, _ = _stubbed()
    stubber.add_client_error("cancel_job_run", "ValidationException", "Job run is in a final state")
    with stubber:
        runner.cancel("j")


def _job_run(state: str) -> dict[str, Any]:
    from datetime import UTC, datetime

    now = datetime(2026, 11, 20, tzinfo=UTC)
    return {
        "applicationId": "00abc",
        "jobRunId": "j",
        "arn": "arn:aws:emr-serverless:us-east-1:123456789012:/applications/00abc/jobruns/j",
        "createdBy": "arn:aws:iam::123456789012:user/me",
        "createdAt": now,
        "updatedAt": now,
        "executionRole": ROLE,
        "state": state,
        "stateDetails": f"state {state}",
        "releaseLabel": "emr-spark-8.0.0",
        "jobDriver": {"sparkSubmit": {"entryPoint": "s3://a/main.py"}},
    }


def stubber_any() -> Any:
    from botocore.stub import ANY

    return ANY


def _plan_of(size_bytes: int) -> Any:
    fields = sample_plan_fields()
    fields["partitions"][0]["segments"][0]["size_bytes"] = size_bytes
    return RunPlan.model_validate(fields)


def _submitted(emr: Any, app_id: str, job_id: str) -> str:
    job = emr.get_job_run(applicationId=app_id, jobRunId=job_id)["jobRun"]
    parameters: str = job["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    return parameters


def test_a_small_run_gets_a_small_job_with_a_fixed_executor_count(moto_server: MotoEndpoint) -> None:
    emr: Any = moto_server.client("emr-serverless")
    app_id = emr.create_application(name="kafscale", releaseLabel="emr-7.2.0", type="SPARK")["applicationId"]
    runner = EmrServerlessJobRunner(_settings(app_id), emr, timeout_minutes=60)
    parameters = _submitted(emr, app_id, runner.start(_plan_of(40 * 1024**2), PLAN_URI))
    for conf in (
        "spark.driver.cores=1",
        "spark.driver.memory=1g",
        "spark.executor.cores=1",
        "spark.executor.memory=2g",
        "spark.executor.instances=1",
        "spark.dynamicAllocation.enabled=false",
    ):
        assert f"--conf {conf}" in parameters, parameters


@pytest.mark.parametrize(
    ("planned", "max_vcpu", "vcpu", "executors", "billed_gb"),
    [
        (1, 16, 2, 1, 5),  # a live topic's run: a 2 GB driver and a 3 GB executor worker
        (256 * 1024**2, 16, 2, 1, 5),
        (256 * 1024**2 + 1, 16, 3, 1, 7),  # one 2-vCPU executor (5 GB billed) per GiB
        (GIB, 16, 3, 1, 7),
        (GIB + 1, 16, 5, 2, 12),
        (4 * GIB + 1, 16, 11, 5, 27),  # a backlog: the job grows with it ...
        (7 * GIB, 16, 15, 7, 37),
        (8 * GIB, 16, 15, 7, 37),  # ... up to the application's 16 vCPU (EmrMaximumCpu)
        (8 * GIB, 7, 7, 3, 17),
        (8 * GIB, 3, 3, 1, 7),
    ],
)
def test_the_executor_count_grows_with_the_planned_bytes_up_to_the_application_s_vcpu(
    planned: int, max_vcpu: int, vcpu: int, executors: int, billed_gb: int
) -> None:
    size = job_size(planned, max_vcpu)
    assert (size.vcpu, size.executors, size.billed_memory_gb) == (vcpu, executors, billed_gb)
    assert size.vcpu <= max_vcpu
    assert sizing_conf(planned, max_vcpu=max_vcpu)["spark.executor.instances"] == str(executors)


def test_the_users_spark_submit_parameters_win_over_the_sizing(moto_server: MotoEndpoint) -> None:
    emr: Any = moto_server.client("emr-serverless")
    app_id = emr.create_application(name="kafscale", releaseLabel="emr-7.2.0", type="SPARK")["applicationId"]
    settings = _settings(app_id).model_copy(
        update={"spark_submit_parameters": "--conf spark.executor.memory=8g --driver-memory 6g"}
    )
    runner = EmrServerlessJobRunner(settings, emr, timeout_minutes=60)
    parameters = _submitted(emr, app_id, runner.start(_plan_of(1024), PLAN_URI))
    assert "spark.executor.memory=2g" not in parameters
    assert "spark.driver.memory=1g" not in parameters
    assert "--conf spark.executor.memory=8g" in parameters
    assert "--driver-memory 6g" in parameters
    assert "--conf spark.executor.instances=1" in parameters  # what the user left alone is still sized


def test_a_run_s_unfinished_jobs_are_found_by_its_run_id_in_the_window_since_its_lease() -> None:
    """The abort step's lookup: ListJobRuns of the application, created since the lease was claimed
    (less five minutes of clock skew), in the states before an end; only jobs named by the run id."""
    from datetime import UTC, datetime

    runner, stubber, _ = _stubbed()
    claimed_ms = 1_795_000_000_000
    summary = {
        "applicationId": "00abc",
        "arn": "arn:aws:emr-serverless:us-east-1:123456789012:/applications/00abc/jobruns/x",
        "createdBy": "arn:aws:iam::123456789012:user/me",
        "createdAt": datetime(2026, 11, 20, tzinfo=UTC),
        "updatedAt": datetime(2026, 11, 20, tzinfo=UTC),
        "executionRole": "arn:aws:iam::123456789012:role/job",
        "state": "RUNNING",
        "stateDetails": "running",
        "releaseLabel": "emr-spark-8.0.0",
    }
    stubber.add_response(
        "list_job_runs",
        {
            "jobRuns": [
                {**summary, "id": "j1", "name": "orders-abc-a0"},
                {**summary, "id": "j2", "name": "orders-abc-a1"},  # the next attempt's
            ]
        },
        {
            "applicationId": _settings().application_id,
            "createdAtAfter": datetime.fromtimestamp((claimed_ms - 300_000) / 1000, tz=UTC),
            "states": ["SUBMITTED", "PENDING", "SCHEDULED", "QUEUED", "RUNNING"],
        },
    )
    with stubber:
        assert runner.unfinished_jobs("orders-abc-a0", created_after_ms=claimed_ms) == ["j1"]
    stubber.assert_no_pending_responses()


def test_a_compaction_job_is_sized_like_a_run_of_its_bytes(moto_server: MotoEndpoint) -> None:
    """A table of small files is rewritten by the 2 vCPU job a run of its bytes gets, not EMR's 16 vCPU
    defaults; a job document from before the byte count keeps the defaults."""
    from kafscale_iceberg.domain.compaction_jobs import CompactionJob, CompactionJobGroup

    emr: Any = moto_server.client("emr-serverless")
    app_id = emr.create_application(name="kafscale", releaseLabel="emr-7.2.0", type="SPARK")["applicationId"]
    runner = EmrServerlessJobRunner(_settings(app_id), emr, timeout_minutes=60)

    def started(job_id: str, group_bytes: int) -> str:
        job = CompactionJob(
            job_id=job_id,
            table="shop.orders",
            metadata_location="s3://lake/shop/orders/metadata/v3.metadata.json",
            snapshot_id=7,
            groups=(
                CompactionJobGroup(
                    partition_key="", files=("a.parquet", "b.parquet"), rows=10, bytes=group_bytes
                ),
            ),
            folder="s3://lake/shop/orders/data/_kafscale_runs/c1",
            target_file_size_bytes=128 * 1024**2,
            result_uri="s3://runs/maintenance/shop.orders/c1/result.json",
        )
        run_id = runner.start_compaction(job, "s3://runs/maintenance/shop.orders/c1/job.json")
        parameters: str = emr.get_job_run(applicationId=app_id, jobRunId=run_id)["jobRun"]["jobDriver"][
            "sparkSubmit"
        ]["sparkSubmitParameters"]
        return parameters

    small = started("c1", 40 * 1024**2)
    assert "--conf spark.executor.instances=1" in small
    assert "--conf spark.dynamicAllocation.enabled=false" in small
    legacy = started("c2", 0)
    assert "spark.executor.instances" not in legacy
