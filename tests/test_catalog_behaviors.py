"""What the product relies on from an Iceberg catalog, on every catalog that installs here.

One suite, two catalogs (as pyiceberg's tests/catalog/test_catalog_behaviors.py does): the SQLite
catalog with a local warehouse, and SeaweedFS's Iceberg REST catalog over a table bucket (OAuth2
client credentials, its S3 for the files), both opened through the product's own config path
(`CatalogSettings` -> `load_iceberg_catalog`) and used through its adapter (`IcebergTableCommitter`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_schemas import NAME_MAPPING, field_ids_by_path
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.domain.commits import TableCommit, TableMarker, TableSpec
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.domain.table_locations import created_table_location, data_location_of, is_under
from kafscale_iceberg.exceptions import TableChangedError
from kafscale_iceberg.local.seaweedfs import EmbeddedSeaweedFS
from tests.support.iceberg_runs import data_rows, sql_settings
from tests.support.seaweedfs import TableBucket, seaweedfs_client

TABLE = "lake.orders"
TOPIC = "orders"
CUSTOMER = ColumnSpec(
    name="customer",
    type=ColumnType.STRUCT,
    fields=(
        ColumnSpec(name="name", type=ColumnType.STRING),
        ColumnSpec(
            name="tags", type=ColumnType.LIST, element=ColumnSpec(name="element", type=ColumnType.STRING)
        ),
    ),
)
AMOUNT = ColumnSpec(name="amount", type=ColumnType.LONG)


@dataclass
class CatalogWorld:
    """One catalog as the product opens it, and how a test puts a data file where a run would."""

    settings: CatalogSettings
    catalog: Catalog
    tables: IcebergTableCommitter
    put_file: Callable[[pa.Table, str], str]

    def committer(self) -> IcebergTableCommitter:
        """Another committer on the same catalog (a second writer)."""
        return IcebergTableCommitter(load_iceberg_catalog(self.settings))


def _sqlite_world(tmp_path: Path) -> CatalogWorld:
    settings = sql_settings(tmp_path)

    def put_file(rows: pa.Table, uri: str) -> str:
        path = Path(uri.removeprefix("file://"))
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, path)
        return uri

    catalog = load_iceberg_catalog(settings)
    return CatalogWorld(settings, catalog, IcebergTableCommitter(catalog), put_file)


def _seaweedfs_world(server: EmbeddedSeaweedFS, bucket: TableBucket) -> CatalogWorld:
    settings = CatalogSettings(
        type="rest",
        uri=server.iceberg_url,
        warehouse=bucket.warehouse,
        username=server.access_key,
        password=server.secret_key,
        s3_endpoint=server.s3_url,
        s3_region=server.region,
        s3_path_style=True,
        properties={"s3.access-key-id": server.access_key, "s3.secret-access-key": server.secret_key},
    )
    s3 = seaweedfs_client(server, "s3")

    def put_file(rows: pa.Table, uri: str) -> str:
        sink = pa.BufferOutputStream()
        pq.write_table(rows, sink)
        bucket_name, key = uri.removeprefix("s3://").split("/", 1)
        s3.put_object(Bucket=bucket_name, Key=key, Body=sink.getvalue().to_pybytes())
        return uri

    catalog = load_iceberg_catalog(settings)
    return CatalogWorld(settings, catalog, IcebergTableCommitter(catalog), put_file)


@pytest.fixture(params=["sqlite", "seaweedfs"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogWorld:
    if request.param == "sqlite":
        return _sqlite_world(tmp_path)
    server = request.getfixturevalue("seaweedfs")
    return _seaweedfs_world(server, request.getfixturevalue("table_bucket"))


def _spec(*columns: ColumnSpec) -> TableSpec:
    return TableSpec(identifier=TABLE, fields=table_fields(columns), create_if_missing=True)


CUSTOMER_TYPE = pa.struct([("name", pa.string()), ("tags", pa.list_(pa.field("element", pa.string())))])


def _rows(offsets: range, *, nested: bool = False) -> pa.Table:
    rows = data_rows(TOPIC, 0, offsets, (AMOUNT,))
    if not nested:
        return rows
    customers = [{"name": f"c{o}", "tags": [f"t{o}", "x"]} for o in offsets]
    return rows.append_column(pa.field("customer", CUSTOMER_TYPE), pa.array(customers, CUSTOMER_TYPE))


def _run_file(world: CatalogWorld, run_id: str, offsets: range, *, nested: bool = False) -> str:
    """A run's file as the data plane writes it: in the table's data location, no field ids."""
    data_location = world.tables.field_ids(TABLE).data_location
    assert data_location is not None
    return world.put_file(
        _rows(offsets, nested=nested), f"{data_location}/kafscale/{run_id}/part-00000.parquet"
    )


def _commit(tables: IcebergTableCommitter, run_id: str, uri: str, start: int, end: int) -> None:
    state = tables.read_state(TABLE, TOPIC)
    tables.commit(
        state,
        TableCommit(
            topic=TOPIC,
            run_id=run_id,
            file_uris=(uri,),
            start_offsets={0: start},
            end_offsets={0: end},
            marker_after=TableMarker(offsets={0: end}, run_id=run_id),
        ),
    )


def test_a_table_is_created_with_its_namespace_where_the_launcher_plans_its_files(
    world: CatalogWorld,
) -> None:
    changes = world.tables.ensure_table(_spec(AMOUNT))

    assert changes.created
    assert (TABLE.split(".", maxsplit=1)[0],) in world.catalog.list_namespaces()
    planned = created_table_location(world.settings.warehouse, TABLE)
    assert planned is not None
    assert world.tables.field_ids(TABLE).data_location == data_location_of(planned, {})


def test_ensuring_a_table_again_changes_nothing(world: CatalogWorld) -> None:
    world.tables.ensure_table(_spec(AMOUNT))
    version = world.catalog.load_table(TABLE).metadata_location

    again = world.tables.ensure_table(_spec(AMOUNT))

    assert not again.created
    assert not again
    assert world.catalog.load_table(TABLE).metadata_location == version


def test_a_new_column_evolves_the_table_with_the_next_ids(world: CatalogWorld) -> None:
    world.tables.ensure_table(_spec(AMOUNT))
    before = world.tables.field_ids(TABLE)

    world.tables.ensure_table(_spec(AMOUNT, CUSTOMER))

    after = world.tables.field_ids(TABLE)
    assert after.field_ids["customer"] == before.last_column_id + 1
    assert {after.field_ids[p] for p in ("customer.name", "customer.tags", "customer.tags.element")} == set(
        range(before.last_column_id + 2, before.last_column_id + 5)
    )


def test_field_ids_are_the_tables_as_the_catalog_returned_them(world: CatalogWorld) -> None:
    world.tables.ensure_table(_spec(AMOUNT, CUSTOMER))

    loaded = world.catalog.load_table(TABLE)
    recorded = world.tables.field_ids(TABLE)
    assert recorded.field_ids == field_ids_by_path(loaded.schema())
    assert recorded.last_column_id == loaded.metadata.last_column_id
    # The name mapping (how files without ids are read) is the catalog's ids, not the ones asked for.
    mapping = loaded.schema().name_mapping.model_dump_json()
    assert loaded.properties[NAME_MAPPING] == mapping


def test_files_without_field_ids_commit_and_read_back_by_name_with_nested_columns(
    world: CatalogWorld,
) -> None:
    world.tables.ensure_table(_spec(AMOUNT, CUSTOMER))
    uri = _run_file(world, "r1", range(0, 5), nested=True)

    _commit(world.tables, "r1", uri, -1, 4)

    scanned = (
        world.catalog.load_table(TABLE).scan(selected_fields=("offset", "amount", "customer")).to_arrow()
    )
    expected = _rows(range(0, 5), nested=True)
    assert scanned.sort_by("offset").column("customer").to_pylist() == expected.column("customer").to_pylist()
    assert scanned.sort_by("offset").column("amount").to_pylist() == expected.column("amount").to_pylist()


def test_a_commit_records_the_marker_and_its_summary(world: CatalogWorld) -> None:
    world.tables.ensure_table(_spec(AMOUNT))
    uri = _run_file(world, "r1", range(0, 3))

    _commit(world.tables, "r1", uri, -1, 2)

    state = world.committer().read_state(TABLE, TOPIC)
    assert state.marker is not None
    assert state.marker.run_id == "r1"
    assert dict(state.marker.offsets) == {0: 2}
    snapshot = world.catalog.load_table(TABLE).current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary["kafscale.run-id"] == "r1"
    assert is_under(uri, world.tables.field_ids(TABLE).data_location or "")


def test_a_commit_that_lost_the_race_to_another_writer_is_refused_and_writes_nothing(
    world: CatalogWorld,
) -> None:
    world.tables.ensure_table(_spec(AMOUNT))
    first = _run_file(world, "r1", range(0, 3))
    second = _run_file(world, "r2", range(0, 3))
    other = world.committer()
    stale = world.tables.read_state(TABLE, TOPIC)  # this writer holds the table's version as read
    _commit(other, "r1", first, -1, 2)

    with pytest.raises(TableChangedError):
        world.tables.commit(
            stale,
            TableCommit(
                topic=TOPIC,
                run_id="r2",
                file_uris=(second,),
                start_offsets={0: -1},
                end_offsets={0: 2},
                marker_after=TableMarker(offsets={0: 2}, run_id="r2"),
            ),
        )

    state = world.committer().read_state(TABLE, TOPIC)
    assert state.marker is not None
    assert state.marker.run_id == "r1"
    assert world.catalog.load_table(TABLE).scan().to_arrow().num_rows == 3
