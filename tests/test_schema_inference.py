"""`schema.source: infer`: the type rules, the observation of records, the columns a run decides, and
the commit that adds new columns in the same Iceberg commit as the run's files.

Real parts: the data plane's tasks in this process (no Spark: `spark_app/job.py`'s stages call the
same `observe_task` and `run_task`), a real SQLite Iceberg catalog, the commit service over it with
the SQLite checkpoint store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import field_ids_by_path, table_columns
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.config import parse_config
from kafscale_iceberg.dataplane.inference import ValueObserver, with_inferred_columns
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import observe_task, plan_tasks, run_task
from kafscale_iceberg.domain.commits import TableCommit, TableMarker, TableSpec, TableState
from kafscale_iceberg.domain.field_ids import planned_field_ids
from kafscale_iceberg.domain.inference import (
    FieldObservation,
    TableObservation,
    case_clashes,
    inferred_column,
    merge_observations,
    resolve_columns,
)
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    ColumnType,
    RunPlan,
    RunResult,
    RunStatus,
    RunTimings,
    SchemaMode,
    plan_as_written,
)
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES, table_fields
from kafscale_iceberg.exceptions import (
    ConfigError,
    FieldIdMismatchError,
    InferredColumnChangedError,
    TableChangedError,
    TableMissingError,
)
from tests.support.iceberg_runs import sql_committer, sql_settings
from tests.support.spark_job import SegmentFolder, make_plan, order_record

TABLE = "prod.orders"


def observe(*values: object, partition: int = 0) -> TableObservation:
    observer = ValueObserver()
    encoded = [v if isinstance(v, bytes) or v is None else json.dumps(v).encode() for v in values]
    observer.observe(
        pa.array(encoded, pa.binary()), pa.array(range(len(values)), pa.int64()), partition=partition
    )
    return observer.observation()


def columns_of(
    *values: object, widening: bool = False, current: tuple[ColumnSpec, ...] = ()
) -> dict[str, str]:
    resolved = resolve_columns(
        current, observe(*values), allow_type_widening=widening, reserved=BASE_FIELD_NAMES
    )
    return {c.name: c.type_name for c in resolved}


# -- the type rules ---------------------------------------------------------------------------------


def test_each_json_kind_gets_its_type() -> None:
    assert columns_of({"b": True, "i": 42, "d": 1.5, "s": "x"}) == {
        "b": "boolean",
        "i": "long",
        "d": "double",
        "s": "string",
    }


def test_strings_stay_strings_even_when_they_look_like_timestamps_or_numbers() -> None:
    assert columns_of({"date_ordered": "2024-01-04 12:28:13", "n": "12"}) == {
        "date_ordered": "string",
        "n": "string",
    }


def test_objects_become_structs_and_arrays_lists_recursively() -> None:
    got = columns_of(
        {"customer": {"name": "Ada", "address": {"city": "Oslo"}}, "meats": ["ham"], "grid": [[1, 2]]}
    )
    assert got == {
        "customer": "struct<address: struct<city: string>, name: string>",
        "meats": "list<string>",
        "grid": "list<list<long>>",
    }


def test_a_struct_gathers_the_fields_of_every_record() -> None:
    assert columns_of({"c": {"a": 1}}, {"c": {"b": "x"}}) == {"c": "struct<a: long, b: string>"}


def test_a_field_that_is_always_null_or_empty_waits_until_it_has_a_type() -> None:
    assert columns_of({"n": None, "e": [], "o": {}, "on": {"x": None}, "s": "x"}) == {"s": "string"}
    assert columns_of({"n": None}, {"n": 3}) == {"n": "long"}
    assert columns_of({"e": []}, {"e": [None, "a"]}) == {"e": "list<string>"}


def test_integers_and_other_numbers_in_a_new_field_are_double_with_widening_else_long() -> None:
    assert columns_of({"price": 3}, {"price": 3.5}, widening=True) == {"price": "double"}
    assert columns_of({"price": 3}, {"price": 3.5}, widening=False) == {"price": "long"}
    # Only one kind of number: no choice to make either way.
    assert columns_of({"price": 3.5}, widening=False) == {"price": "double"}
    assert columns_of({"price": [1, 2.5]}, widening=True) == {"price": "list<double>"}


def test_kinds_that_do_not_mix_take_the_kind_seen_most_ties_in_a_fixed_order() -> None:
    assert columns_of({"x": "a"}, {"x": 1}, {"x": "b"}) == {"x": "string"}
    assert columns_of({"x": "a"}, {"x": 1}) == {"x": "long"}  # tie: numbers before strings
    assert columns_of({"x": {"a": 1}}, {"x": [1]}) == {"x": "struct<a: long>"}


def test_base_field_names_never_become_columns() -> None:
    value = dict.fromkeys(BASE_FIELD_NAMES, "shadow") | {"kept": 1}
    assert columns_of(value) == {"kept": "long"}


def test_names_differing_only_in_case_give_one_column_the_first_seen() -> None:
    """Engines that fold case (Glue, Athena, Spark by default) could not tell `Tip` from `tip`."""
    first, later = {"tip": 2.5, "Key": "k"}, {"TIP": 3.0, "Tip": 1.5, "order": {"a": 1, "A": 2}}
    # Top level: the first to appear wins; inside a struct (fields ordered by name): "A" before "a".
    assert columns_of(first, later) == {"tip": "double", "order": "struct<A: long>"}
    current = (ColumnSpec(name="Store", type=ColumnType.STRING),)
    assert columns_of({"store": "x", "other": 1}, current=current) == {"Store": "string", "other": "long"}
    observed = observe(first, later)
    resolved = resolve_columns((), observed, allow_type_widening=False, reserved=BASE_FIELD_NAMES)
    assert case_clashes(resolved, observed, BASE_FIELD_NAMES) == ("Key", "TIP", "Tip")


def test_the_tables_columns_keep_their_types_and_new_ones_follow_in_order_of_appearance() -> None:
    current = (ColumnSpec(name="store_id", type=ColumnType.STRING),)
    observer = ValueObserver()
    observer.observe(
        pa.array([json.dumps({"zeta": 1, "store_id": 42}).encode()], pa.binary()), pa.array([7]), partition=1
    )
    observer.observe(
        pa.array([json.dumps({"alpha": True}).encode()], pa.binary()), pa.array([3]), partition=0
    )
    resolved = resolve_columns(current, observer.observation(), allow_type_widening=False)
    assert [(c.name, c.type_name) for c in resolved] == [
        ("store_id", "string"),  # a long value in a string column stays a conversion failure
        ("alpha", "boolean"),  # first seen at partition 0
        ("zeta", "long"),
    ]


def test_values_that_are_not_json_objects_are_passed_over() -> None:
    assert columns_of(b"not json", b"[1, 2]", b'"text"', None, b"", {"ok": 1}) == {"ok": "long"}


def test_observations_merge_across_tasks_per_table() -> None:
    first = {TABLE: observe({"a": 1})}
    second = {TABLE: observe({"a": 2.5, "b": "x"}), "prod.other": observe({"c": True})}
    merged = merge_observations([first, second])
    assert merged[TABLE].fields["a"].kinds == {"integer": 1, "number": 1}
    assert set(merged) == {TABLE, "prod.other"}
    assert inferred_column("a", merged[TABLE].fields["a"], allow_type_widening=True) == ColumnSpec(
        name="a", type=ColumnType.DOUBLE
    )
    assert inferred_column("n", FieldObservation(), allow_type_widening=True) is None


# -- config -----------------------------------------------------------------------------------------


def _config(mapping: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "s3": {"bucket": "b", "namespace": "ns"},
            "iceberg": {"catalog": {"type": "sql", "uri": "sqlite:///x.db"}, "warehouse": "file:///w"},
            "offsets": {"backend": "sqlite"},
            "mappings": [{"topic": "orders", "table": TABLE, **mapping}],
        }
    )


def test_config_accepts_infer_without_columns() -> None:
    config = parse_config(
        _config({"schema": {"source": "infer"}, "partition_by": ["partition"]}),
        source="test.yaml",
        environ={},
    )
    assert config.mappings[0].schema_.source == "infer"
    assert config.mappings[0].column_specs() == ()


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"schema": {"source": "infer", "columns": [{"name": "a", "type": "long"}]}}, "columns"),
        ({"schema": {"source": "infer"}, "partition_by": ["day(date_ordered)"]}, "partition_by[0]"),
        ({"schema": {"source": "infer"}, "lfs": {"mode": "resolve"}}, "lfs.mode"),
    ],
)
def test_config_refuses_what_infer_cannot_do_naming_the_key(mapping: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        parse_config(_config(mapping), source="test.yaml", environ={})


# -- a run through both stages, and its commit ---------------------------------------------------


def infer_run(
    root: Path,
    values: list[dict[str, Any]],
    tables: IcebergTableCommitter | None,
    *,
    first_offset: int = 0,
    widening: bool = False,
    **conversion: Any,
) -> tuple[RunPlan, RunResult]:
    """A run of an inferred table as the launcher plans it (from the table's recorded columns and
    ids) and the Spark job runs it: the observation stage, the driver's decision, the conversion."""
    known = None
    if tables is not None:
        known = tables.field_ids(TABLE)
    folder = SegmentFolder(root / "segments")
    folder.add(
        0,
        [order_record(o, 0, value=json.dumps(v).encode()) for o, v in enumerate(values, start=first_offset)],
    )
    plan: RunPlan = make_plan(
        folder,
        str(root / "out"),
        ranges={0: (first_offset - 1, first_offset + len(values) - 1)},
        columns=known.columns if known is not None else (),
        infer_columns=True,
        allow_type_widening=widening,
        **conversion,
    )
    planned = planned_field_ids(table_fields(plan.conversion.columns), known)
    plan = plan.model_copy(
        update={
            "table": plan.table.model_copy(
                update={
                    "field_ids": planned,
                    "last_column_id": None if known is None else known.last_column_id,
                }
            )
        }
    )
    tasks = plan_tasks(plan, max_tasks=2, min_task_bytes=1)
    observed = merge_observations(observe_task(plan, t, reader=DocumentStore()).tables for t in tasks)
    decided = with_inferred_columns(plan, observed)
    reports = [run_task(decided, t, reader=DocumentStore(), sink=StagedFileStore()) for t in tasks]
    result = build_run_result(decided, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
    if result.status is RunStatus.FAILED:
        return plan, result
    columns = {"columns": decided.conversion.columns, "field_ids": decided.table.field_ids}
    return plan, result.model_copy(update=columns)


def commit(
    tables: IcebergTableCommitter,
    plan: RunPlan,
    result: RunResult,
    start: int,
    end: int,
    state: TableState | None = None,
) -> None:
    """What the commit step does with the launcher's plan and the job's result (on `state`, else the
    table's state read now)."""
    plan = plan_as_written(plan, result)
    assert result.columns is not None
    tables.ensure_table(
        TableSpec(identifier=TABLE, fields=table_fields(result.columns), create_if_missing=True, evolve=False)
    )
    tables.commit(
        state or tables.read_state(TABLE, "orders"),
        TableCommit(
            topic="orders",
            run_id=result.run_id,
            file_uris=tuple(f.uri for f in result.data_files),
            files=result.data_files,
            start_offsets={0: start},
            end_offsets={0: end},
            marker_after=TableMarker(offsets={0: end}, run_id=result.run_id),
            field_ids=plan.table.field_ids,
            columns=result.columns,
        ),
    )


PIZZA = {
    "order_id": "af69865f-61a7-4e39-824e-cbdcf4a0c45e",
    "store_id": 42,
    "sauce": "extra",
    "meats": ["ham", "salami"],
    "date_ordered": "2024-01-04 12:28:13",
}


def test_a_new_field_evolves_the_table_in_the_same_snapshot_as_the_runs_files(tmp_path: Path) -> None:
    tables = sql_committer(tmp_path)
    plan, result = infer_run(tmp_path / "r1", [PIZZA, {**PIZZA, "store_id": 43}], None)
    commit(tables, plan, result, -1, 1)
    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert {c.name: c.type_name for c in table_columns(table.schema())} == {
        "order_id": "string",
        "store_id": "long",
        "sauce": "string",
        "meats": "list<string>",
        "date_ordered": "string",
    }
    snapshots, schemas = len(table.metadata.snapshots), len(table.metadata.schemas)
    versions = len(table.metadata.metadata_log)

    later = {**PIZZA, "tip": 2.5, "veggies": ["onions"]}
    plan, result = infer_run(tmp_path / "r2", [later], sql_committer(tmp_path), first_offset=2)
    assert [c.name for c in result.columns or ()][-2:] == ["tip", "veggies"]
    commit(sql_committer(tmp_path), plan, result, 1, 2)

    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert len(table.metadata.snapshots) == snapshots + 1  # one commit: the new columns and the files
    assert len(table.metadata.schemas) == schemas + 1
    assert len(table.metadata.metadata_log) == versions + 1  # not a schema commit, then an append
    assert table.current_snapshot().schema_id == table.metadata.current_schema_id
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["store_id"], r["tip"], r["veggies"], r["meats"]) for r in rows] == [
        (42, None, None, ["ham", "salami"]),
        (43, None, None, ["ham", "salami"]),
        (42, 2.5, ["onions"], ["ham", "salami"]),
    ]


