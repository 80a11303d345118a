"""A Debezium CDC topic into an upsert table on the AWS flow (`make test-aws`): router -> launcher ->
the real state machine -> EMR Serverless job (local Spark), whose driver locates the changed keys in
the table version the plan names and whose tasks rewrite the files holding them -> the commit
function, which replaces them in one Iceberg commit on the Glue catalog reading no data file; and a
merge-on-read topic on each runner (EMR, the Lambda runner), its deletes folded by the maintenance
function's EMR compaction job; every AWS call is checked against its role in template.yaml. The box
and its fakes are described in tests/support/aws_box.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.support.aws_box import EMR_JOB_ROLE, Box, SparkBoxOpener
from tests.support.segments import put_segment

pytestmark = [pytest.mark.slow, pytest.mark.aws]

TOPIC = "dbserver1.inventory.customers"
TABLE = "shop.customers"


def upsert_box(spark_box: SparkBoxOpener, write: str = "auto", **options: Any) -> AbstractContextManager[Box]:
    """The box with the CDC topic landing in an upsert table (`upsert.write`: `write`)."""
    mapping = {
        "topic": TOPIC,
        "table": TABLE,
        "mode": "upsert",
        "upsert": {"key": ["id"], "cdc": "debezium", "write": write},
        "create_table_if_missing": True,
        "schema": {
            "columns": [
                {"name": "id", "type": "long", "required": True},
                {"name": "email", "type": "string"},
            ]
        },
    }
    maintenance = {"compaction_min_small_files": 2, "compaction_wait_seconds": 120}
    return spark_box(mappings=[mapping], maintenance=maintenance, **options)


@pytest.fixture
def box(spark_box: SparkBoxOpener) -> Iterator[Box]:
    with upsert_box(spark_box) as opened:
        yield opened


def changes(*events: tuple[str, int, str | None]) -> tuple[list[bytes | None], list[bytes | None]]:
    """Record keys and values of Debezium events `(op, id, email)`; op `t` is a tombstone."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for op, key, email in events:
        keys.append(json.dumps({"id": key}).encode())
        if op == "t":
            values.append(None)
            continue
        row = {"id": key, "email": email}
        before, after = (row, None) if op == "d" else (None, row)
        values.append(json.dumps({"op": op, "before": before, "after": after, "ts_ms": 1}).encode())
    return keys, values


def put(box: Box, partition: int, base: int, *events: tuple[str, int, str | None]) -> None:
    keys, values = changes(*events)
    put_segment(
        box.s3,
        box.segment_bucket,
        box.namespace,
        TOPIC,
        partition,
        base,
        len(events),
        keys=keys,
        values=values,
    )


def test_a_cdc_topic_lands_once_with_every_call_allowed(box: Box) -> None:
    put(box, 0, 0, ("r", 1, "a@x"), ("r", 2, "b@x"), ("c", 3, "c@x"), ("u", 1, "a2@x"))
    box.pump()
    put(box, 0, 4, ("d", 2, "b@x"), ("t", 2, None), ("u", 3, "c2@x"), ("c", 4, "d@x"))
    box.pump()

    rows = box.rows(TABLE)
    assert sorted((r["id"], r["email"]) for r in rows) == [(1, "a2@x"), (3, "c2@x"), (4, "d@x")], (
        box.describe()
    )
    assert box.committed_offsets(TOPIC) == {0: 7}
    assert box.fleet.count("CommitFunction") >= 2
    summary = box.catalog().load_table(TABLE).current_snapshot().summary
    assert summary["kafscale.upsert.files-rewritten"] == "1"  # the first run's file, without keys 1-3
    reads = [c for c in box.recorder.calls if c.action == "s3:GetObject" and c.resource.endswith(".parquet")]
    assert {c.role for c in reads if "/upsert/" not in c.resource and "/deleted_keys/" not in c.resource} == {
        EMR_JOB_ROLE
    }, "only the run's tasks read the table's data files"
    denied = box.recorder.denied()
    assert denied == [], "\n".join(map(str, denied))


