"""The local Spark `JobRunner`: the same Spark job as EMR Serverless, on this machine.

Two ways to run a plan, both the same code as on EMR (`spark_app.job.run_job`):

- **warm** (`runner.local.keep_session_warm: true`, the default): one SparkSession lives in this
  process and runs each plan in a background thread, under a Spark job group named by the run id
  (so `cancel` interrupts its tasks). A run then costs its work, not a JVM start (~8 s here).
- **spark-submit** (`keep_session_warm: false`): each run is `spark-submit --master <master>
  spark_app/main.py --plan <uri>`, a process of its own, exactly what EMR runs; `cancel` terminates it.

Either way the job id is the run id, so starting the same run twice finds the first job (like EMR's
`clientToken`), and the job's verdict is its result document (written by the job itself) — a job
that died without writing one is FAILED with its exit code and log tail.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafscale_iceberg.adapters.confluent_registry import RegistryCredentials
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.domain.compaction_jobs import CompactionJob, CompactionJobResult
from kafscale_iceberg.domain.jobs import JobState, JobStatus
from kafscale_iceberg.domain.runner_choice import LOCAL_TRAITS, RunnerTraits
from kafscale_iceberg.domain.runs import RunPlan, RunResult
from kafscale_iceberg.exceptions import KafscaleIcebergError, UnknownJobError
from kafscale_iceberg.execution.job_runner import job_status_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

_LOG_TAIL = 2000


@dataclass
class _Job:
    run_id: str
    future: Future[RunResult | CompactionJobResult] | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    cancelled: bool = False


class LocalSparkJobRunner:
    """Runs plans with local Spark (see the module docstring). Close it to stop the session."""

    traits: RunnerTraits = LOCAL_TRAITS

    def __init__(
        self,
        *,
        master: str = "local[*]",
        spark_conf: Mapping[str, str] | None = None,
        keep_session_warm: bool = True,
        s3: S3Settings | None = None,
        registry_credentials: RegistryCredentials | None = None,
    ) -> None:
        """`registry_credentials`: the schema registry's, from the config (given to each run; to a
        `spark-submit` run through `REGISTRY_CREDENTIAL_VARIABLES`, never on its command line)."""
        self.master = master
        self._registry_credentials = registry_credentials
        self.spark_conf = dict(spark_conf or {})
        self.keep_session_warm = keep_session_warm
        self._s3 = s3 or S3Settings()
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._session: SparkSession | None = None
        self._owns_session = False
        self._executor: ThreadPoolExecutor | None = None
        self.session_start_s = 0.0

    # -- JobRunner ---------------------------------------------------------------------------------

    def step_request(self, plan: RunPlan, plan_uri: str) -> dict[str, Any]:
        """Nothing: no state machine runs local Spark (the one-machine loop starts it)."""
        return {}

    def start(self, plan: RunPlan, plan_uri: str) -> str:
        """Start the plan's job, or find the one already started for its run id; returns its id."""
        with self._lock:
            if plan.run_id in self._jobs:
                return plan.run_id
            job = _Job(plan.run_id)
            if self.keep_session_warm:
                job.future = self._pool().submit(self._run_warm, plan.run_id, plan_uri)
            else:
                job.process, job.log_path = self._submit(plan_uri)
            self._jobs[plan.run_id] = job
        logger.info("local job started", extra={"run_id": plan.run_id, "warm": self.keep_session_warm})
        return plan.run_id

    def start_compaction(self, job: CompactionJob, job_uri: str) -> str:
        """Start a table's compaction job (`spark_app.compaction`), or find the one already started
        for its job id; returns its id. The same entry point EMR runs (`--compaction <uri>`)."""
        with self._lock:
            if job.job_id in self._jobs:
                return job.job_id
            entry = _Job(job.job_id)
            if self.keep_session_warm:
                entry.future = self._pool().submit(self._compact_warm, job.job_id, job_uri)
            else:
                entry.process, entry.log_path = self._submit(job_uri, flag="--compaction")
            self._jobs[job.job_id] = entry
        logger.info("local compaction job started", extra={"job_id": job.job_id, "table": job.table})
        return job.job_id

    def status(self, job_id: str) -> JobStatus:
        """The job's state; its result document (written by the job) decides success."""
        job = self._job(job_id)
        if job.future is not None:
            return self._future_status(job, job.future)
        return self._process_status(job)

    def cancel(self, job_id: str) -> None:
        """Interrupt the job's tasks (warm) or terminate its process. Idempotent."""
        job = self._job(job_id)
        job.cancelled = True
        if job.process is not None and job.process.poll() is None:
            job.process.terminate()
        elif job.future is not None and not job.future.cancel() and self._session is not None:
            # Already running (or done): interrupt its Spark tasks; a no-op for a finished group.
            self._session.sparkContext.cancelJobGroup(job_id)

    def wait(self, job_id: str, timeout_s: float) -> bool:
        """Block until the job ends or `timeout_s` passes; True when it ended (no polling delay)."""
        job = self._job(job_id)
        if job.future is not None:
            done, _ = futures_wait([job.future], timeout=timeout_s)
            return bool(done)
        assert job.process is not None
        try:
            job.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    # -- lifecycle ---------------------------------------------------------------------------------

    def warm_up(self) -> float:
        """Start the SparkSession now (warm mode) so the first run doesn't pay for it; returns seconds."""
        if self.keep_session_warm:
            self._spark()
        return self.session_start_s

    def close(self) -> None:
        """Cancel what still runs, wait for it, and stop the session."""
        for job_id, job in list(self._jobs.items()):
            if not self.status(job_id).state.is_final:
                self.cancel(job_id)
            if job.process is not None:
                try:
                    job.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    job.process.kill()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._session is not None and self._owns_session:
            self._session.stop()
        self._session = None

    # -- warm session ------------------------------------------------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafscale-spark")
        return self._executor

    def _spark(self) -> SparkSession:
        if self._session is None:
            import time  # noqa: PLC0415

            from pyspark import SparkContext  # noqa: PLC0415

            from spark_app.job import build_session  # noqa: PLC0415

            # A session this process already runs (a test's, a notebook's) is used, and left running.
            self._owns_session = getattr(SparkContext, "_active_spark_context", None) is None
            started = time.perf_counter()
            self._session = self._start_session(build_session)
            self.session_start_s = time.perf_counter() - started
            logger.info("local SparkSession started", extra={"seconds": round(self.session_start_s, 1)})
        return self._session

    def _start_session(self, build: Callable[..., SparkSession]) -> SparkSession:
        """The session, its JVM launch retried twice: forked after a gRPC channel (etcd) exists, the
        launch intermittently died before answering (`JAVA_GATEWAY_EXITED`, ~1 in 7 here)."""
        failures = 0
        while True:
            try:
                return build(master=self.master, conf=self.spark_conf)
            except Exception as exc:
                failures += 1
                if "JAVA_GATEWAY_EXITED" not in str(exc) or failures > 2:
                    raise
                logger.warning("the Spark JVM exited at launch; starting it again (%d)", failures)

    def _run_warm(self, run_id: str, plan_uri: str) -> RunResult:
        from spark_app.job import run_job  # noqa: PLC0415

        spark = self._spark()
        # Thread-local (PySpark pins Python threads to JVM threads): tags only this run's Spark jobs.
        spark.sparkContext.setJobGroup(run_id, f"kafscale-iceberg run {run_id}", interruptOnCancel=True)
        return run_job(spark, plan_uri, s3=self._s3, registry_credentials=self._registry_credentials)

    def _compact_warm(self, job_id: str, job_uri: str) -> CompactionJobResult:
        from spark_app.compaction import run_compaction_job  # noqa: PLC0415

        spark = self._spark()
        spark.sparkContext.setJobGroup(
            job_id, f"kafscale-iceberg compaction {job_id}", interruptOnCancel=True
        )
        return run_compaction_job(spark, job_uri, s3=self._s3)

    def _future_status(self, job: _Job, future: Future[RunResult | CompactionJobResult]) -> JobStatus:
        if future.cancelled():
            return JobStatus(job.run_id, JobState.CANCELLED, "CANCELLED", "cancelled before it started")
        if not future.done():
            state = JobState.RUNNING if future.running() else JobState.PENDING
            return JobStatus(job.run_id, state, state.value.upper())
        error = future.exception()
        if error is not None:
            return JobStatus(job.run_id, JobState.FAILED, "FAILED", f"{type(error).__name__}: {error}")
        return job_status_of(job.run_id, future.result(), cancelled=job.cancelled)

    # -- spark-submit ------------------------------------------------------------------------------

    def submit_command(self, plan_uri: str, *, flag: str = "--plan") -> list[str]:
        """The `spark-submit` command line of one run, or with `flag="--compaction"` of one
        compaction job (the same entry point EMR runs)."""
        command = [spark_submit_path(), "--master", self.master]
        for key, value in self.spark_conf.items():
            command += ["--conf", f"{key}={value}"]
        command += [entry_point_path(), flag, plan_uri]
        if self._s3.endpoint_url:
            command += ["--s3-endpoint-url", self._s3.endpoint_url]
        if self._s3.region:
            command += ["--s3-region", self._s3.region]
        if self._s3.path_style:
            command.append("--s3-path-style")
        return command

    def _submit(self, plan_uri: str, *, flag: str = "--plan") -> tuple[subprocess.Popen[bytes], Path]:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        credentials = self._registry_credentials
        if credentials is not None:
            env.update(credentials.as_environment())
        log = tempfile.NamedTemporaryFile(prefix="kafscale-spark-", suffix=".log", delete=False)  # noqa: SIM115
        with log:
            process = subprocess.Popen(
                self.submit_command(plan_uri, flag=flag), stdout=log, stderr=subprocess.STDOUT, env=env
            )
        return process, Path(log.name)

    def _process_status(self, job: _Job) -> JobStatus:
        assert job.process is not None
        code = job.process.poll()
        if code is None:
            return JobStatus(job.run_id, JobState.RUNNING, "RUNNING")
        if job.cancelled:
            return JobStatus(job.run_id, JobState.CANCELLED, "CANCELLED", f"terminated (exit {code})")
        if code == 0:
            return JobStatus(job.run_id, JobState.SUCCEEDED, "SUCCEEDED")
        tail = _tail(job.log_path)
        return JobStatus(job.run_id, JobState.FAILED, "FAILED", f"spark-submit exited {code}: {tail}")

    def _job(self, job_id: str) -> _Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise UnknownJobError(
                f"local job {job_id!r} is not known to this process (it was started by another, or "
                "before a restart); the run is re-planned once its lease expires"
            ) from None


def _tail(path: Path | None) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace")
    return text[-_LOG_TAIL:].strip()


def spark_submit_path() -> str:
    """The `spark-submit` script of the installed PySpark (or the one on PATH)."""
    spec = find_spec("pyspark")
    if spec is not None and spec.origin:
        script = Path(spec.origin).parent / "bin" / "spark-submit"
        if script.exists():
            return str(script)
    found = shutil.which("spark-submit")
    if found is None:
        raise KafscaleIcebergError("spark-submit not found: install the `spark` extra (pyspark)")
    return found


def entry_point_path() -> str:
    """The file path of `spark_app/main.py`, the job's entry point (also EMR's)."""
    spec = find_spec("spark_app.main")
    if spec is None or not spec.origin:
        raise KafscaleIcebergError("spark_app.main is not importable: is kafscale-iceberg installed?")
    return spec.origin
