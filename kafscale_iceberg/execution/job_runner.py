"""The in-process `JobRunner`: each run's tasks in this process, no JVM (`runner.type: inline`, and
the Lambda runner on AWS, `functions/plan_runner.py`).

The same driver and task code as the Spark job (`execution/driver.py`), mapped by the in-process
executor (`execution/in_process.py`): plan.json in, the same data files and result.json out. With
`runner.type: inline` it is `kafscale-iceberg run` as one small process, for a user replacing
KafScale's Go processor.

It declares itself as the runner it serves (`traits`): `inline` by default, the Lambda runner's
declaration (its size cap, Lambda's kill errors) in the Lambda runner and where `run` follows the
launcher's choice. The task executor is imported when a run starts, so a process that only asks a
runner what it can do (the step functions, the launcher) loads no pyarrow.

Runs execute one at a time on a background thread, as the warm local Spark session's do; the job id
is the run id, so starting the same run twice finds the first job, and the job's verdict is its
result document. `cancel` starts no further task of the run (the tasks already running finish);
the run then ends CANCELLED. Compaction is not a job here: with this runner `maintain` and `run`
compact in-process (`maintenance.compaction_engine` has no Spark to use).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.domain.compaction_jobs import CompactionJobResult
from kafscale_iceberg.domain.jobs import JobState, JobStatus
from kafscale_iceberg.domain.runner_choice import INLINE_TRAITS, RunnerKind, RunnerTraits
from kafscale_iceberg.domain.runs import RunPlan, RunResult, RunStatus
from kafscale_iceberg.exceptions import UnknownJobError

if TYPE_CHECKING:
    from kafscale_iceberg.execution.in_process import InProcessTaskExecutor
    from kafscale_iceberg.ports import JobRunner

logger = logging.getLogger(__name__)


@dataclass
class _Job:
    run_id: str
    executor: InProcessTaskExecutor
    future: Future[RunResult] | None = None
    cancelled: bool = field(default=False)


class InProcessJobRunner:
    """Runs plans in this process (see the module docstring); `workers` threads per run (default:
    the cores this process may use); `traits`: the runner it serves (`inline`, or the Lambda
    runner's). Close it to wait for the run in flight."""

    def __init__(
        self,
        *,
        workers: int | None = None,
        s3: S3Settings | None = None,
        traits: RunnerTraits = INLINE_TRAITS,
    ) -> None:
        self.workers = workers
        self.traits = traits
        self._s3 = s3 or S3Settings()
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def step_request(self, plan: RunPlan, plan_uri: str) -> dict[str, Any]:
        """Nothing: the state machine invokes the Lambda runner with the ticket alone."""
        return {}

    def start(self, plan: RunPlan, plan_uri: str) -> str:
        """Start the plan's run, or find the one already started for its run id; returns its id."""
        from kafscale_iceberg.execution.in_process import (  # noqa: PLC0415 - pyarrow, only to run
            InProcessTaskExecutor,
            run_plan_in_process,
        )

        with self._lock:
            if plan.run_id in self._jobs:
                return plan.run_id
            job = _Job(plan.run_id, InProcessTaskExecutor(self.workers))
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafscale-in-process")
            job.future = self._pool.submit(run_plan_in_process, plan_uri, s3=self._s3, executor=job.executor)
            self._jobs[plan.run_id] = job
        logger.info(
            "in-process job started", extra={"run_id": plan.run_id, "workers": job.executor.parallelism}
        )
        return plan.run_id

    def status(self, job_id: str) -> JobStatus:
        """The run's state; its result document decides success."""
        job = self._job(job_id)
        future = job.future
        assert future is not None
        if future.cancelled():
            return JobStatus(job_id, JobState.CANCELLED, "CANCELLED", "cancelled before it started")
        if not future.done():
            state = JobState.RUNNING if future.running() else JobState.PENDING
            return JobStatus(job_id, state, state.value.upper())
        error = future.exception()
        if error is not None:
            return JobStatus(job_id, JobState.FAILED, "FAILED", f"{type(error).__name__}: {error}")
        return job_status_of(job_id, future.result(), cancelled=job.cancelled)

    def cancel(self, job_id: str) -> None:
        """Start no further task of the run (a queued run never starts). Idempotent."""
        job = self._job(job_id)
        job.cancelled = True
        job.executor.cancel()
        if job.future is not None:
            job.future.cancel()

    def wait(self, job_id: str, timeout_s: float) -> bool:
        """Block until the run ends or `timeout_s` passes; True when it ended (no polling delay)."""
        future = self._job(job_id).future
        assert future is not None
        done, _ = futures_wait([future], timeout=timeout_s)
        return bool(done)

    def close(self) -> None:
        """Cancel what still runs and wait for it."""
        for job_id in list(self._jobs):
            if not self.status(job_id).state.is_final:
                self.cancel(job_id)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _job(self, job_id: str) -> _Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise UnknownJobError(
                f"in-process job {job_id!r} is not known to this process (it was started before a "
                "restart); the run is re-planned once its lease expires"
            ) from None


def job_status_of(
    job_id: str, result: RunResult | CompactionJobResult, *, cancelled: bool = False
) -> JobStatus:
    """A finished job's status from the result document it wrote (a cancelled job is CANCELLED)."""
    if cancelled:
        return JobStatus(job_id, JobState.CANCELLED, "CANCELLED", "cancelled")
    if isinstance(result, CompactionJobResult):
        if result.succeeded:
            return JobStatus(job_id, JobState.SUCCEEDED, "SUCCEEDED")
        return JobStatus(job_id, JobState.FAILED, "FAILED", result.failure or "failed")
    if result.status is RunStatus.SUCCEEDED:
        return JobStatus(job_id, JobState.SUCCEEDED, "SUCCEEDED")
    failure = result.failure
    detail = f"{failure.kind.value}: {failure.message}" if failure else "failed"
    return JobStatus(job_id, JobState.FAILED, "FAILED", detail)


class ChosenJobRunner:
    """Runs each plan on the runner the launcher chose for it (`RunPlan.runner`), among `runners`,
    each found by the kind it declares (`traits`); the last is the default: a plan of a kind none
    declares, and a job id this process did not start. `run` with `runner.type: emr_serverless` uses
    it (the in-process runner as the Lambda runner, then EMR), so a small run costs what it does on
    AWS (no EMR job) there too."""

    def __init__(self, runners: Iterable[JobRunner]) -> None:
        self._runners = {runner.traits.kind: runner for runner in runners}
        self._default = list(self._runners.values())[-1]
        self._owners: dict[str, JobRunner] = {}

    @property
    def traits(self) -> RunnerTraits:
        """The default runner's (the one a job of unknown origin is asked of)."""
        return self._default.traits

    def runner_of(self, kind: RunnerKind) -> JobRunner:
        """The runner declaring `kind` (the default one when none does)."""
        return self._runners.get(kind, self._default)

    def step_request(self, plan: RunPlan, plan_uri: str) -> dict[str, Any]:
        """The request of the plan's runner."""
        return self.runner_of(plan.runner).step_request(plan, plan_uri)

    def start(self, plan: RunPlan, plan_uri: str) -> str:
        """Start the plan's job on its runner, or find the one already started; returns its id."""
        runner = self.runner_of(plan.runner)
        job_id = runner.start(plan, plan_uri)
        self._owners[job_id] = runner
        return job_id

    def status(self, job_id: str) -> JobStatus:
        """The job's state, from the runner that started it."""
        return self._owner(job_id).status(job_id)

    def cancel(self, job_id: str) -> None:
        """Cancel the job on the runner that started it. Idempotent."""
        self._owner(job_id).cancel(job_id)

    def close(self) -> None:
        """Close every runner that holds something (the in-process one; EMR's holds nothing)."""
        for runner in self._runners.values():
            close = getattr(runner, "close", None)
            if close is not None:
                close()

    def _owner(self, job_id: str) -> JobRunner:
        # A job id this process did not start (before a restart) is the default runner's (EMR's).
        return self._owners.get(job_id, self._default)
