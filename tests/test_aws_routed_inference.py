"""A routed topic with inferred schemas (`route` + `schema.source: infer`) on the AWS path: launcher
Lambda -> the real state machine -> the EMR job observing and converting each template table with its
own columns (local Spark) -> the commit Lambda creating and evolving each Glue table in the commit of
its files; a column added to one table behind the launcher's back aborts one run before any table is
written and is re-signalled at once; every AWS call checked against its role in template.yaml.

The box and each of its fakes are described in tests/support/aws_box.py, with what each does not cover.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.types import StringType

from kafscale_iceberg.adapters.iceberg_schemas import table_columns
from tests.support.aws_box import Box, SparkBoxOpener
from tests.support.segments import put_segment

pytestmark = [pytest.mark.slow, pytest.mark.aws]

TOPIC = "events"
CLICKS, ORDERS, RAW = "shop.events_click", "shop.events_order", "shop.events_raw"


@pytest.fixture
def box(spark_box: SparkBoxOpener) -> Iterator[Box]:
    with spark_box(
        mappings=[
            {
                "topic": TOPIC,
                "route": {"field": "type", "table_template": "shop.events_{value}"},
                "dead_letter_table": "shop.events__dlq",
                "create_table_if_missing": True,
                "schema": {"source": "infer"},
            },
            {"topic": TOPIC, "table": RAW, "create_table_if_missing": True},
        ],
        runs={"retry_backoff_seconds": 60},  # so a re-signal at once is the race rule, not the setting
    ) as opened:
        yield opened


def _event(kind: str, offset: int, **more: Any) -> bytes:
    return json.dumps({"type": kind, "n": offset, **more}).encode()


def _columns(box: Box, table: str) -> dict[str, str]:
    return {c.name: c.type_name for c in table_columns(box.catalog().load_table(table).schema())}


def _put(box: Box, base: int, values: list[bytes]) -> None:
    put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, base, len(values), values=values)


def test_routed_inferred_tables_evolve_each_on_its_own_and_a_race_is_replanned(box: Box) -> None:
    _put(box, 0, [_event("click", 0, page="/a"), _event("order", 1, total=9.5)])
    box.pump()
    assert _columns(box, CLICKS) == {"type": "string", "n": "long", "page": "string"}, box.describe()
    assert _columns(box, ORDERS) == {"type": "string", "n": "long", "total": "double"}
    clicks_schema = box.catalog().load_table(CLICKS).metadata.current_schema_id

    # One table evolves with its data; the other gets rows and keeps its schema.
    _put(box, 2, [_event("order", 2, total=3.0, coupon="X"), _event("click", 3, page="/b")])
    box.pump()
    assert list(_columns(box, ORDERS))[-1] == "coupon"
    assert box.catalog().load_table(CLICKS).metadata.current_schema_id == clicks_schema
    assert [r["coupon"] for r in sorted(box.rows(ORDERS), key=lambda r: r["offset"])] == [None, "X"]

    # Another writer adds a column to the orders table: the next run's guess for a new field's id is
    # taken; it is refused before any table is written, and re-signalled at once.
    with box.catalog().load_table(ORDERS).update_schema() as update:
        update.add_column("added_elsewhere", StringType())
    _put(box, 4, [_event("click", 4, page="/c"), _event("order", 5, total=1.0, tip=0.5)])
    box.pump()
    statuses = [e["status"] for e in box.executions()]
    assert sorted(statuses) == ["FAILED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"], box.describe()
    (failed,) = [e for e in box.executions() if e["status"] == "FAILED"]
    history = box.history(failed["executionArn"])
    assert "FieldIdMismatchError" in json.dumps(history, default=str)
    waits = [e for e in history if e["type"] == "WaitStateEntered"]
    assert json.loads(waits[-1]["stateEnteredEventDetails"]["input"])["resignal_after_seconds"] == 0

    assert [r["offset"] for r in sorted(box.rows(CLICKS), key=lambda r: r["offset"])] == [0, 3, 4]
    orders = sorted(box.rows(ORDERS), key=lambda r: r["offset"])
    assert [(r["offset"], r["tip"]) for r in orders] == [(1, None), (2, None), (5, 0.5)]
    assert [r["offset"] for r in sorted(box.rows(RAW), key=lambda r: r["offset"])] == list(range(6))
    assert list(_columns(box, ORDERS))[-2:] == ["added_elsewhere", "tip"]
    assert box.recorder.denied() == []
