"""Routing in one task, in this process (no Spark): each record to the table its field names, or a
dead letter with the reason; several mappings of one topic; per-table counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    ConversionSettings,
    MappingPlan,
    RoutePlan,
    RunPlan,
    RunResult,
    RunTimings,
    TableRole,
    TableTarget,
    table_outputs,
)
from kafscale_iceberg.metrics.definitions import TABLE_RECORDS, Sample
from kafscale_iceberg.metrics.recording import record_commit
from kafscale_iceberg.services.commits.outcome import CommitOutcome
from tests.support.spark_job import SegmentFolder, make_plan, order_record

COLUMNS = (
    ColumnSpec(name="order_id", type=ColumnType.LONG),
    ColumnSpec(name="region", type=ColumnType.STRING),
)
ANCHOR, EU, US, DLQ = "prod.orders", "prod.orders_eu", "prod.orders_us", "prod.orders_dead_letters"


def target(out: Path, identifier: str) -> TableTarget:
    return TableTarget(identifier=identifier, data_uri=f"{out}/warehouse/{identifier}/run")


def routed_plan(tmp_path: Path, values: list[bytes | None], route: dict[str, Any], **more: Any) -> RunPlan:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(0, [order_record(o, 0, value=v if v is not None else b"") for o, v in enumerate(values)])
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, len(values) - 1)}, columns=COLUMNS)
    return plan.model_copy(update={"table": None, "route": RoutePlan(**route), **more})


def run(plan: RunPlan) -> tuple[RunResult, dict[str, list[dict[str, Any]]]]:
    """The result, and per table the rows of its files."""
    plan = RunPlan.model_validate_json(plan.model_dump_json())  # the plan as the job reads it
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
        for task in plan_tasks(plan, max_tasks=1, min_task_bytes=1)
    ]
    result = build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
    rows = {
        o.identifier: [r for f in o.files for r in pq.read_table(f.uri).to_pylist()]
        for o in table_outputs(plan, result)
    }
    return result, rows


def region(value: object) -> bytes:
    return json.dumps({"order_id": 7, "region": value}).encode()


def offsets(rows: list[dict[str, Any]]) -> list[int]:
    return sorted(r["offset"] for r in rows)


def reasons(rows: list[dict[str, Any]]) -> dict[int, str]:
    return {r["offset"]: r["error_kind"] for r in rows}


def test_fixed_routes_default_table_and_every_bad_route_value(tmp_path: Path) -> None:
    values = [
        region("eu"),  # 0 -> eu
        region("us"),  # 1 -> us
        region("apac"),  # 2 -> no key: default
        json.dumps({"order_id": 3}).encode(),  # 3 field missing -> default
        region(None),  # 4 null -> default
        region(5),  # 5 a number: never matched by its text
        region({"name": "eu"}),  # 6 an object
        b"not json",  # 7
        None,  # 8 empty value: the field is missing -> default
        region(True),  # 9
        region("EU"),  # 10 case matters: default
    ]
    plan = routed_plan(
        tmp_path,
        values,
        {
            "field": "region",
            "tables": {"eu": target(tmp_path, EU), "us": target(tmp_path, US)},
            "default_table": target(tmp_path, ANCHOR),
        },
    )
    result, rows = run(plan)
    assert plan.anchor.identifier == ANCHOR
    assert [o.identifier for o in table_outputs(plan, result)] == [DLQ, EU, US, ANCHOR]
    assert offsets(rows[EU]) == [0]
    assert offsets(rows[US]) == [1]
    assert offsets(rows[ANCHOR]) == [2, 3, 4, 8, 10]
    assert reasons(rows[DLQ]) == {
        5: "route_invalid",
        6: "route_invalid",
        7: "invalid_json",
        9: "route_invalid",
    }
    errors = {r["offset"]: r["error"] for r in rows[DLQ]}
    assert "'region' is not a string" in errors[5]
    assert result.counts.written == 7
    assert result.counts.dead_lettered == 4
    assert {o.identifier: o.records for o in result.tables} == {EU: 1, US: 1, ANCHOR: 5, DLQ: 4}
    assert not result.data_files
    assert not result.dead_letter_files  # a plan of several tables lists every file in `tables`


def test_without_a_default_table_unmatched_records_are_dead_lettered_unrouted(tmp_path: Path) -> None:
    values = [region("eu"), region("apac"), json.dumps({"order_id": 1}).encode(), region(None)]
    plan = routed_plan(tmp_path, values, {"field": "region", "tables": {"eu": target(tmp_path, EU)}})
    _, rows = run(plan)
    assert plan.anchor.identifier == DLQ
    assert plan.anchor_role is TableRole.DEAD_LETTER
    assert offsets(rows[EU]) == [0]
    assert reasons(rows[DLQ]) == {1: "unrouted", 2: "unrouted", 3: "unrouted"}
    errors = {r["offset"]: r["error"] for r in rows[DLQ]}
    assert "'apac'" in errors[1]
    assert "missing or null" in errors[2]


def test_a_template_creates_tables_as_values_appear_and_refuses_invalid_names(tmp_path: Path) -> None:
    values = [region("eu"), region("us_west"), region("EU"), region("a.b"), region("orders"), region("eu")]
    reserved = "prod.orders_orders"
    plan = routed_plan(
        tmp_path,
        values,
        {
            "field": "region",
            "table_template": "prod.orders_{value}",
            "data_uri_template": f"{tmp_path}/warehouse/{{path}}/run",
            "new_field_ids": None,
            "reserved": (reserved,),
        },
    )
    result, rows = run(plan)
    assert offsets(rows["prod.orders_eu"]) == [0, 5]
    assert offsets(rows["prod.orders_us_west"]) == [1]
    assert reasons(rows[DLQ]) == {2: "route_invalid", 3: "route_invalid", 4: "route_invalid"}
    errors = {r["offset"]: r["error"] for r in rows[DLQ]}
    assert "lowercase" in errors[2]
    assert "another mapping" in errors[4]
    assert [o.identifier for o in table_outputs(plan, result)] == [
        "prod.orders_eu",
        "prod.orders_us_west",
        DLQ,  # the anchor (no default table), last
    ]
    eu = next(o for o in result.tables if o.identifier == "prod.orders_eu")
    assert eu.files
    assert all(f.uri.startswith(f"{tmp_path}/warehouse/prod.db/orders_eu/run/") for f in eu.files)


def test_a_dotted_route_field_reads_into_objects(tmp_path: Path) -> None:
    def nested(value: object) -> bytes:
        return json.dumps({"order_id": 1, "shipping": {"region": value}}).encode()

    values = [nested("eu"), nested(3), json.dumps({"order_id": 2, "shipping": "eu"}).encode(), nested(None)]
    plan = routed_plan(
        tmp_path,
        values,
        {
            "field": "shipping.region",
            "tables": {"eu": target(tmp_path, EU)},
            "default_table": target(tmp_path, ANCHOR),
        },
    )
    _, rows = run(plan)
    assert offsets(rows[EU]) == [0]
    assert offsets(rows[ANCHOR]) == [3]
    assert reasons(rows[DLQ]) == {1: "route_invalid", 2: "route_invalid"}


def test_conversion_failures_are_counted_per_table(tmp_path: Path) -> None:
    values = [
        json.dumps({"order_id": "x", "region": "eu"}).encode(),
        json.dumps({"order_id": "y", "region": "us"}).encode(),
        json.dumps({"order_id": "z", "region": "eu"}).encode(),
        json.dumps({"order_id": 1, "region": "eu"}).encode(),
    ]
    plan = routed_plan(
        tmp_path,
        values,
        {"field": "region", "tables": {"eu": target(tmp_path, EU), "us": target(tmp_path, US)}},
    )
    result, _ = run(plan)
    failures = {o.identifier: o.conversion_failures for o in result.tables if o.role is TableRole.DATA}
    assert failures == {EU: {"order_id": 2}, US: {"order_id": 1}}
    assert result.counts.conversion_failures == {"order_id": 3}


def test_a_route_value_that_is_not_a_string_is_a_dead_letter_not_a_conversion_failure(tmp_path: Path) -> None:
    """The route field is a `string` column of the mapping: a number there is a `route_invalid` dead
    letter, and not also counted as a conversion failure of a row that was never written."""
    plan = routed_plan(
        tmp_path, [region("eu"), region(7)], {"field": "region", "tables": {"eu": target(tmp_path, EU)}}
    )
    result, rows = run(plan)
    assert reasons(rows[DLQ]) == {1: "route_invalid"}
    assert result.counts.conversion_failures == {}


def test_several_mappings_of_one_topic_each_get_every_record(tmp_path: Path) -> None:
    """The raw table (no columns: nothing parsed, a non-JSON value is kept) beside a parsed, routed one."""
    values = [region("eu"), b"not json", region("us")]
    raw = MappingPlan(
        table=target(tmp_path, "prod.orders_raw"),
        dead_letter_table=target(tmp_path, "prod.orders_raw__dlq"),
        conversion=ConversionSettings(),
    )
    plan = routed_plan(
        tmp_path,
        values,
        {
            "field": "region",
            "tables": {"eu": target(tmp_path, EU)},
            "default_table": target(tmp_path, ANCHOR),
        },
        more_mappings=(raw,),
    )
    result, rows = run(plan)
    assert offsets(rows["prod.orders_raw"]) == [0, 1, 2]
    assert rows["prod.orders_raw__dlq"] == []
    assert offsets(rows[EU]) == [0]
    assert offsets(rows[ANCHOR]) == [2]
    assert reasons(rows[DLQ]) == {1: "invalid_json"}
    assert [o.identifier for o in table_outputs(plan, result)] == [
        DLQ,
        EU,
        "prod.orders_raw__dlq",
        "prod.orders_raw",
        ANCHOR,
    ]


def test_a_routed_raw_mapping_dead_letters_values_that_are_not_json(tmp_path: Path) -> None:
    plan = routed_plan(
        tmp_path,
        [region("eu"), b"{broken", region("us")],
        {
            "field": "region",
            "tables": {"eu": target(tmp_path, EU)},
            "default_table": target(tmp_path, ANCHOR),
        },
        conversion=ConversionSettings(),
    )
    _, rows = run(plan)
    assert offsets(rows[EU]) == [0]
    assert offsets(rows[ANCHOR]) == [2]
    assert reasons(rows[DLQ]) == {1: "invalid_json"}


def test_a_routed_commit_counts_rows_per_table(tmp_path: Path) -> None:
    plan = routed_plan(
        tmp_path,
        [region("eu"), region("us"), region("us"), region(5)],
        {
            "field": "region",
            "tables": {"eu": target(tmp_path, EU)},
            "default_table": target(tmp_path, ANCHOR),
        },
    )
    result, _ = run(plan)
    samples: list[Sample] = []

    class Sink:
        def emit(self, emitted: list[Sample]) -> None:
            samples.extend(emitted)

    outcome = CommitOutcome(
        run_id=plan.run_id,
        topic=plan.topic,
        table_committed=True,
        dead_letter_committed=True,
        table_snapshot_id=1,
        offsets={0: 3},
    )
    record_commit(Sink(), plan, result, outcome, started_at=0.0, ended_at=1.0)
    per_table = {(s.labels["table"], s.labels["role"]): s.value for s in samples if s.metric is TABLE_RECORDS}
    assert per_table == {(EU, "data"): 1, (ANCHOR, "data"): 2, (DLQ, "dead_letter"): 1}


def test_values_sharing_a_table_and_the_default_give_each_table_once(tmp_path: Path) -> None:
    plan = routed_plan(
        tmp_path,
        [region("eu"), region("EU"), region("us"), region("apac")],
        {
            "field": "region",
            "tables": {
                "eu": target(tmp_path, EU),
                "EU": target(tmp_path, EU),
                "us": target(tmp_path, ANCHOR),
            },
            "default_table": target(tmp_path, ANCHOR),
        },
    )
    result, rows = run(plan)
    assert [o.identifier for o in table_outputs(plan, result)] == [DLQ, EU, ANCHOR]
    assert offsets(rows[EU]) == [0, 1]
    assert offsets(rows[ANCHOR]) == [2, 3]