def test_an_upsert_run_after_the_maintenance_functions_compaction_commits_at_its_first_attempt(
    box: Box,
) -> None:
    put(box, 0, 0, ("r", 1, "a@x"), ("r", 2, "b@x"))
    box.pump()
    put(box, 0, 2, ("r", 3, "c@x"))
    box.pump()
    report = box.fleet.invoke("MaintenanceFunction", {})
    (done,) = [t for t in report["tables"] if t["table"] == TABLE]
    assert done["compaction"]["committed"], report  # an EMR job merged the two runs' files

    put(box, 0, 3, ("u", 1, "a2@x"))  # a key of the compacted file: the run rewrites that file
    box.pump()
    assert sorted((r["id"], r["email"]) for r in box.rows(TABLE)) == [(1, "a2@x"), (2, "b@x"), (3, "c@x")]
    # Located in the compacted version at once: no run refused for the files the compaction replaced.
    assert [e["status"] for e in box.executions()] == ["SUCCEEDED"] * 3, box.describe()
    moved = [
        c
        for c in box.recorder.calls
        if c.role == "MaintenanceRole"
        and c.action == "s3:PutObject"
        and c.resource.endswith("/field-ids.json")
    ]
    assert len(moved) == 1, moved  # the compaction's version recorded for the next run
    denied = box.recorder.denied()
    assert denied == [], "\n".join(map(str, denied))


RUNNERS = {
    "emr": {"lambda": {"max_bytes": 0}},
    "lambda": {"lambda": {"max_bytes": 64 * 1024 * 1024}},
}


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_a_merge_on_read_cdc_topic_lands_once_on_each_runner_and_maintenance_folds_it(
    spark_box: SparkBoxOpener, runner: str
) -> None:
    with upsert_box(spark_box, write="merge-on-read", runner=RUNNERS[runner]) as box:
        put(box, 0, 0, ("r", 1, "a@x"), ("r", 2, "b@x"), ("c", 3, "c@x"), ("u", 1, "a2@x"))
        box.pump()
        put(box, 0, 4, ("d", 2, "b@x"), ("t", 2, None), ("u", 3, "c2@x"), ("c", 4, "d@x"))
        box.pump()
        table = box.catalog().load_table(TABLE)
        summary = table.current_snapshot().summary
        assert summary["kafscale.upsert.files-rewritten"] == "0"  # the first run's file stays...
        assert summary["added-position-deletes"] == "2"  # ...its rows of keys 2 and 3 deleted by position
        assert table.properties["write.update.mode"] == "merge-on-read"
        put(box, 0, 8, ("u", 1, "a3@x"))
        box.pump()
        summary = box.catalog().load_table(TABLE).current_snapshot().summary
        # One delete file per data file: key 1's row joins the file's two, the old delete file goes.
        assert (summary["added-position-deletes"], summary["removed-position-deletes"]) == ("3", "2")
        assert summary["total-delete-files"] == "1"  # the first run's file's (keys 1, 2 and 3)

        expected = [(1, "a3@x"), (3, "c2@x"), (4, "d@x")]
        assert sorted((r["id"], r["email"]) for r in box.rows(TABLE)) == expected, box.describe()
        assert box.committed_offsets(TOPIC) == {0: 8}
        lambda_runs = 3 if runner == "lambda" else 0
        assert (box.fleet.count("PlanRunnerFunction"), len(box.emr.started)) == (lambda_runs, 3 - lambda_runs)

        report = box.fleet.invoke("MaintenanceFunction", {})  # an EMR job folds the deletes
        (done,) = [t for t in report["tables"] if t["table"] == TABLE]
        assert done["compaction"]["committed"], report
        table = box.catalog().load_table(TABLE)
        assert table.current_snapshot().summary["total-delete-files"] == "0"
        assert sorted((r["id"], r["email"]) for r in box.rows(TABLE)) == expected
        denied = box.recorder.denied()
        assert denied == [], "\n".join(map(str, denied))
