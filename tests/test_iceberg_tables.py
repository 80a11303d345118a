"""Iceberg tables on a real SQLite catalog: creation, evolution, partitioning, one-commit semantics."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import iceberg_type
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.domain.commits import TableCommit, TableMarker, TableSpec
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, DataFile, PartitionField, PartitionTransform
from kafscale_iceberg.domain.schema import BASE_FIELDS, table_fields
from kafscale_iceberg.exceptions import (
    DataFileRejectedError,
    PartitionSpecMismatchError,
    SchemaChangeError,
    TableChangedError,
    TableMissingError,
)
from tests.support.iceberg_runs import DAY_ZERO, data_rows, sql_settings, write_file

TABLE = "lake.orders"


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return load_iceberg_catalog(sql_settings(tmp_path))


@pytest.fixture
def tables(catalog: Catalog) -> IcebergTableCommitter:
    return IcebergTableCommitter(catalog)


def _spec(
    *columns: ColumnSpec, widen: bool = False, partition_by: tuple[PartitionField, ...] = ()
) -> TableSpec:
    return TableSpec(
        identifier=TABLE,
        fields=table_fields(columns),
        partition_by=partition_by,
        create_if_missing=True,
        allow_type_widening=widen,
    )


def _go_processor_table(catalog: Catalog, *extra: NestedField) -> None:
    """A table as KafScale's Go processor creates it: the 8 base fields (ids 1-8), its properties only."""
    catalog.create_namespace_if_not_exists("lake")
    base = [
        NestedField(f.field_id or 0, f.name, iceberg_type(f.type), required=f.required) for f in BASE_FIELDS
    ]
    location = f"{catalog.properties['warehouse']}/lake/orders"
    catalog.create_table(
        TABLE,
        Schema(*base, *extra),
        properties={
            "write.format.default": "parquet",
            "write.data.path": f"{location}/data",
            "write.metadata.path": f"{location}/metadata",
        },
    )


def _commit(tables: IcebergTableCommitter, uris: tuple[str, ...], end: int) -> None:
    state = tables.read_state(TABLE, "orders")
    tables.commit(
        state,
        TableCommit(
            topic="orders",
            run_id="r1",
            file_uris=uris,
            start_offsets={0: -1},
            end_offsets={0: end},
            marker_after=TableMarker(offsets={0: end}, run_id="r1"),
        ),
    )


def test_a_new_table_has_the_base_fields_with_ids_1_to_8_then_the_mapping_columns(
    tables: IcebergTableCommitter, catalog: Catalog
) -> None:
    changes = tables.ensure_table(_spec(ColumnSpec(name="amount", type=ColumnType.LONG, required=True)))

    table = catalog.load_table(TABLE)
    fields = [(f.field_id, f.name, str(f.field_type), f.required) for f in table.schema().fields]
    assert changes.created
    assert fields[:8] == [(f.field_id, f.name, str(iceberg_type(f.type)), f.required) for f in BASE_FIELDS]
    assert fields[8] == (9, "amount", "long", True)
    assert table.properties["write.format.default"] == "parquet"
    assert '"field-id":9' in table.properties["schema.name-mapping.default"]


def test_timestamp_columns_are_iceberg_timestamps_without_zone(
    tables: IcebergTableCommitter, catalog: Catalog
) -> None:
    tables.ensure_table(
        _spec(ColumnSpec(name="at", type=ColumnType.TIMESTAMP), ColumnSpec(name="d", type=ColumnType.DATE))
    )

    schema = catalog.load_table(TABLE).schema()
    assert str(schema.find_field("at").field_type) == "timestamp"
    assert str(schema.find_field("d").field_type) == "date"


def test_a_missing_table_is_not_created_unless_the_mapping_allows_it(tables: IcebergTableCommitter) -> None:
    spec = TableSpec(identifier=TABLE, fields=table_fields(()), create_if_missing=False)

    with pytest.raises(TableMissingError, match="create_table_if_missing"):
        tables.ensure_table(spec)