def test_a_value_of_another_type_than_its_column_is_counted_and_its_record_kept(tmp_path: Path) -> None:
    tables = sql_committer(tmp_path)
    plan, result = infer_run(tmp_path / "r1", [PIZZA], None)
    commit(tables, plan, result, -1, 0)
    conflicts = [{**PIZZA, "store_id": 42.5}, {**PIZZA, "store_id": "42"}, {**PIZZA, "sauce": {"x": 1}}]
    plan, result = infer_run(tmp_path / "r2", conflicts, sql_committer(tmp_path), first_offset=1)
    assert result.counts.conversion_failures == {"store_id": 2, "sauce": 1}
    assert result.counts.written == 3
    commit(sql_committer(tmp_path), plan, result, 0, 3)
    rows = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).scan().to_arrow().to_pylist()
    kept = sorted((r for r in rows if r["offset"] > 0), key=lambda r: r["offset"])
    assert [r["store_id"] for r in kept] == [None, None, 42]
    assert json.loads(kept[0]["value"]) == conflicts[0]  # the bytes are kept


def test_two_runs_adding_the_same_column_both_land(tmp_path: Path) -> None:
    tables = sql_committer(tmp_path)
    plan, result = infer_run(tmp_path / "r0", [PIZZA], None)
    commit(tables, plan, result, -1, 0)
    # Both planned from the same recorded columns and ids, before either committed.
    first = infer_run(tmp_path / "a", [{**PIZZA, "tip": 1.5}], sql_committer(tmp_path), first_offset=1)
    second = infer_run(tmp_path / "b", [{**PIZZA, "tip": 2.5}], sql_committer(tmp_path), first_offset=2)
    assert first[0].table.field_ids == second[0].table.field_ids
    racing = sql_committer(tmp_path)
    seen = racing.read_state(TABLE, "orders")
    commit(sql_committer(tmp_path), *first, 0, 1)
    # The second commit was built on the state before the first: refused, nothing written; the
    # commit step reads the table again and retries (`services/commits/verified_commit.py`).
    with pytest.raises(TableChangedError):
        commit(racing, *second, 1, 2, state=seen)
    commit(sql_committer(tmp_path), *second, 1, 2)  # `tip` is there now, with the id it planned
    rows = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).scan().to_arrow().to_pylist()
    assert sorted(r["tip"] for r in rows if r["tip"] is not None) == [1.5, 2.5]


