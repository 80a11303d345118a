"""The in-process runner: the Spark job's driver and tasks without a JVM (`execution/`), and the inline
`JobRunner` built on it (`runner.type: inline`).

It must write what the Spark job writes for the same plan: the same files, rows and result (compared
with a real local Spark run), and fail the way the Spark job fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.jobs import JobState
from kafscale_iceberg.domain.runner_choice import RunnerKind, lambda_runner_traits
from kafscale_iceberg.domain.runs import FailureKind, RunPlan, RunResult, RunStatus
from kafscale_iceberg.execution.driver import TaskSizing, run_plan
from kafscale_iceberg.execution.in_process import InProcessTaskExecutor, run_plan_in_process, usable_cores
from kafscale_iceberg.execution.job_runner import ChosenJobRunner, InProcessJobRunner
from kafscale_iceberg.local.pipeline import RunEnd
from kafscale_iceberg.local.wiring import make_runner, open_pipeline
from kafscale_iceberg.segments.layout import Codec
from spark_app.job import run_job
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment
from tests.support.spark_job import SegmentFolder, make_plan, write_plan

SMALL_TASKS = TaskSizing(max_tasks=4, min_task_bytes=1)
RANGES = {0: (4, 75), 1: (19, 39), 2: (-1, 9)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> SegmentFolder:
    """Three partitions, several codecs, ranges starting and ending inside segments and at their edges."""
    folder = SegmentFolder(tmp_path_factory.mktemp("segments"))
    folder.add_orders(0, 0, 30, codecs=(Codec.NONE, Codec.GZIP))
    folder.add_orders(0, 30, 30, codecs=(Codec.SNAPPY, Codec.LZ4))
    folder.add_orders(0, 60, 30, codecs=(Codec.ZSTD,))
    folder.add_orders(1, 0, 20)
    folder.add_orders(1, 20, 20, codecs=(Codec.ZSTD, Codec.GZIP), batch_size=7)
    folder.add_orders(2, 0, 10, codecs=(Codec.LZ4,))
    return folder


def _rows(result: RunResult) -> list[dict[str, object]]:
    rows = [r for f in result.data_files for r in pq.read_table(f.uri).to_pylist()]
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def _relative(result: RunResult, base: Path) -> str:
    """The result's JSON without its timings, its URIs relative to `base` (two runs compared)."""
    text = result.model_dump_json(exclude={"timings"})
    return text.replace(str(base), "<out>")


def test_the_in_process_runner_writes_what_the_spark_job_writes(
    spark: SparkSession, folder: SegmentFolder, tmp_path: Path
) -> None:
    by_spark = make_plan(folder, str(tmp_path / "spark"), ranges=RANGES)
    in_process = make_plan(folder, str(tmp_path / "inline"), ranges=RANGES)

    spark_result = run_job(spark, write_plan(by_spark), sizing=SMALL_TASKS)
    inline_result = run_plan(write_plan(in_process), InProcessTaskExecutor(2), sizing=SMALL_TASKS)

    assert spark_result.status is RunStatus.SUCCEEDED, spark_result.failure
    assert _relative(inline_result, tmp_path / "inline") == _relative(spark_result, tmp_path / "spark")
    assert _rows(inline_result) == _rows(spark_result)
    assert inline_result.counts.written == 71 + 20 + 10
    stored = RunResult.model_validate_json(Path(in_process.result_uri).read_text())
    assert stored == inline_result


def test_one_worker_runs_the_tasks_one_after_another_and_writes_the_same_files(
    folder: SegmentFolder, tmp_path: Path
) -> None:
    plan = make_plan(folder, str(tmp_path), ranges=RANGES)
    one = run_plan_in_process(write_plan(plan), workers=1, sizing=SMALL_TASKS)
    two = run_plan_in_process(write_plan(plan), workers=2, sizing=SMALL_TASKS)

    assert one.status is RunStatus.SUCCEEDED, one.failure
    assert [(f.uri, f.size_bytes) for f in one.data_files] == [(f.uri, f.size_bytes) for f in two.data_files]
    assert [r["offset"] for r in _rows(one) if r["partition"] == 2] == list(range(10))


