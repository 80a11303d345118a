"""The local runner can block until a job ends, so the one-machine loop commits without a poll delay."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kafscale_iceberg.domain.jobs import JobState
from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner
from kafscale_iceberg.ports import AwaitableJobRunner
from tests.support.spark_job import SegmentFolder, make_plan, write_plan


@pytest.mark.slow
def test_wait_returns_when_the_job_ends(tmp_path: Path, spark: SparkSession) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 20)
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, 19)})
    runner = LocalSparkJobRunner(master="local[2]")
    assert isinstance(runner, AwaitableJobRunner)
    try:
        job_id = runner.start(plan, write_plan(plan))

        ended = runner.wait(job_id, timeout_s=120)

        assert ended
        assert runner.status(job_id).state is JobState.SUCCEEDED
        assert runner.wait(job_id, timeout_s=0)  # an ended job answers at once
    finally:
        runner.close()
