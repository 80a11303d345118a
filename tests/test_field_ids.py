"""Parquet field ids: the data plane writes the table's ids, pyiceberg reads them without a name mapping.

Real parts: segments decoded and written by the data plane's task (in this process, no Spark), a
SQLite Iceberg catalog, a SQLite checkpoint store, the commit service.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.schemas import FIELD_ID_KEY
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.field_ids import TableFieldIds, TopicFieldIds, field_ids_uri, planned_field_ids
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RunPlan, RunResult, RunTimings
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, table_fields
from kafscale_iceberg.exceptions import FieldIdMismatchError
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.field_id_records import FieldIdRecords
from tests.support.iceberg_runs import sql_settings
from tests.support.spark_job import ORDER_COLUMNS, SegmentFolder, make_plan

TABLE, DLQ = "prod.orders", "prod.orders_dead_letters"
CREATE = TablePolicy(create_table_if_missing=True)
NAME_MAPPING = "schema.name-mapping.default"


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return load_iceberg_catalog(sql_settings(tmp_path))


@pytest.fixture
def service(catalog: Catalog, tmp_path: Path) -> CommitService:
    return CommitService(IcebergTableCommitter(catalog), SqliteCheckpointStore(tmp_path / "offsets.db"))


def _with_ids(plan: RunPlan, known: TopicFieldIds, columns: tuple[ColumnSpec, ...]) -> RunPlan:
    table = plan.table.model_copy(
        update={"field_ids": planned_field_ids(table_fields(columns), known.table(TABLE))}
    )
    dead = plan.dead_letter_table.model_copy(
        update={"field_ids": planned_field_ids(DEAD_LETTER_FIELDS, known.table(DLQ))}
    )
    return plan.model_copy(update={"table": table, "dead_letter_table": dead})


def _run(plan: RunPlan) -> RunResult:
    reports = [
        run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
        for task in plan_tasks(plan, max_tasks=2, min_task_bytes=1)
    ]
    return build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))


def _commit(service: CommitService, plan: RunPlan, result: RunResult) -> None:
    checkpoints = service._checkpoints  # the store the service was built with
    grant = checkpoints.claim_lease(plan.topic, owner_id="test", run_id=plan.run_id)
    assert isinstance(grant, LeaseGrant)
    service.commit_run(plan, result, grant, CREATE)


def _drop_name_mapping(catalog: Catalog) -> None:
    table = catalog.load_table(TABLE)
    with table.transaction() as transaction:
        transaction.remove_properties(NAME_MAPPING)
    assert NAME_MAPPING not in catalog.load_table(TABLE).properties


def test_files_carry_the_tables_field_ids_and_read_back_without_a_name_mapping(
    tmp_path: Path, catalog: Catalog, service: CommitService
) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 20)
    folder.add_orders(1, 0, 10)
    plan = _with_ids(
        make_plan(folder, str(tmp_path), ranges={0: (-1, 19), 1: (-1, 9)}), TopicFieldIds(), ORDER_COLUMNS
    )
    result = _run(plan)
    _commit(service, plan, result)

    table_ids = {f.name: f.field_id for f in catalog.load_table(TABLE).schema().fields}
    for data_file in result.data_files:
        schema = pq.read_schema(data_file.uri.removeprefix("file://"))
        assert {f.name: int(f.metadata[FIELD_ID_KEY]) for f in schema} == table_ids
    order = [("partition", "ascending"), ("offset", "ascending")]
    mapped = catalog.load_table(TABLE).scan().to_arrow().sort_by(order)
    _drop_name_mapping(catalog)
    rows = catalog.load_table(TABLE).scan().to_arrow().sort_by(order)
    assert rows.num_rows == 30
    assert rows.column("order_id").null_count == 0
    assert rows.column("customer").null_count < rows.num_rows
    assert rows.equals(mapped)


def test_a_column_added_by_evolution_gets_the_id_the_plan_gave_its_files(
    tmp_path: Path, catalog: Catalog, service: CommitService
) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 10)
    first = _with_ids(make_plan(folder, str(tmp_path), ranges={0: (-1, 9)}), TopicFieldIds(), ORDER_COLUMNS)
    _commit(service, first, _run(first))
    known = service.field_ids((TABLE, DLQ))
    folder.add_orders(0, 10, 10)
    wider = (*ORDER_COLUMNS, ColumnSpec(name="coupon", type=ColumnType.STRING))
    second = _with_ids(
        make_plan(
            folder, str(tmp_path), ranges={0: (9, 19)}, segments={0: folder.written[0][1:]}, columns=wider
        ),
        known,
        wider,
    )
    assert second.table.field_ids is not None
    assert second.table.field_ids["coupon"] == known.tables[0].last_column_id + 1

    _commit(service, second, _run(second))

    schema = catalog.load_table(TABLE).schema()
    assert schema.find_field("coupon").field_id == second.table.field_ids["coupon"]
    _drop_name_mapping(catalog)
    rows = catalog.load_table(TABLE).scan().to_arrow()
    assert sorted(rows.column("offset").to_pylist()) == list(range(20))
    assert rows.column("order_id").null_count == 0  # old and new files both read by id


def test_files_without_ids_stay_readable_beside_files_with_ids(
    tmp_path: Path, catalog: Catalog, service: CommitService
) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 10)
    folder.add_orders(0, 10, 10)
    old = make_plan(folder, str(tmp_path), ranges={0: (-1, 9)}, segments={0: folder.written[0][:1]})
    assert old.table.field_ids is None
    _commit(service, old, _run(old))
    new = _with_ids(
        make_plan(folder, str(tmp_path), ranges={0: (9, 19)}, segments={0: folder.written[0][1:]}),
        service.field_ids((TABLE, DLQ)),
        ORDER_COLUMNS,
    )
    _commit(service, new, _run(new))

    rows = catalog.load_table(TABLE).scan().to_arrow()  # through the name mapping for the old file
    assert sorted(rows.column("offset").to_pylist()) == list(range(20))
    assert rows.column("order_id").null_count == 0


def test_files_with_ids_the_table_does_not_have_are_refused_and_nothing_is_committed(
    tmp_path: Path, catalog: Catalog, service: CommitService
) -> None:
    folder = SegmentFolder(tmp_path / "segments")
    folder.add_orders(0, 0, 10)
    folder.add_orders(0, 10, 10)
    first = make_plan(folder, str(tmp_path), ranges={0: (-1, 9)}, segments={0: folder.written[0][:1]})
    _commit(service, first, _run(first))
    known = service.field_ids((TABLE, DLQ))
    stale = TableFieldIds(
        identifier=TABLE,
        field_ids={**known.tables[0].field_ids, "customer": 99},
        last_column_id=known.tables[0].last_column_id,
    )
    second = _with_ids(
        make_plan(folder, str(tmp_path), ranges={0: (9, 19)}, segments={0: folder.written[0][1:]}),
        TopicFieldIds(tables=(stale,)),
        ORDER_COLUMNS,
    )
    snapshots = len(catalog.load_table(TABLE).snapshots())

    with pytest.raises(FieldIdMismatchError, match="customer: file id 99, table id 11"):
        _commit(service, second, _run(second))

    assert len(catalog.load_table(TABLE).snapshots()) == snapshots


def test_a_nested_column_whose_parts_were_not_recorded_is_planned_without_ids() -> None:
    """A `field-ids.json` written before parts were recorded knows `customer` but not its parts: ids on
    the struct but not on its parts would make id-trusting engines drop the parts, so no ids (read
    by name) until the commit step rewrites the document with every part."""
    nested = ColumnSpec.model_validate(
        {"name": "customer", "type": "struct", "fields": [{"name": "name", "type": "string"}]}
    )
    fields = table_fields((nested,))
    top_level = {f.name: i for i, f in enumerate(fields, start=1)}
    old = TableFieldIds(identifier=TABLE, field_ids=top_level, last_column_id=len(fields) + 1)
    assert planned_field_ids(fields, old) is None
    recorded = old.model_copy(update={"field_ids": {**top_level, "customer.name": len(fields) + 1}})
    assert planned_field_ids(fields, recorded) == {**top_level, "customer.name": len(fields) + 1}
    assert planned_field_ids(table_fields(ORDER_COLUMNS), None) == {
        f.name: i for i, f in enumerate(table_fields(ORDER_COLUMNS), start=1)
    }


def _document(version: str | None = None) -> TopicFieldIds:
    return TopicFieldIds(
        tables=(
            TableFieldIds(
                identifier="prod.orders", field_ids={"id": 9}, last_column_id=9, metadata_location=version
            ),
            TableFieldIds(identifier="prod.orders_dlq", field_ids={"error": 9}, last_column_id=9),
        )
    )


def test_the_document_is_written_only_when_its_content_differs_from_what_the_plan_was_made_from(
    tmp_path: Path,
) -> None:
    records = FieldIdRecords(DocumentStore(), str(tmp_path / "runs"))
    uri = field_ids_uri(str(tmp_path / "runs"), "orders")
    DocumentStore().write_text(uri, _document().model_dump_json(indent=2))  # another layout, same content
    read = records.read("orders")
    assert read is not None

    assert not records.write("orders", _document(), unless_digest=read.digest())
    assert DocumentStore().read_text(uri) == _document().model_dump_json(indent=2)  # not rewritten
    assert records.write("orders", _document("s3://w/00002.metadata.json"), unless_digest=read.digest())
    assert records.read("orders") == _document("s3://w/00002.metadata.json")


def test_a_compaction_moves_only_a_recorded_upsert_tables_version_it_follows(tmp_path: Path) -> None:
    records = FieldIdRecords(DocumentStore(), str(tmp_path / "runs"))
    earlier = ("s3://w/00001.metadata.json", "s3://w/00002.metadata.json")
    compacted = "s3://w/00003.metadata.json"
    assert not records.record_version("orders", "prod.orders", compacted, follows=earlier)  # no document
    records.write("orders", _document("s3://w/00002.metadata.json"))
    assert records.record_version("orders", "prod.orders", compacted, follows=earlier)
    assert records.read("orders") == _document(compacted)
    # A version a run's commit recorded since is newer than the compaction's: it stays.
    records.write("orders", _document("s3://w/00004.metadata.json"))
    assert not records.record_version("orders", "prod.orders", compacted, follows=earlier)
    assert records.read("orders") == _document("s3://w/00004.metadata.json")
    # A table recorded without a version (not an upsert table: nothing locates in it) is left alone.
    assert not records.record_version(
        "orders", "prod.orders_dlq", "s3://w/dlq/9.metadata.json", follows=earlier
    )
