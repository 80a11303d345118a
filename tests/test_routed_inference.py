"""A routed mapping with `schema.source: infer`: each destination table observes, decides and converts
with its own columns (the route's fixed table, a template table the launcher knew, a new template
table from the base fields), and the result carries each table's columns and field ids.

Real parts: the data plane's tasks in this process (no Spark: `spark_app/job.py`'s stages call the
same `observe_task` and `run_task`), the job's `with_written_columns`, local segment files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.inference import with_inferred_columns
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.routing import RecordRouter
from kafscale_iceberg.dataplane.tasks import observe_task, plan_tasks, run_task
from kafscale_iceberg.domain.field_ids import planned_field_ids
from kafscale_iceberg.domain.inference import merge_observations
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    MappingPlan,
    RoutePlan,
    RunPlan,
    RunTimings,
    TableTarget,
    plan_as_written,
    table_outputs,
)
from kafscale_iceberg.domain.schema import table_fields
from spark_app.job import with_written_columns
from tests.support.spark_job import SegmentFolder, make_plan, order_record

CARDS, CASH, VOUCHERS, DLQ = "shop.pay_card", "shop.pay_cash", "shop.pay_voucher", "prod.orders_dead_letters"
RAW = "shop.pay_raw"
KNOWN_CASH = (
    ColumnSpec(name="method", type=ColumnType.STRING),
    ColumnSpec(name="amount", type=ColumnType.LONG),
)


def payment(method: str | None, **fields: Any) -> bytes:
    return json.dumps({**({"method": method} if method else {}), **fields}).encode()


VALUES = [
    payment("card", amount=5, last4="1234"),
    payment("cash", amount=7, change=3),
    payment("voucher", amount=9, voucher={"code": "V1"}),
    payment("cash", amount="seven"),  # a string in the cash table's long column
    payment(None, amount=1),  # no route value, no default table: a dead letter
    b"not json",
    payment("card", amount=6, last4="9876", wallet=True),
]


def routed_plan(tmp_path: Path, *, more: tuple[MappingPlan, ...] = ()) -> RunPlan:
    """The plan as the launcher makes it: the fixed card table new, the cash template table known
    (its columns, ids and last-column-id recorded), vouchers not known yet."""
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(0, [order_record(o, 0, value=v) for o, v in enumerate(VALUES)])
    plan = make_plan(folder, str(tmp_path), ranges={0: (-1, len(VALUES) - 1)}, columns=(), infer_columns=True)
    base = planned_field_ids(table_fields(()), None)
    assert base is not None
    cash_ids = planned_field_ids(table_fields(KNOWN_CASH), None)
    assert cash_ids is not None
    route = RoutePlan(
        field="method",
        tables={
            "card": TableTarget(identifier=CARDS, data_uri=f"{tmp_path}/w/card", field_ids=base, columns=())
        },
        table_template="shop.pay_{value}",
        data_uri_template=f"{tmp_path}/w/{{path}}",
        known_field_ids={CASH: cash_ids},
        known_columns={CASH: KNOWN_CASH},
        known_last_column_ids={CASH: len(cash_ids)},
        new_field_ids=base,
        reserved=(RAW,),
    )
    return plan.model_copy(update={"table": None, "route": route, "more_mappings": more})


def run(plan: RunPlan) -> tuple[RunPlan, Any]:
    """The job's two stages in this process: observe, decide per table, convert."""
    plan = RunPlan.model_validate_json(plan.model_dump_json())
    tasks = plan_tasks(plan, max_tasks=2, min_task_bytes=1)
    observed = merge_observations(observe_task(plan, t, reader=DocumentStore()).tables for t in tasks)
    decided = with_inferred_columns(plan, observed)
    reports = [run_task(decided, t, reader=DocumentStore(), sink=StagedFileStore()) for t in tasks]
    result = build_run_result(decided, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
    return decided, with_written_columns(decided, result)


def test_each_routed_table_infers_converts_and_reports_its_own_columns(tmp_path: Path) -> None:
    plan = routed_plan(tmp_path)
    decided, result = run(plan)
    assert result.failure is None
    columns = {
        t.identifier: {c.name: c.type_name for c in t.columns or ()} for t in result.tables if t.columns
    }
    assert columns == {
        CARDS: {"method": "string", "amount": "long", "last4": "string", "wallet": "boolean"},
        CASH: {"method": "string", "amount": "long", "change": "long"},  # its own, then the new field
        VOUCHERS: {"method": "string", "amount": "long", "voucher": "struct<code: string>"},
    }
    by_table = {t.identifier: t for t in result.tables}
    # Ids: a new table's are its creation's; a known table's columns keep theirs, new ones follow.
    assert by_table[CARDS].field_ids == planned_field_ids(table_fields(by_table[CARDS].columns or ()), None)
    cash_ids = by_table[CASH].field_ids
    assert cash_ids is not None
    assert (cash_ids["method"], cash_ids["amount"], cash_ids["change"]) == (9, 10, 11)
    assert by_table[CASH].conversion_failures == {"amount": 1}
    assert not by_table[CARDS].conversion_failures
    # Each table's files carry its own columns, with those ids.
    for output in table_outputs(decided, result):
        if output.columns is None:
            continue
        schema = pq.read_schema(output.files[0].uri)
        assert schema.names[8:] == [c.name for c in output.columns]
        written_ids = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in schema if f.metadata}
        assert {n: i for n, i in written_ids.items() if n in (output.field_ids or {})} == {
            n: (output.field_ids or {})[n] for n in written_ids
        }
    rows = {
        t.identifier: [r for f in t.files for r in pq.read_table(f.uri).to_pylist()] for t in result.tables
    }
    assert [(r["offset"], r["last4"], r["wallet"]) for r in rows[CARDS]] == [
        (0, "1234", None),
        (6, "9876", True),
    ]
    assert [(r["offset"], r["amount"]) for r in rows[CASH]] == [(1, 7), (3, None)]
    assert rows[VOUCHERS][0]["voucher"] == {"code": "V1"}
    assert sorted((r["offset"], r["error_kind"]) for r in rows[DLQ]) == [(4, "unrouted"), (5, "invalid_json")]

    # The commit step's view: the plan as written has each table's columns and ids.
    written = plan_as_written(plan, result)
    mapping = written.mappings[0]
    for identifier in (CARDS, CASH, VOUCHERS):
        target = mapping.target(identifier)
        assert target is not None
        assert mapping.conversion_for(target).columns == by_table[identifier].columns
        assert target.field_ids == by_table[identifier].field_ids


