"""Table maintenance on the AWS path (`make test-aws`): the scheduled MaintenanceFunction plans a
compaction and runs it as an EMR Serverless job through the job runner, then checks the job's result
and commits it; every AWS call is checked against its role in template.yaml.

The box is tests/support/aws_box.py: real state machine (moto's ASL interpreter), S3/SQS/EMR
Serverless API on moto, a real etcd, the template's Glue catalog on moto, and the EMR job's compute
on local Spark (the same `spark_app` code; the only fake is EMR's job timing - a job runs as soon as
it is started).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.aws_box import Box, local_emr_runner
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment
from tests.test_aws_flow import TABLE, TOPIC, _assert_iam, _box

pytestmark = [pytest.mark.slow, pytest.mark.aws]


@pytest.fixture
def spark_runner(spark: Any, moto_server: MotoEndpoint) -> Iterator[Any]:
    runner = local_emr_runner(moto_server.url)
    yield runner
    runner.close()


# The box's tables are small: `compaction_inline_max_bytes: 0` sends their compactions to EMR as a
# big table's are (the default compacts them inside the maintenance function: the last test).
MAINTENANCE = {
    "compaction_min_small_files": 2,
    "orphan_grace": "1h",
    "compaction_wait_seconds": 120,
    "compaction_inline_max_bytes": 0,
}


def _make_box(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    **maintenance: Any,
) -> Iterator[Box]:
    yield from _box(
        moto_server,
        etcd_server,
        spark_runner,
        tmp_path,
        monkeypatch,
        maintenance={**MAINTENANCE, **maintenance},
    )


@pytest.fixture
def box(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Box]:
    yield from _make_box(moto_server, etcd_server, spark_runner, tmp_path, monkeypatch)


def _produce(box: Box, runs: int) -> None:
    for run in range(runs):
        _produce_run(box, run)


def _produce_run(box: Box, run: int) -> None:
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, run * 4, 4)
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 1, run * 3, 3)
    box.pump()


def test_the_scheduled_maintenance_compacts_through_an_emr_job_and_every_call_is_allowed(box: Box) -> None:
    _produce(box, 3)
    rows_before = sorted((r["partition"], r["offset"]) for r in box.rows(TABLE))
    assert len(rows_before) == 21
    files_before = len(box.data_files(TABLE))
    jobs_before = len(box.emr.started)

    report = box.fleet.invoke("MaintenanceFunction", {})

    (done,) = [t for t in report["tables"] if t["table"] == TABLE]
    assert done["compaction"]["committed"], report
    assert len(box.emr.started) == jobs_before + 1  # the rewrite ran as an EMR Serverless job
    (job_run,) = box.emr.started[jobs_before:]
    assert box.emr.local_jobs[job_run].startswith("compaction-")
    files = box.data_files(TABLE)
    assert len(files) == 2 < files_before  # one file per Kafka partition
    assert all("/compaction-" in f.file_path for f in files)
    assert sorted((r["partition"], r["offset"]) for r in box.rows(TABLE)) == rows_before
    _assert_iam(box)
    assert box.recorder.count("emr-serverless:StartJobRun", "MaintenanceRole") == 1
    # The next run lands after the compaction, exactly once.
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 12, 2)
    box.pump()
    assert len(box.rows(TABLE)) == 23
    assert box.committed_offsets(TOPIC) == {0: 13, 1: 8}
    _assert_iam(box)


def test_a_compaction_job_still_running_is_committed_by_the_next_pass(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for box in _make_box(
        moto_server, etcd_server, spark_runner, tmp_path, monkeypatch, compaction_wait_seconds=0
    ):
        _produce(box, 2)
        files_before = {f.file_path for f in box.data_files(TABLE)}
        jobs_before = len(box.emr.started)
        box.emr.faults.append("STUCK")  # EMR queues the job: not done within the pass
        first = box.fleet.invoke("MaintenanceFunction", {})
        (done,) = [t for t in first["tables"] if t["table"] == TABLE]
        assert not done["compaction"]["committed"]
        assert {f.file_path for f in box.data_files(TABLE)} == files_before  # nothing committed yet
        # The job "finishes": the fake's stuck job is failed by EMR's timeout -> the next pass drops
        # it (its files are orphans) and plans a new job, which runs and is committed by a later pass.
        box.emr.started_at = dict.fromkeys(box.emr.started_at, 0.0)
        second = box.fleet.invoke("MaintenanceFunction", {})
        (done,) = [t for t in second["tables"] if t["table"] == TABLE]
        assert not done["compaction"]["committed"]  # the timed-out job: nothing to commit
        passes = 0  # later passes: the first starts a new job, one after it ends commits it
        while passes < 60:
            passes += 1
            report = box.fleet.invoke("MaintenanceFunction", {})
            (done,) = [t for t in report["tables"] if t["table"] == TABLE]
            if done["compaction"]["committed"]:
                break
            time.sleep(1)
        assert done["compaction"]["committed"], report
        assert passes >= 2  # started by one pass, committed by a later one
        assert len(box.emr.started) == jobs_before + 2  # the timed-out job, then the committed one
        assert len(box.data_files(TABLE)) == 2  # one file per Kafka partition
        assert len(box.rows(TABLE)) == 14
        _assert_iam(box)


def test_a_table_gathering_small_files_triggers_a_compaction_from_the_commit_step(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for box in _make_box(
        moto_server, etcd_server, spark_runner, tmp_path, monkeypatch, trigger_small_files=2
    ):
        run = 0
        while box.fleet.count("MaintenanceFunction") == 0:
            assert len(box.data_files(TABLE)) <= 2  # no trigger while not more than 2 new files
            assert run < 6, "the trigger never fired"
            _produce_run(box, run)  # each committed run adds small files (runs may coalesce)
            run += 1
        # The commit that made it more than 2 files invoked the maintenance function (async): a
        # pass of this topic, its compaction an EMR job, committed - no schedule fired.
        assert box.fleet.count("MaintenanceFunction") == 1
        # The commit role's one invocation of it (its others reach the checkpoint function).
        maintenance_invokes = [
            c
            for c in box.recorder.calls
            if (c.role, c.action) == ("CommitRole", "lambda:InvokeFunction")
            and "MaintenanceFunction" in c.resource
        ]
        assert len(maintenance_invokes) == 1
        assert len(box.data_files(TABLE)) == 2  # compacted: one file per Kafka partition
        assert len(box.rows(TABLE)) == 7 * run
        _produce_run(box, run)  # one new file since the pass: no trigger
        assert box.fleet.count("MaintenanceFunction") == 1
        _assert_iam(box)


def test_a_small_table_compacts_inside_the_maintenance_function_without_an_emr_job(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the default `compaction_inline_max_bytes` (256 MiB) a table of a few KB is rewritten by the
    maintenance function itself: no EMR job, the same one snapshot, no row lost or doubled, every
    call allowed by the maintenance role; the next run lands after it exactly once."""
    defaults = {k: v for k, v in MAINTENANCE.items() if k != "compaction_inline_max_bytes"}
    for box in _box(moto_server, etcd_server, spark_runner, tmp_path, monkeypatch, maintenance=defaults):
        _produce(box, 3)
        rows_before = sorted((r["partition"], r["offset"]) for r in box.rows(TABLE))
        files_before = len(box.data_files(TABLE))
        jobs_before = len(box.emr.started)

        report = box.fleet.invoke("MaintenanceFunction", {})

        (done,) = [t for t in report["tables"] if t["table"] == TABLE]
        assert done["compaction"]["committed"], report
        assert len(box.emr.started) == jobs_before  # no job: the function rewrote the files
        assert box.recorder.count("emr-serverless:StartJobRun", "MaintenanceRole") == 0
        files = box.data_files(TABLE)
        assert len(files) == 2 < files_before  # one file per Kafka partition
        assert sorted((r["partition"], r["offset"]) for r in box.rows(TABLE)) == rows_before
        _assert_iam(box)
        put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 12, 2)
        box.pump()
        assert len(box.rows(TABLE)) == 23
        assert box.committed_offsets(TOPIC) == {0: 13, 1: 8}
        _assert_iam(box)