def test_a_go_processor_table_takes_new_columns_as_optional_and_keeps_ids_1_to_8(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    _go_processor_table(catalog)
    columns = (ColumnSpec(name="amount", type=ColumnType.LONG, required=True),)

    changes = tables.ensure_table(_spec(*columns))
    uri = write_file(data_rows("orders", 0, range(5), columns), tmp_path / "f.parquet").uri
    _commit(tables, (uri,), 4)

    table = catalog.load_table(TABLE)
    assert changes.added == ("amount",)
    assert [(f.field_id, f.name) for f in table.schema().fields][:8] == [
        (f.field_id, f.name) for f in BASE_FIELDS
    ]
    # Iceberg cannot add a required column to a table that may hold rows: added optional.
    assert table.schema().find_field("amount").required is False
    rows = table.scan().to_arrow()
    assert rows.column("amount").to_pylist() == [0, 10, 20, 30, 40]


def test_a_go_processor_table_without_mapping_columns_needs_no_change(
    tables: IcebergTableCommitter, catalog: Catalog
) -> None:
    _go_processor_table(catalog)

    assert not tables.ensure_table(_spec())


def test_int_is_widened_to_long_when_the_mapping_allows_widening(
    tables: IcebergTableCommitter, catalog: Catalog
) -> None:
    _go_processor_table(catalog, NestedField(9, "amount", IntegerType(), required=False))

    changes = tables.ensure_table(_spec(ColumnSpec(name="amount", type=ColumnType.LONG), widen=True))

    assert changes.widened == (("amount", "int", "long"),)
    assert catalog.load_table(TABLE).schema().find_field("amount").field_type == LongType()


def test_int_to_long_is_refused_without_widening_naming_table_column_and_types(
    tables: IcebergTableCommitter, catalog: Catalog
) -> None:
    _go_processor_table(catalog, NestedField(9, "amount", IntegerType(), required=False))

    with pytest.raises(SchemaChangeError, match="allow_type_widening") as raised:
        tables.ensure_table(_spec(ColumnSpec(name="amount", type=ColumnType.LONG)))

    assert (raised.value.table, raised.value.column) == (TABLE, "amount")
    assert (raised.value.table_type, raised.value.mapped_type) == ("int", "long")
    assert catalog.load_table(TABLE).schema().find_field("amount").field_type == IntegerType()


def test_an_incompatible_type_change_is_refused_even_with_widening(
    tables: IcebergTableCommitter, catalog: Catalog
) -> None:
    _go_processor_table(catalog, NestedField(9, "amount", StringType(), required=False))

    with pytest.raises(SchemaChangeError, match=r"'amount'.*string.*long") as raised:
        tables.ensure_table(_spec(ColumnSpec(name="amount", type=ColumnType.LONG), widen=True))

    assert (raised.value.table_type, raised.value.mapped_type) == ("string", "long")


def test_a_table_column_wider_than_the_mapping_is_kept_and_takes_narrower_files(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    _go_processor_table(catalog, NestedField(9, "amount", LongType(), required=False))
    columns = (ColumnSpec(name="amount", type=ColumnType.INT),)

    assert not tables.ensure_table(_spec(*columns))
    _commit(tables, (write_file(data_rows("orders", 0, range(3), columns), tmp_path / "f.parquet").uri,), 2)

    assert catalog.load_table(TABLE).scan().to_arrow().column("amount").to_pylist() == [0, 10, 20]


def test_a_required_column_the_mapping_declares_optional_is_relaxed(
    tables: IcebergTableCommitter, catalog: Catalog
) -> None:
    _go_processor_table(catalog, NestedField(9, "amount", LongType(), required=True))

    changes = tables.ensure_table(_spec(ColumnSpec(name="amount", type=ColumnType.LONG, required=False)))

    assert changes.relaxed == ("amount",)
    assert catalog.load_table(TABLE).schema().find_field("amount").required is False


def test_a_partitioned_table_takes_files_with_one_value_per_partition_field(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    columns = (ColumnSpec(name="event_time", type=ColumnType.TIMESTAMP),)
    partition_by = (
        PartitionField(column="partition"),
        PartitionField(column="event_time", transform=PartitionTransform.DAY),
    )
    tables.ensure_table(_spec(*columns, partition_by=partition_by))
    uris = tuple(
        write_file(data_rows("orders", p, range(4), columns), tmp_path / f"p{p}.parquet").uri for p in (0, 1)
    )

    _commit(tables, uris, 3)

    table = catalog.load_table(TABLE)
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("partition", "identity"),
        ("event_time_day", "day"),
    ]
    partitions = table.inspect.partitions().to_pydict()["partition"]
    day_one = DAY_ZERO.date() + dt.timedelta(days=1)
    assert sorted((v["partition"], v["event_time_day"]) for v in partitions) == [
        (0, DAY_ZERO.date()),
        (1, day_one),
    ]


def test_a_file_spanning_two_partition_values_is_rejected_and_nothing_is_written(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    columns = (ColumnSpec(name="event_time", type=ColumnType.TIMESTAMP),)
    tables.ensure_table(_spec(*columns, partition_by=(PartitionField(column="partition"),)))
    mixed = pa.concat_tables([data_rows("orders", p, range(2), columns) for p in (0, 1)])
    uri = write_file(mixed, tmp_path / "mixed.parquet").uri

    with pytest.raises(DataFileRejectedError, match=TABLE):
        _commit(tables, (uri,), 1)

    assert catalog.load_table(TABLE).snapshots() == []


BY_OFFSET_BUCKET = (PartitionField(column="offset", transform=PartitionTransform.BUCKET, parameter=4),)


def _bucket_commit(tables: IcebergTableCommitter, file: DataFile) -> None:
    state = tables.read_state(TABLE, "orders")
    marker = TableMarker(offsets={0: 0}, run_id="r1")
    tables.commit(
        state,
        TableCommit(
            topic="orders",
            run_id="r1",
            file_uris=(file.uri,),
            files=(file,),
            start_offsets={0: -1},
            end_offsets={0: 0},
            marker_after=marker,
        ),
    )


def test_a_file_read_from_its_footer_takes_the_bucket_value_its_task_carried(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    tables.ensure_table(_spec(partition_by=BY_OFFSET_BUCKET))
    written = write_file(data_rows("orders", 0, [0], ()), tmp_path / "f.parquet")  # no carried metrics
    bucket = BucketTransform(4).transform(LongType())(0)

    _bucket_commit(tables, written.model_copy(update={"partition_values": {"offset_bucket": bucket}}))

    (task,) = catalog.load_table(TABLE).scan().plan_files()
    assert task.file.partition[0] == bucket


def test_a_file_without_its_bucket_value_is_rejected_naming_the_field_and_nothing_is_written(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    tables.ensure_table(_spec(partition_by=BY_OFFSET_BUCKET))
    written = write_file(data_rows("orders", 0, [0], ()), tmp_path / "f.parquet")

    with pytest.raises(DataFileRejectedError, match="'offset_bucket'"):
        _bucket_commit(tables, written)

    assert catalog.load_table(TABLE).snapshots() == []


def test_a_partitioned_table_and_an_unpartitioned_mapping_are_refused(
    tables: IcebergTableCommitter,
) -> None:
    columns = (ColumnSpec(name="event_time", type=ColumnType.TIMESTAMP),)
    tables.ensure_table(
        _spec(*columns, partition_by=(PartitionField(column="event_time", transform=PartitionTransform.DAY),))
    )

    with pytest.raises(PartitionSpecMismatchError, match=r"day\(event_time\)"):
        tables.ensure_table(_spec(*columns))


def test_one_commit_of_many_files_is_one_snapshot_carrying_the_marker(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    tables.ensure_table(_spec())
    uris = tuple(
        write_file(data_rows("orders", 0, range(i * 10, i * 10 + 10), ()), tmp_path / f"f{i}.parquet").uri
        for i in range(5)
    )

    _commit(tables, uris, 49)

    table = catalog.load_table(TABLE)
    assert len(table.snapshots()) == 1
    summary = table.snapshots()[0].summary
    assert summary is not None
    assert summary["added-data-files"] == "5"
    assert summary["kafscale.offsets"] == '{"0":49}'
    assert table.properties["kafscale.offsets.orders"] == '{"0":49}'
    assert tables.read_state(TABLE, "orders").marker.offsets == {0: 49}


def test_a_commit_built_on_a_stale_state_is_refused_and_writes_nothing(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    tables.ensure_table(_spec())
    stale = tables.read_state(TABLE, "orders")
    _commit(tables, (write_file(data_rows("orders", 0, range(5), ()), tmp_path / "a.parquet").uri,), 4)
    later = TableCommit(
        topic="orders",
        run_id="r2",
        file_uris=(write_file(data_rows("orders", 0, range(5), ()), tmp_path / "b.parquet").uri,),
        start_offsets={0: -1},
        end_offsets={0: 4},
        marker_after=TableMarker(offsets={0: 4}, run_id="r2"),
    )

    with pytest.raises(TableChangedError):
        tables.commit(stale, later)

    assert catalog.load_table(TABLE).scan().to_arrow().num_rows == 5


def test_a_new_table_goes_under_the_warehouse_whatever_location_its_namespace_has(
    tables: IcebergTableCommitter, catalog: Catalog, tmp_path: Path
) -> None:
    """A Glue database with its own `LocationUri` (a namespace `location`) would have pyiceberg create
    the table there, outside the warehouse the stack's roles may write: tables are created at the
    warehouse explicitly, in pyiceberg's layout."""
    namespace = TABLE.split(".", maxsplit=1)[0]
    catalog.create_namespace(namespace, properties={"location": f"file://{tmp_path}/elsewhere"})
    tables.ensure_table(_spec())
    assert catalog.load_table(TABLE).location() == f"file://{tmp_path}/warehouse/{TABLE.replace('.', '.db/')}"