def test_a_wrong_id_guess_or_type_from_a_concurrent_run_is_refused_before_any_write(tmp_path: Path) -> None:
    tables = sql_committer(tmp_path)
    plan, result = infer_run(tmp_path / "r0", [PIZZA], None)
    commit(tables, plan, result, -1, 0)
    winner = infer_run(tmp_path / "a", [{**PIZZA, "tip": 1}], sql_committer(tmp_path), first_offset=1)
    other_id = infer_run(
        tmp_path / "b", [{**PIZZA, "cheese": "mozzarella"}], sql_committer(tmp_path), first_offset=2
    )
    other_type = infer_run(tmp_path / "c", [{**PIZZA, "tip": 2.5}], sql_committer(tmp_path), first_offset=2)
    commit(sql_committer(tmp_path), *winner, 0, 1)
    before = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).metadata

    with pytest.raises(FieldIdMismatchError, match="cheese: file id 15, table id 16"):
        commit(sql_committer(tmp_path), *other_id, 1, 2)
    with pytest.raises(InferredColumnChangedError, match="tip: files double, table long"):
        commit(sql_committer(tmp_path), *other_type, 1, 2)
    after = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).metadata
    assert (after.current_snapshot_id, len(after.schemas)) == (
        before.current_snapshot_id,
        len(before.schemas),
    )

    # The next attempt plans from the table's columns and ids: it lands, and `tip` stays long.
    retry = infer_run(
        tmp_path / "c2",
        [{**PIZZA, "tip": 2.5, "cheese": "mozzarella"}],
        sql_committer(tmp_path),
        first_offset=2,
    )
    assert retry[1].counts.conversion_failures == {"tip": 1}
    commit(sql_committer(tmp_path), *retry, 1, 2)