def test_an_inferred_mapping_beside_another_mapping_of_the_topic(tmp_path: Path) -> None:
    """The routed inferred mapping and a raw table of the same topic: the raw table's rows carry no
    inferred column and its output no columns."""
    raw = MappingPlan(
        table=TableTarget(identifier=RAW, data_uri=f"{tmp_path}/w/raw"),
        dead_letter_table=TableTarget(identifier="shop.pay_raw__dlq", data_uri=f"{tmp_path}/w/raw_dlq"),
        conversion=routed_plan(tmp_path).conversion.model_copy(update={"infer_columns": False}),
    )
    _decided, result = run(routed_plan(tmp_path, more=(raw,)))
    by_table = {t.identifier: t for t in result.tables}
    assert by_table[RAW].columns is None
    assert by_table[RAW].records == len(VALUES)
    assert pq.read_schema(by_table[RAW].files[0].uri).names[8:] == []
    assert by_table[CASH].columns is not None


def test_the_routers_assignment_follows_the_route_rules_without_building_rows(tmp_path: Path) -> None:
    route = routed_plan(tmp_path).route
    assert route is not None
    assigned = RecordRouter(route, run_id="r").assign(pa.array(VALUES, pa.binary()))
    assert [(t.identifier, p.tolist()) for t, p in assigned] == [
        (CARDS, [0, 6]),
        (CASH, [1, 3]),
        (VOUCHERS, [2]),
    ]  # offsets 4 (no route value) and 5 (not JSON) go nowhere: the conversion dead-letters them
    assert {t.identifier: t.columns for t, _p in assigned} == {CARDS: (), CASH: KNOWN_CASH, VOUCHERS: None}


def test_a_fixed_inferred_table_beside_a_raw_mapping_reports_its_columns_on_its_output(
    tmp_path: Path,
) -> None:
    """A topic's inferred mapping with a fixed table, and a second (raw) mapping: a run of several
    tables, so the inferred table's columns and ids travel on its `TableOutput`; the commit step's
    plan as written has them."""
    plan = routed_plan(tmp_path)
    fixed = plan.model_copy(
        update={"table": TableTarget(identifier="shop.pay", data_uri=f"{tmp_path}/w/pay"), "route": None}
    )
    raw = MappingPlan(
        table=TableTarget(identifier=RAW, data_uri=f"{tmp_path}/w/raw"),
        dead_letter_table=TableTarget(identifier="shop.pay_raw__dlq", data_uri=f"{tmp_path}/w/raw_dlq"),
        conversion=plan.conversion.model_copy(update={"infer_columns": False}),
    )
    fixed = fixed.model_copy(update={"more_mappings": (raw,)})
    _decided, result = run(fixed)
    by_table = {t.identifier: t for t in result.tables}
    assert [c.name for c in by_table["shop.pay"].columns or ()] == [
        "method",
        "amount",
        "last4",
        "change",
        "voucher",
        "wallet",
    ]
    assert by_table[RAW].columns is None
    written = plan_as_written(fixed, result)
    assert written.conversion.columns == by_table["shop.pay"].columns
    assert written.table is not None
    assert written.table.field_ids == by_table["shop.pay"].field_ids
    assert written.more_mappings[0].conversion.columns == ()


def test_the_docs_example_of_routed_inferred_tables_loads() -> None:
    """docs/configuration.md, "Routed tables with inferred columns": the YAML example is a valid config."""
    import re

    import yaml

    from kafscale_iceberg.config import parse_config

    text = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    section = text.split("### Routed tables with inferred columns", 1)[1].split("\n## ", 1)[0]
    (example,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    document = {
        "s3": {"bucket": "b", "namespace": "ns"},
        "iceberg": {"catalog": {"type": "sql", "uri": "sqlite:///x.db"}, "warehouse": "file:///w"},
        "offsets": {"backend": "sqlite"},
        "mappings": yaml.safe_load(example)["mappings"],
    }
    config = parse_config(yaml.safe_dump(document), source="configuration.md", environ={})
    assert [m.schema_.source for m in config.mappings_for("events")] == ["infer", "none"]


def test_the_default_table_of_a_routed_inferred_mapping_infers_its_own_columns(tmp_path: Path) -> None:
    plan = routed_plan(tmp_path)
    assert plan.route is not None
    default = TableTarget(identifier="shop.pay_other", data_uri=f"{tmp_path}/w/other", columns=())
    with_default = plan.model_copy(update={"route": plan.route.model_copy(update={"default_table": default})})
    _decided, result = run(with_default)
    by_table = {t.identifier: t for t in result.tables}
    assert [(c.name, c.type_name) for c in by_table["shop.pay_other"].columns or ()] == [("amount", "long")]
    assert by_table["shop.pay_other"].records == 1  # the record without a method
    rows = [r for f in by_table[DLQ].files for r in pq.read_table(f.uri).to_pylist()]
    assert [(r["offset"], r["error_kind"]) for r in rows] == [(5, "invalid_json")]
