"""A topic behind by more than one run catches up in runs that grow with its backlog (`make test-aws`).

The launcher plans a run of up to `runs.max_bytes_per_run`, capped on EMR Serverless at what the
biggest job within the application's `EmrMaximumCpu` carries (`domain/run_sizing.py`), and sizes
the job's executors from the run's bytes (`domain/job_sizing.py`). The box deploys the template with
`EmrMaximumCpu: 7 vCPU` (a driver and 3 executors), so the parameter reaches the launcher as the
deployed functions read it. One executor's share (1 GiB on AWS) is scaled to one segment of the box's,
so a backlog of a few segments is several jobs' worth; everything else runs as deployed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from kafscale_iceberg.domain import job_sizing
from kafscale_iceberg.domain.runner_choice import RunnerKind
from tests.support.aws_box import REGION, Box, SparkBoxOpener
from tests.support.segments import put_segment

pytestmark = [pytest.mark.slow, pytest.mark.aws]

TOPIC = "orders"
RECORDS = 40  # per segment
BACKLOG = {0: 3, 1: 2}  # segments per partition: five segments, more than one run holds


@pytest.fixture
def box(spark_box: SparkBoxOpener) -> Iterator[Box]:
    with spark_box(
        mappings=[{"topic": TOPIC, "table": f"shop.{TOPIC}", "create_table_if_missing": True}],
        runner={"lambda": {"max_bytes": 0}},  # every run on EMR Serverless
        parameters={"EmrMaximumCpu": "7 vCPU"},
    ) as opened:
        yield opened


def _plans(box: Box) -> list[dict[str, Any]]:
    bucket = box.deployment.attribute("RunsBucket", "Ref")
    listed = box.s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{TOPIC}/").get("Contents", [])
    keys = [o["Key"] for o in listed if o["Key"].endswith("/plan.json")]
    plans = [json.loads(box.s3.get_object(Bucket=bucket, Key=key)["Body"].read()) for key in keys]
    return sorted(plans, key=lambda p: min(s["base_offset"] for q in p["partitions"] for s in q["segments"]))


def _executors(box: Box, job_run_id: str) -> int:
    """The executor count the job run was submitted with (its `sparkSubmitParameters`)."""
    emr = boto3.client("emr-serverless", endpoint_url=box.moto_url, region_name=REGION)
    # This stack's application (the moto server is shared: other tests' may be gone by now).
    application = next(iter(box.fleet.environment.values()))["KAFSCALE_ICEBERG_EMR_APPLICATION_ID"]
    job = emr.get_job_run(applicationId=application, jobRunId=job_run_id)["jobRun"]
    parameters = job["jobDriver"]["sparkSubmit"]["sparkSubmitParameters"]
    return int(re.findall(r"spark\.executor\.instances=(\d+)", parameters)[-1])


def test_a_backlog_bigger_than_one_run_is_committed_in_runs_sized_to_the_application(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = [
        len(put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, p, i * RECORDS, RECORDS).kfs)
        for p, count in BACKLOG.items()
        for i in range(count)
    ]
    per_executor = max(sizes)
    monkeypatch.setattr(job_sizing, "BYTES_PER_EXECUTOR", per_executor)  # 1 GiB -> one box segment
    monkeypatch.setattr(job_sizing, "TINY_JOB_MAX_BYTES", per_executor // 2)
    box.pump()

    rows = sorted((r["partition"], r["offset"]) for r in box.rows(f"shop.{TOPIC}"))
    expected = sorted((p, o) for p, count in BACKLOG.items() for o in range(count * RECORDS))
    assert rows == expected, box.describe()  # every record once
    plans = _plans(box)
    planned = [sum(s["size_bytes"] for q in p["partitions"] for s in q["segments"]) for p in plans]
    # EmrMaximumCpu 7 vCPU: a driver and 3 executors, so a run carries at most 3 executors' share.
    assert all(b <= 3 * per_executor for b in planned), planned
    assert len(plans) == 2, planned  # five segments: a run of three, then one of two
    assert [sum(len(q["segments"]) for q in p["partitions"]) for p in plans] == [3, 2]
    assert all(p["runner"] == RunnerKind.EMR_SERVERLESS.value for p in plans)
    # Each job's executors grew with its bytes (one executor's share each), up to the application's.
    executors = [_executors(box, job) for job in box.emr.started]
    assert sorted(executors, reverse=True) == [min(3, math.ceil(b / per_executor)) for b in planned]
    assert executors[0] == 3
    assert sorted(e["status"] for e in box.executions()) == ["SUCCEEDED", "SUCCEEDED"]
    denied = box.recorder.denied()
    assert denied == [], "\n".join(map(str, denied))