def test_with_strict_mode_a_conflicting_value_fails_the_run_naming_record_and_column(tmp_path: Path) -> None:
    tables = sql_committer(tmp_path)
    plan, result = infer_run(tmp_path / "r1", [PIZZA], None)
    commit(tables, plan, result, -1, 0)
    strict = {"schema_mode": SchemaMode.STRICT, "json_schema": {"type": "object"}}
    _, failed = infer_run(
        tmp_path / "r2",
        [PIZZA, {**PIZZA, "store_id": 42.5}],
        sql_committer(tmp_path),
        first_offset=1,
        **strict,
    )
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert (failed.failure.record_id, failed.failure.column) == ("orders:0:2", "store_id")


def test_without_create_table_if_missing_a_missing_inferred_table_is_the_clear_error(tmp_path: Path) -> None:
    _, result = infer_run(tmp_path / "r1", [PIZZA], None)
    spec = TableSpec(identifier=TABLE, fields=table_fields(result.columns or ()), evolve=False)
    with pytest.raises(TableMissingError, match=TABLE):
        sql_committer(tmp_path).ensure_table(spec)


def test_new_columns_of_one_record_keep_the_records_field_order() -> None:
    assert list(columns_of({"zeta": 1, "alpha": 2, "mid": 3})) == ["zeta", "alpha", "mid"]


