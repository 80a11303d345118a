"""The Lambda runner on the AWS flow (`make test-aws`): the launcher sends a run of at most
`runner.lambda.max_bytes` planned bytes to the runner function (the Spark job's tasks in-process) and
a bigger one to EMR Serverless; the state machine's `Choice` reads the ticket; a runner that times out,
runs out of memory or is killed is an aborted run, and the retry lands every record once.

The box (tests/support/aws_box.py) runs the real state machine; its fakes are described there: the
Lambda runner's handler runs in this process under Lambda's contract, and Lambda's kills (timeout, out
of memory) are faults the box's fleet raises before the handler runs or after it did all its work.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafscale_iceberg.domain.runner_choice import RunnerKind
from tests.support.aws_box import Box, local_emr_runner, open_box, out_of_memory, timed_out
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

pytestmark = [pytest.mark.slow, pytest.mark.aws]

SMALL, BIG = "clicks", "orders"
# A run of a few records is far below it, one of 150 records (~150 bytes each) above it.
MAX_BYTES = 8_000


@pytest.fixture
def spark_runner(spark: Any, moto_server: MotoEndpoint) -> Iterator[Any]:
    runner = local_emr_runner(moto_server.url)
    yield runner
    runner.close()


@pytest.fixture
def box(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Box]:
    with open_box(
        moto_url=moto_server.url,
        etcd=etcd_server,
        spark_runner=spark_runner,
        tmp_path=tmp_path,
        monkeypatch=monkeypatch,
        mappings=[
            {"topic": SMALL, "table": f"shop.{SMALL}", "create_table_if_missing": True},
            {"topic": BIG, "table": f"shop.{BIG}", "create_table_if_missing": True},
        ],
        runner={"lambda": {"max_bytes": MAX_BYTES}},
    ) as box:
        yield box


def _offsets(box: Box, topic: str) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in box.rows(f"shop.{topic}"))


def _run_documents(box: Box, topic: str, name: str) -> list[dict[str, Any]]:
    """Every run's `name` document of `topic` in the runs bucket."""
    bucket = box.deployment.attribute("RunsBucket", "Ref")
    listed = box.s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{topic}/").get("Contents", [])
    keys = sorted(o["Key"] for o in listed if o["Key"].endswith(f"/{name}"))
    return [json.loads(box.s3.get_object(Bucket=bucket, Key=key)["Body"].read()) for key in keys]


def _assert_iam(box: Box) -> None:
    denied = box.recorder.denied()
    assert denied == [], "\n".join(map(str, denied))


def test_small_runs_go_through_the_lambda_runner_and_big_ones_through_emr(box: Box) -> None:
    put_segment(box.s3, box.segment_bucket, box.namespace, SMALL, 0, 0, 5)
    put_segment(box.s3, box.segment_bucket, box.namespace, BIG, 0, 0, 150)
    box.pump()

    assert _offsets(box, SMALL) == [(0, o) for o in range(5)], box.describe()
    assert _offsets(box, BIG) == [(0, o) for o in range(150)], box.describe()
    (small,) = _run_documents(box, SMALL, "plan.json")
    (big,) = _run_documents(box, BIG, "plan.json")
    assert small["runner"] == RunnerKind.LAMBDA.value
    assert sum(s["size_bytes"] for p in small["partitions"] for s in p["segments"]) <= MAX_BYTES
    assert big["runner"] == RunnerKind.EMR_SERVERLESS.value
    # One runner invocation for the small run, one EMR job for the big one, started by one call.
    assert box.fleet.count("PlanRunnerFunction") == 1
    assert len(box.emr.started) == 1
    assert box.recorder.count("emr-serverless:StartJobRun") == 1
    assert box.recorder.count("emr-serverless:StartJobRun", "StartJobRole") == 0
    assert sorted(e["status"] for e in box.executions()) == ["SUCCEEDED", "SUCCEEDED"]
    # The runner's own calls were seen (its plan, its segment, its data files) and are all allowed.
    assert box.recorder.count("s3:GetObject", "PlanRunnerRole") >= 2
    lake = f"arn:aws:s3:::{box.warehouse.removeprefix('s3://').split('/')[0]}/"
    assert any(
        c.role == "PlanRunnerRole" and c.action == "s3:PutObject" and c.resource.startswith(lake)
        for c in box.recorder.calls
    )
    _assert_iam(box)


@pytest.mark.parametrize(
    ("when", "fault"),
    [
        ("before", timed_out),
        ("before", out_of_memory),
        ("after", timed_out),  # killed once its files and result.json were written: the answer is lost
        ("after", out_of_memory),
    ],
)
def test_a_lambda_runner_killed_mid_run_is_aborted_and_the_retry_lands_once(
    box: Box, when: str, fault: Callable[[], None]
) -> None:
    faults = box.fleet.faults if when == "before" else box.fleet.killed_after
    faults["PlanRunnerFunction"] = [fault]
    put_segment(box.s3, box.segment_bucket, box.namespace, SMALL, 0, 0, 4)
    box.pump()

    assert faults["PlanRunnerFunction"] == []  # the fault fired
    assert _offsets(box, SMALL) == [(0, o) for o in range(4)], box.describe()
    assert box.committed_offsets(SMALL) == {0: 3}
    assert sorted(e["status"] for e in box.executions()) == ["FAILED", "SUCCEEDED"]
    assert box.fleet.count("AbortFunction") == 1
    (aborted,) = _run_documents(box, SMALL, "outcome.json")
    assert aborted["status"] == "aborted"
    assert ("Sandbox.Timedout" if fault is timed_out else "Runtime.OutOfMemory") in aborted["reason"]
    assert aborted["written_under"]  # where its files may be: orphans, cleaned like any failed run's
    # The retry, as small, went to EMR Serverless: in Lambda it would be killed again, forever.
    runners = sorted(p["runner"] for p in _run_documents(box, SMALL, "plan.json"))
    assert runners == ["emr_serverless", "lambda"]
    assert box.fleet.count("PlanRunnerFunction") == 1
    assert len(box.emr.started) == 1

    # Its commit ended the streak: the topic's next small run is in Lambda again.
    put_segment(box.s3, box.segment_bucket, box.namespace, SMALL, 0, 4, 2)
    box.pump()
    assert _offsets(box, SMALL) == [(0, o) for o in range(6)], box.describe()
    runners = sorted(p["runner"] for p in _run_documents(box, SMALL, "plan.json"))
    assert runners == ["emr_serverless", "lambda", "lambda"]
    assert box.fleet.count("PlanRunnerFunction") == 2
    assert len(box.emr.started) == 1
    _assert_iam(box)
