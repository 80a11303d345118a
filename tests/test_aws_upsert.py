"""A Debezium CDC topic into an upsert table on the AWS flow (`make test-aws`): router -> launcher ->
the real state machine -> EMR Serverless job (local Spark), whose driver locates the changed keys in
the table version the plan names and whose tasks rewrite the files holding them -> the commit
function, which replaces them in one Iceberg commit on the Glue catalog reading no data file; every
AWS call is checked against its role in template.yaml. The box and its fakes are described in
tests/support/aws_box.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.aws_box import EMR_JOB_ROLE, Box, SparkBoxOpener
from tests.support.segments import put_segment

pytestmark = [pytest.mark.slow, pytest.mark.aws]

TOPIC = "dbserver1.inventory.customers"
TABLE = "shop.customers"


@pytest.fixture
def box(spark_box: SparkBoxOpener) -> Iterator[Box]:
    with spark_box(
        mappings=[
            {
                "topic": TOPIC,
                "table": TABLE,
                "mode": "upsert",
                "upsert": {"key": ["id"], "cdc": "debezium"},
                "create_table_if_missing": True,
                "schema": {
                    "columns": [
                        {"name": "id", "type": "long", "required": True},
                        {"name": "email", "type": "string"},
                    ]
                },
            }
        ],
        maintenance={"compaction_min_small_files": 2, "compaction_wait_seconds": 120},
    ) as opened:
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


@pytest.fixture
def mor_box(spark_box: SparkBoxOpener) -> Iterator[Box]:
    with spark_box(
        mappings=[
            {
                "topic": TOPIC,
                "table": TABLE,
                "mode": "upsert",
                "upsert": {"key": ["id"], "cdc": "debezium", "write": "merge-on-read"},
                "create_table_if_missing": True,
                "schema": {
                    "columns": [
                        {"name": "id", "type": "long", "required": True},
                        {"name": "email", "type": "string"},
                    ]
                },
            }
        ],
        maintenance={"compaction_min_small_files": 2, "compaction_wait_seconds": 120},
    ) as opened:
        yield opened


def test_a_merge_on_read_cdc_topic_lands_once_with_every_call_allowed(mor_box: Box) -> None:
    box = mor_box
    put(box, 0, 0, ("r", 1, "a@x"), ("r", 2, "b@x"), ("c", 3, "c@x"), ("u", 1, "a2@x"))
    box.pump()
    put(box, 0, 4, ("d", 2, "b@x"), ("t", 2, None), ("u", 3, "c2@x"), ("c", 4, "d@x"))
    box.pump()

    expected = [(1, "a2@x"), (3, "c2@x"), (4, "d@x")]
    assert sorted((r["id"], r["email"]) for r in box.rows(TABLE)) == expected, box.describe()
    assert box.committed_offsets(TOPIC) == {0: 7}
    table = box.catalog().load_table(TABLE)
    summary = table.current_snapshot().summary
    assert summary["kafscale.upsert.files-rewritten"] == "0"  # the first run's file stays...
    assert summary["added-position-deletes"] == "2"  # ...its rows of keys 2 and 3 deleted by position
    assert table.properties["write.update.mode"] == "merge-on-read"
    denied = box.recorder.denied()
    assert denied == [], "\n".join(map(str, denied))