def test_a_struct_column_gains_the_fields_new_inside_it_also_as_a_lists_element() -> None:
    current = (
        ColumnSpec(
            name="delivery",
            type=ColumnType.STRUCT,
            fields=(ColumnSpec(name="driver", type=ColumnType.STRING),),
        ),
        ColumnSpec(
            name="items",
            type=ColumnType.LIST,
            element=ColumnSpec(
                name="element",
                type=ColumnType.STRUCT,
                fields=(ColumnSpec(name="pizza", type=ColumnType.STRING),),
            ),
        ),
    )
    got = columns_of(
        {"delivery": {"driver": 7, "minutes": 25}, "items": [{"pizza": "m", "qty": 2}]}, current=current
    )
    assert got == {
        "delivery": "struct<driver: string, minutes: long>",  # `driver` keeps its type
        "items": "list<struct<pizza: string, qty: long>>",
    }


def test_fields_new_inside_struct_columns_land_in_the_same_commit_with_the_ids_planned(
    tmp_path: Path,
) -> None:
    first = {**PIZZA, "delivery": {"driver": "Sam"}, "items": [{"pizza": "marinara"}]}
    plan, result = infer_run(tmp_path / "r1", [first], None)
    commit(sql_committer(tmp_path), plan, result, -1, 0)
    versions = len(load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE).metadata.metadata_log)

    later = {
        **PIZZA,
        "delivery": {"driver": "Jo", "minutes": 25},
        "items": [{"pizza": "diavola", "qty": 2}],
        "tip": 1,
    }
    plan, result = infer_run(tmp_path / "r2", [later], sql_committer(tmp_path), first_offset=1)
    commit(sql_committer(tmp_path), plan, result, 0, 1)  # the files' ids are checked against the table's

    table = load_iceberg_catalog(sql_settings(tmp_path)).load_table(TABLE)
    assert len(table.metadata.metadata_log) == versions + 1
    planned = result.field_ids or {}
    table_ids = field_ids_by_path(table.schema())
    for path in ("delivery.minutes", "items.element.qty", "tip", "delivery.driver"):
        assert planned[path] == table_ids[path], path  # the files carry the table's ids
    columns = {c.name: c.type_name for c in table_columns(table.schema())}
    assert columns["delivery"] == "struct<driver: string, minutes: long>"
    assert columns["items"] == "list<struct<pizza: string, qty: long>>"
    assert columns["tip"] == "long"
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["delivery"], r["items"]) for r in rows] == [
        ({"driver": "Sam", "minutes": None}, [{"pizza": "marinara", "qty": None}]),
        ({"driver": "Jo", "minutes": 25}, [{"pizza": "diavola", "qty": 2}]),
    ]


