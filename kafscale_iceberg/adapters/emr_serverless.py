"""EMR Serverless job runs with boto3: start (idempotent by run id), look, find by run id, cancel.

`StartJobRun` is throttled at 1 TPS (burst 25) per account: throttling is retried here with the SAME
`clientToken` (the run id), so a retry can never start a second job for the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from kafscale_iceberg.config import EmrServerlessRunnerConfig
from kafscale_iceberg.domain.compaction_jobs import CompactionJob
from kafscale_iceberg.domain.job_sizing import sizing_conf
from kafscale_iceberg.domain.jobs import JobState, JobStatus
from kafscale_iceberg.domain.runner_choice import EMR_SERVERLESS_TRAITS, RunnerTraits
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.exceptions import (
    JobRunnerError,
    JobRunnerUnavailableError,
)

if TYPE_CHECKING:
    from mypy_boto3_emr_serverless import EMRServerlessClient
    from mypy_boto3_emr_serverless.literals import JobRunStateType

_STATES = {
    "SUBMITTED": JobState.PENDING,
    "PENDING": JobState.PENDING,
    "SCHEDULED": JobState.PENDING,
    "QUEUED": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "SUCCESS": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "CANCELLING": JobState.RUNNING,
    "CANCELLED": JobState.CANCELLED,
}
# ListJobRuns' states before a job's end (CANCELLING is one: it is being cancelled already).
_UNFINISHED: tuple[JobRunStateType, ...] = ("SUBMITTED", "PENDING", "SCHEDULED", "QUEUED", "RUNNING")
# A run's job is created after its lease was claimed; EMR's clock may run behind the lease's a little.
_CLOCK_SKEW_MS = 5 * 60 * 1000
_THROTTLED = {"ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded"}


def make_emr_serverless_client(region: str | None = None) -> EMRServerlessClient:
    """A boto3 EMR Serverless client with standard retries."""
    client: EMRServerlessClient = boto3.client(
        "emr-serverless", region_name=region or None, config=Config(retries={"mode": "standard"})
    )
    return client


class EmrServerlessJobRunner:
    """Runs the Spark job of a plan on an EMR Serverless application."""

    traits: RunnerTraits = EMR_SERVERLESS_TRAITS

    def __init__(
        self,
        settings: EmrServerlessRunnerConfig,
        client: EMRServerlessClient,
        *,
        timeout_minutes: int,
        throttle_attempts: int = 6,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._settings = settings
        self._emr = client
        self._timeout_minutes = timeout_minutes
        self._throttle_attempts = throttle_attempts
        self._sleep = sleep

    def start(self, plan: RunPlan, plan_uri: str) -> str:
        """Start the run's job, or find the one already started for it. Returns the job run id.

        Idempotent: the run id is the `clientToken`, so a repeated call returns the same job.
        """
        request = self._request(plan, plan_uri)
        response = self._call(f"start job for run {plan.run_id}", lambda: self._emr.start_job_run(**request))
        job_id: str = response["jobRunId"]
        return job_id

    def start_compaction(self, job: CompactionJob, job_uri: str) -> str:
        """Start a table's compaction job (`spark_app/main.py --compaction <uri>`) on the same
        application, role and Python environment as the runs, sized like a run of its bytes
        (`domain/job_sizing.py`: a table of small files gets the 2 vCPU job, not EMR's 16 vCPU
        defaults); idempotent by the job id."""
        sizing = (
            sizing_conf(job.total_bytes, self._settings.spark_submit_parameters, self._settings.max_vcpu)
            if job.total_bytes
            else None
        )
        request = self._job_request(
            job.job_id,
            ["--compaction", job_uri],
            {"kafscale:table": job.table, "kafscale:compaction": job.job_id},
            sizing=sizing,
        )
        response = self._call(
            f"start compaction job {job.job_id} of {job.table}", lambda: self._emr.start_job_run(**request)
        )
        job_id: str = response["jobRunId"]
        return job_id

    def step_request(self, plan: RunPlan, plan_uri: str) -> dict[str, Any]:
        """The `StartJobRun` request of the plan's job, as the state machine's
        `emr-serverless:startJobRun.sync` task takes it (Step Functions' PascalCase field names; tag
        keys kept): that task is the one call that starts the job, the run id its `ClientToken`
        (so a retried task finds the job it started). Calls nothing."""
        request: dict[str, Any] = _pascal_case(self._request(plan, plan_uri))
        return request

    def _request(self, plan: RunPlan, plan_uri: str) -> dict[str, Any]:
        """The run's job, sized to its planned bytes (`domain/job_sizing.py`)."""
        sizing = sizing_conf(
            plan.total_bytes, self._settings.spark_submit_parameters, self._settings.max_vcpu
        )
        return self._job_request(
            plan.run_id,
            ["--plan", plan_uri],
            {"kafscale:topic": plan.topic, "kafscale:run-id": plan.run_id},
            sizing=sizing,
        )

    def _job_request(
        self, token: str, arguments: list[str], tags: dict[str, str], *, sizing: dict[str, str] | None = None
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "applicationId": self._settings.application_id,
            "clientToken": token,
            "name": token,
            "executionRoleArn": self._settings.execution_role_arn,
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": self._settings.entry_point,
                    "entryPointArguments": arguments,
                    **self._spark_submit_parameters(sizing or {}),
                }
            },
            "tags": tags,
            "executionTimeoutMinutes": self._timeout_minutes,
        }
        # Always present (empty without a log URI): the state machine's .sync task names the field.
        request["configurationOverrides"] = {}
        if self._settings.log_uri:
            request["configurationOverrides"] = {
                "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": self._settings.log_uri}}
            }
        return request

    def status(self, job_id: str) -> JobStatus:
        """The job run's state now."""
        response = self._call(
            f"get job run {job_id}",
            lambda: self._emr.get_job_run(applicationId=self._settings.application_id, jobRunId=job_id),
        )
        run = response["jobRun"]
        raw = str(run["state"])
        return JobStatus(
            job_id=job_id,
            state=_STATES.get(raw, JobState.PENDING),
            runner_state=raw,
            detail=str(run.get("stateDetails", "")),
            queued_ms=run.get("queuedDurationMilliseconds"),
        )

    def unfinished_jobs(self, run_id: str, *, created_after_ms: int) -> list[str]:
        """The job runs started for run `run_id` (named by it: `_job_request`) since `created_after_ms`
        that have not ended: `ListJobRuns` of the application over that window and the states before
        an end (a job already cancelling is not listed). The state machine's `startJobRun.sync` starts a
        run's job, so the abort step finds it here to cancel it."""
        if not self._settings.application_id:
            return []  # no application configured: no job can have been started for the run
        after = datetime.fromtimestamp(max(created_after_ms - _CLOCK_SKEW_MS, 0) / 1000, tz=UTC)

        def list_all() -> list[str]:
            found: list[str] = []
            pages = self._emr.get_paginator("list_job_runs").paginate(
                applicationId=self._settings.application_id,
                createdAtAfter=after,
                states=list(_UNFINISHED),
            )
            for page in pages:
                found += [run["id"] for run in page["jobRuns"] if run["name"] == run_id]
            return found

        found: list[str] = self._call(f"list the job runs of run {run_id}", list_all)
        return found

    def cancel(self, job_id: str) -> None:
        """Ask EMR to cancel the job run. Idempotent (cancelling a finished job is not an error)."""
        try:
            self._emr.cancel_job_run(applicationId=self._settings.application_id, jobRunId=job_id)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ValidationException":
                return  # already in a final state
            raise JobRunnerUnavailableError(f"cancel job run {job_id}: {exc}") from exc
        except ParamValidationError as exc:
            raise self._invalid_request(f"cancel job run {job_id}", exc) from exc
        except BotoCoreError as exc:
            raise JobRunnerUnavailableError(f"cancel job run {job_id}: {exc}") from exc

    def _spark_submit_parameters(self, sizing: dict[str, str]) -> dict[str, str]:
        # The job's S3 clients (boto3, pyarrow) take their region from the environment: without it they
        # use the global endpoint, which a VPC without NAT cannot reach (gateway endpoints are regional).
        region = self._emr.meta.region_name
        region_env = (
            " ".join(
                f"--conf {prefix}{name}={region}"
                for prefix in ("spark.emr-serverless.driverEnv.", "spark.executorEnv.")
                for name in ("AWS_REGION", "AWS_DEFAULT_REGION")
            )
            if region
            else ""
        )
        params = " ".join(
            p
            for p in (
                " ".join(f"--conf {key}={value}" for key, value in sizing.items()),
                self._settings.job_spark_submit_parameters(),
                region_env,
                "--conf spark.sql.session.timeZone=UTC",
                "--conf spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS",
            )
            if p
        )
        return {"sparkSubmitParameters": params}

    def _call(self, what: str, request: Callable[[], Any]) -> Any:
        for attempt in range(self._throttle_attempts):
            try:
                return request()
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code in _THROTTLED and attempt + 1 < self._throttle_attempts:
                    self._sleep(min(2.0**attempt, 20.0))
                    continue
                if code in _THROTTLED or code == "InternalServerException":
                    raise JobRunnerUnavailableError(f"{what}: {code} (retry later)") from exc
                raise JobRunnerError(
                    f"{what}: {code}: {exc.response.get('Error', {}).get('Message', '')} "
                    f"(check runner.emr_serverless.application_id {self._settings.application_id!r} "
                    "and the execution role)"
                ) from exc
            except ParamValidationError as exc:
                raise self._invalid_request(what, exc) from exc
            except BotoCoreError as exc:
                raise JobRunnerUnavailableError(f"{what}: {exc}") from exc
        raise AssertionError("unreachable")

    def _invalid_request(self, what: str, exc: ParamValidationError) -> JobRunnerError:
        """botocore refused a request before sending it (a parameter of the wrong type, length or
        value): the same request fails every time, so it is terminal, never retried as an outage."""
        report = str(exc.kwargs.get("report") or exc).strip().replace("\n", "; ")
        return JobRunnerError(
            f"{what}: the request is invalid and was not sent ({report}); check the settings it was "
            f"built from (runner.emr_serverless.application_id {self._settings.application_id!r}, "
            "execution_role_arn, entry_point, spark_submit_parameters); if they are right, this is a "
            "defect of kafscale-iceberg: report it with this message"
        )


def _pascal_case(value: Any, *, keep_keys: bool = False) -> Any:
    """boto3's camelCase request -> Step Functions' optimized-integration PascalCase (`tags` keys kept)."""
    if isinstance(value, dict):
        return {
            (key if keep_keys else key[:1].upper() + key[1:]): _pascal_case(item, keep_keys=key == "tags")
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_pascal_case(item) for item in value]
    return value
