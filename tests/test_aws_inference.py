"""`schema.source: infer` on the AWS path: launcher Lambda -> the real state machine -> the EMR job's
observation and conversion stages (local Spark) -> the commit Lambda evolving the Glue table in the
same commit as the run's files, every AWS call checked against its role in template.yaml.

The box and each of its fakes (Lambda invoke, SQS event source mappings, time, EMR compute, IAM) are
described in tests/support/aws_box.py, with what each does not cover.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.types import StringType

from kafscale_iceberg.adapters.iceberg_schemas import table_columns
from kafscale_iceberg.domain.field_ids import TopicFieldIds, field_ids_uri
from tests.support.aws_box import Box, SparkBoxOpener
from tests.support.segments import put_segment

pytestmark = [pytest.mark.slow, pytest.mark.aws]

TOPIC = "pizzas"
TABLE = "shop.pizzas"


@pytest.fixture
def box(spark_box: SparkBoxOpener) -> Iterator[Box]:
    with spark_box(
        mappings=[
            {
                "topic": TOPIC,
                "table": TABLE,
                "create_table_if_missing": True,
                "schema": {"source": "infer"},
            }
        ],
        runs={"retry_backoff_seconds": 60},  # so a re-signal at once is the race rule, not the setting
    ) as opened:
        yield opened


def _pizza(offset: int, **more: Any) -> bytes:
    return json.dumps({"order_id": f"o-{offset}", "store_id": 42, "meats": ["ham"], **more}).encode()


def _columns(box: Box) -> dict[str, str]:
    return {c.name: c.type_name for c in table_columns(box.catalog().load_table(TABLE).schema())}


def test_an_inferred_table_is_created_and_evolves_with_its_data_through_the_state_machine(box: Box) -> None:
    put_segment(
        box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 3, values=[_pizza(o) for o in range(3)]
    )
    box.pump()
    assert len(box.rows(TABLE)) == 3, box.describe()
    assert _columns(box) == {"order_id": "string", "store_id": "long", "meats": "list<string>"}
    versions = len(box.catalog().load_table(TABLE).metadata.metadata_log)

    later = [_pizza(3, tip=2.5), _pizza(4, delivery={"minutes": 25})]
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 3, 2, values=later)
    box.pump()
    table = box.catalog().load_table(TABLE)
    assert len(table.metadata.metadata_log) == versions + 1  # columns and files: one Glue UpdateTable
    assert list(_columns(box))[-2:] == ["tip", "delivery"]
    rows = sorted(box.rows(TABLE), key=lambda r: r["offset"])
    assert [(r["tip"], r["delivery"]) for r in rows[3:]] == [(2.5, None), (None, {"minutes": 25})]
    assert [e["status"] for e in box.executions()] == ["SUCCEEDED", "SUCCEEDED"]
    assert box.recorder.denied() == []


def test_a_column_added_behind_the_launchers_back_aborts_once_and_the_next_attempt_lands(box: Box) -> None:
    put_segment(
        box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 0, 2, values=[_pizza(o) for o in range(2)]
    )
    box.pump()
    # Another writer adds a column: `field-ids.json` is stale, so the next plan's guess for a new
    # field's id is the id this column took.
    with box.catalog().load_table(TABLE).update_schema() as update:
        update.add_column("added_elsewhere", StringType())
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, 2, 1, values=[_pizza(2, tip=1.5)])
    box.pump()

    assert sorted(e["status"] for e in box.executions()) == ["FAILED", "SUCCEEDED", "SUCCEEDED"], (
        box.describe()
    )
    aborts = [i for i in box.fleet.invocations if i.function == "AbortFunction"]
    assert len(aborts) == 1
    (failed,) = [e for e in box.executions() if e["status"] == "FAILED"]
    history = box.history(failed["executionArn"])
    waits = [e for e in history if e["type"] == "WaitStateEntered"]
    entered = json.loads(waits[-1]["stateEnteredEventDetails"]["input"])
    assert entered["resignal_after_seconds"] == 0  # a race with another writer, not a failure to back off
    assert "FieldIdMismatchError" in json.dumps(history, default=str)

    rows = sorted(box.rows(TABLE), key=lambda r: r["offset"])
    assert [r["tip"] for r in rows] == [None, None, 1.5]
    recorded = TopicFieldIds.model_validate_json(
        box.s3.get_object(**_s3_location(field_ids_uri(_runs_location(box), TOPIC)))["Body"].read()
    )
    table = recorded.table(TABLE)
    assert table is not None
    assert [c.name for c in table.columns or ()][-2:] == ["added_elsewhere", "tip"]
    assert box.recorder.denied() == []


def _runs_location(box: Box) -> str:
    return box.fleet.environment["CommitFunction"]["KAFSCALE_ICEBERG_RUNS_LOCATION"]


def _s3_location(uri: str) -> dict[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return {"Bucket": bucket, "Key": key}