def test_a_field_with_an_empty_name_never_becomes_a_column() -> None:
    assert columns_of({"": 1, "s": {"": "x", "k": True}}) == {"s": "struct<k: boolean>"}


def test_a_table_whose_ids_the_launcher_could_not_plan_gets_files_without_ids(tmp_path: Path) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add(0, [order_record(0, 0, value=json.dumps(PIZZA).encode())])
    plan: RunPlan = make_plan(
        folder, str(tmp_path / "out"), ranges={0: (-1, 0)}, columns=(), infer_columns=True
    )
    unplanned = plan.model_copy(update={"table": plan.table.model_copy(update={"last_column_id": 20})})
    observed = {TABLE: observe(PIZZA)}
    assert with_inferred_columns(unplanned, observed).table.field_ids is None  # never guessed as new
    created = with_inferred_columns(plan, observed).table.field_ids  # a new table: its creation's ids
    assert created is not None
    assert (created["record_id"], created["order_id"]) == (1, 9)


def test_config_accepts_infer_with_a_route_and_beside_another_mapping_of_the_topic() -> None:
    route = {"field": "kind", "table_template": "prod.kind_{value}", "default_table": TABLE}
    routed = {"table": "", "route": route, "schema": {"source": "infer"}}
    config = parse_config(_config(routed), source="test.yaml", environ={})
    assert config.mappings[0].schema_.source == "infer"
    text = yaml.safe_load(_config({"schema": {"source": "infer"}}))
    text["mappings"].append({"topic": "orders", "table": "prod.orders_raw"})
    both = parse_config(yaml.safe_dump(text), source="test.yaml", environ={})
    assert [m.schema_.source for m in both.mappings_for("orders")] == ["infer", "none"]