def test_a_missing_segment_fails_the_run_as_unavailable_naming_it(tmp_path: Path) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 10)
    missing = folder.add_orders(0, 10, 10)
    (folder.root / missing.key).unlink()
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 19)})

    result = run_plan_in_process(write_plan(plan), workers=2, sizing=SMALL_TASKS)

    assert result.status is RunStatus.FAILED
    assert result.failure is not None
    assert result.failure.kind is FailureKind.SEGMENT_UNAVAILABLE
    assert result.failure.segment_key == missing.key
    assert result.data_files == ()


class _Gate:
    """Task work that blocks its first task until released (to cancel a run while it runs)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.ran: list[int] = []

    def __call__(self, indexes: Iterable[int]) -> Iterator[str]:
        for index in indexes:
            self.entered.set()
            self.release.wait(10)
            self.ran.append(index)
            yield str(index)


def test_a_cancelled_executor_starts_no_further_task() -> None:
    executor = InProcessTaskExecutor(1)
    gate = _Gate()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            executor.map_tasks(gate, 3)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert gate.entered.wait(10)
    executor.cancel()
    gate.release.set()
    thread.join(10)

    assert gate.ran == [0]
    assert [type(e).__name__ for e in outcome] == ["CancelledError"]


def test_a_lambda_function_runs_as_many_task_threads_as_its_memory_buys_vcpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lambda shows a 1,769 MB function two cores but gives it one vCPU's share: one task thread
    (two contend: kafscale_iceberg/cost/measured/throughput.json); 3,538 MB buys two."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert usable_cores() == 2
    for memory, threads in (("1769", 1), ("1024", 1), ("3538", 2), ("10240", 2)):
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory)
        assert usable_cores() == threads, memory
        assert InProcessTaskExecutor()._workers == threads


def test_the_inline_runner_runs_a_plan_once_per_run_id_and_reports_its_result(
    folder: SegmentFolder, tmp_path: Path
) -> None:
    plan = make_plan(folder, str(tmp_path), ranges=RANGES)
    uri = write_plan(plan)
    runner = InProcessJobRunner(workers=2)
    try:
        job_id = runner.start(plan, uri)
        assert runner.start(plan, uri) == job_id == plan.run_id
        assert runner.wait(job_id, 60)
        status = runner.status(job_id)
    finally:
        runner.close()

    assert status.state is JobState.SUCCEEDED, status.detail
    result = RunResult.model_validate_json(Path(plan.result_uri).read_text())
    assert result.counts.written == 71 + 20 + 10


def test_the_inline_runner_reports_a_failed_run_with_its_reason(tmp_path: Path) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    segment = folder.add_orders(0, 0, 10)
    (folder.root / segment.key).unlink()
    plan: RunPlan = make_plan(folder, str(tmp_path), ranges={0: (-1, 9)})
    runner = InProcessJobRunner(workers=1)
    try:
        job_id = runner.start(plan, write_plan(plan))
        assert runner.wait(job_id, 60)
        status = runner.status(job_id)
    finally:
        runner.close()

    assert status.state is JobState.FAILED
    assert "segment_unavailable" in status.detail
    assert segment.key in status.detail


def test_run_with_the_inline_runner_commits_every_record_once(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    bucket = moto_server.new_bucket()
    s3 = moto_server.client("s3")
    config = config_from_mapping(
        local_document(
            tmp_path,
            moto_server,
            bucket=bucket,
            namespace="prod",
            etcd_url=etcd_server.url,
            runs={"retry_backoff_seconds": 0},
            runner={"type": "inline", "inline": {"workers": 2}},
            mappings=[
                {
                    "topic": "orders",
                    "table": "shop.orders",
                    "create_table_if_missing": True,
                    "schema": {"columns": [{"name": "order_id", "type": "long", "required": True}]},
                }
            ],
        ),
        source="test",
    )
    put_segment(s3, bucket, "prod", "orders", 0, 0, 30, codec=Codec.GZIP)
    put_segment(s3, bucket, "prod", "orders", 1, 0, 20, codec=Codec.ZSTD)

    assert isinstance(make_runner(Assembly(config)), InProcessJobRunner)
    with open_pipeline(config) as pipeline:
        first = pipeline.run_once()
        put_segment(s3, bucket, "prod", "orders", 0, 30, 5)
        second = pipeline.run_once()

    assert first.ok, first.failed
    assert [r.end for r in first.runs + second.runs] == [RunEnd.COMMITTED, RunEnd.COMMITTED]
    table = load_iceberg_catalog(CatalogSettings.from_config(config)).load_table("shop.orders")
    rows = sorted((r["partition"], r["offset"]) for r in table.scan().to_arrow().to_pylist())
    assert rows == [(0, o) for o in range(35)] + [(1, o) for o in range(20)]


@pytest.mark.slow
def test_the_warm_cache_command_fills_the_numba_cache_a_cold_start_then_loads(tmp_path: Path) -> None:
    """What the Lambda runner's image does at build time (infra/lambda/runner.Dockerfile)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NUMBA_CPU_NAME": "generic"}
    command = [sys.executable, "-m", "kafscale_iceberg.execution.warm_cache"]
    built = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr
    for topic in ("warm", "warm_avro", "warm_protobuf"):
        assert f"numba cache warmed: {topic} run succeeded, 200 records" in built.stdout
    # Each compiled kernel a run uses, compiled by a real run of its format: the JSON record walker
    # and scanner, the Avro payload check and the Protobuf wire reader.
    cached = {path.name.split("-")[0] for path in (tmp_path / "cache").rglob("*.nbi")}
    for kernel in ("scan.scan_records", "json_scan.scan_values", "avro_skip.check_records"):
        assert kernel in cached
    assert "protobuf_wire.scan_messages" in cached

    cold = subprocess.run(
        command,
        env={**env, "NUMBA_DEBUG_CACHE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert cold.returncode == 0, cold.stderr
    assert "data loaded from" in cold.stdout + cold.stderr
    assert "data saved to" not in cold.stdout + cold.stderr


def test_run_on_emr_serverless_runs_the_lambda_sized_plans_in_process_and_the_others_on_emr(
    folder: SegmentFolder, moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    """`run` with `runner.type: emr_serverless` follows the launcher's choice as AWS does (EMR
    Serverless is moto's: its job runs report SUCCESS at once and run nothing)."""
    from kafscale_iceberg.adapters.emr_serverless import EmrServerlessJobRunner
    from tests.test_emr_serverless import _settings

    emr: Any = moto_server.client("emr-serverless")
    app_id = emr.create_application(name="kafscale", releaseLabel="emr-7.2.0", type="SPARK")["applicationId"]
    lambda_runner = InProcessJobRunner(workers=1, traits=lambda_runner_traits(10**6))
    runner = ChosenJobRunner(
        [lambda_runner, EmrServerlessJobRunner(_settings(app_id), emr, timeout_minutes=5)]
    )
    small = make_plan(folder, str(tmp_path / "small"), ranges={2: (-1, 9)})
    small = small.model_copy(update={"runner": RunnerKind.LAMBDA})
    big = make_plan(folder, str(tmp_path / "big"), ranges=RANGES)
    try:
        small_job = runner.start(small, write_plan(small))
        big_job = runner.start(big, write_plan(big))
        assert small_job == small.run_id  # the in-process runner's job id
        assert big_job != big.run_id  # EMR's job run id
        assert emr.get_job_run(applicationId=app_id, jobRunId=big_job)["jobRun"]["name"] == big.run_id
        while not runner.status(small_job).state.is_final:
            time.sleep(0.05)
        assert runner.status(small_job).state is JobState.SUCCEEDED
        assert runner.status(big_job).state is JobState.SUCCEEDED
    finally:
        runner.close()
    assert Path(small.result_uri).exists()  # ran here
    assert not Path(big.result_uri).exists()  # went to EMR
