"""The position-delete writer (`dataplane/position_deletes.py`) and the row delta that commits its files
(`adapters/iceberg_row_delta.py`): Iceberg v2 position delete files pyiceberg reads, in one snapshot
with the data files added beside them, on a real SQLite catalog."""

from __future__ import annotations

from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import ManifestContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_row_delta import add_row_delta, position_delete_entry
from kafscale_iceberg.dataplane.position_deletes import (
    FILE_PATH_FIELD_ID,
    POS_FIELD_ID,
    position_delete_rows,
    write_position_deletes,
)
from tests.support.iceberg_runs import sql_settings

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "region", IntegerType(), required=True),
)
ARROW = pa.schema(
    [pa.field("id", pa.int64(), False), pa.field("name", pa.string()), pa.field("region", pa.int32(), False)]
)


def rows(ids: range, region: int) -> pa.Table:
    return pa.table(
        {"id": list(ids), "name": [f"n{i}" for i in ids], "region": [region] * len(ids)}, schema=ARROW
    )


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog = load_iceberg_catalog(sql_settings(tmp_path))
    catalog.create_namespace("prod")
    return catalog


@pytest.fixture
def table(catalog: Catalog) -> Table:
    """Two regions (identity partitions), three files: region 0 ids 0-9 and 10-19, region 1 ids 100-109."""
    spec = PartitionSpec(
        PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="region")
    )
    table = catalog.create_table("prod.t", SCHEMA, partition_spec=spec)
    for part in (rows(range(10), 0), rows(range(10, 20), 0), rows(range(100, 110), 1)):
        table.append(part)
    return catalog.load_table("prod.t")


def files_by_first_id(table: Table) -> dict[int, str]:
    found = {}
    for task in table.scan().plan_files():
        first = pq.read_table(task.file.file_path.removeprefix("file://"), columns=["id"]).column("id")[0]
        found[first.as_py()] = task.file.file_path
    return found


def test_rows_are_sorted_by_file_then_position_each_once() -> None:
    written = position_delete_rows(
        {"s3://b/z.parquet": np.array([7, 2, 2]), "s3://b/a.parquet": np.array([5])}
    )
    assert written.to_pylist() == [
        {"file_path": "s3://b/a.parquet", "pos": 5},
        {"file_path": "s3://b/z.parquet", "pos": 2},
        {"file_path": "s3://b/z.parquet", "pos": 7},
    ]


def test_the_file_carries_the_spec_field_ids_and_required_columns(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/deletes.parquet"
    written = write_position_deletes(StagedFileStore(), uri, {"s3://b/a.parquet": np.array([3, 1])})
    schema = pq.read_schema(tmp_path / "deletes.parquet")
    assert [(f.name, f.nullable, f.metadata[b"PARQUET:field_id"]) for f in schema] == [
        ("file_path", False, str(FILE_PATH_FIELD_ID).encode()),
        ("pos", False, str(POS_FIELD_ID).encode()),
    ]
    assert (written.record_count, written.pos_lower, written.pos_upper) == (2, 1, 3)
    assert written.targets == ("s3://b/a.parquet",)
    assert written.size_bytes == (tmp_path / "deletes.parquet").stat().st_size


def test_a_file_with_nothing_to_delete_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no position to delete"):
        write_position_deletes(StagedFileStore(), f"file://{tmp_path}/d.parquet", {"s3://b/a": np.array([])})


def test_a_row_delta_adds_data_and_deletes_in_one_snapshot_pyiceberg_reads(
    catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    files = files_by_first_id(table)
    live = {t.file.file_path: t.file for t in table.scan().plan_files()}
    sink = StagedFileStore()
    # Region 0: rows 2 and 5 of the first file, row 0 of the second (ids 2, 5, 10); region 1: id 107;
    # id 5 is updated (its new row added), the others deleted.
    region0 = write_position_deletes(
        sink, f"file://{tmp_path}/d0.parquet", {files[0]: np.array([5, 2]), files[10]: np.array([0])}
    )
    region1 = write_position_deletes(sink, f"file://{tmp_path}/d1.parquet", {files[100]: np.array([7])})
    # The new row of the updated id 5 lands beside the deletes, in a data file of the same snapshot.
    data_files = list(
        _dataframe_to_data_files(table_metadata=table.metadata, df=rows(range(5, 6), 0), io=table.io)
    )
    delta = table.transaction()
    add_row_delta(
        delta,
        data_files,
        [position_delete_entry(region0, live[files[0]]), position_delete_entry(region1, live[files[100]])],
        {"kafscale.run-id": "r1"},
    )
    delta.commit_transaction()

    table = catalog.load_table("prod.t")
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert ids == sorted([*(set(range(20)) | set(range(100, 110))) - {2, 5, 10, 107}, 5])
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    summary = snapshot.summary
    assert summary.operation.value == "overwrite"
    assert (
        summary["added-delete-files"],
        summary["added-position-deletes"],
        summary["added-data-files"],
    ) == (
        "2",
        "4",
        "1",
    )
    assert summary["kafscale.run-id"] == "r1"
    manifests = snapshot.manifests(table.io)
    deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
    assert len(deletes) == 1
    assert deletes[0].sequence_number == snapshot.sequence_number
    new_data_manifests = [
        m
        for m in manifests
        if m.added_snapshot_id == snapshot.snapshot_id and m.content == ManifestContent.DATA
    ]
    assert [m.sequence_number for m in new_data_manifests] == [snapshot.sequence_number]
    entries = list(fastavro.reader(open(deletes[0].manifest_path.removeprefix("file://"), "rb")))  # noqa: SIM115
    by_uri = {e["data_file"]["file_path"]: e["data_file"] for e in entries}
    assert by_uri[region1.uri]["referenced_data_file"] == files[100]
    assert by_uri[region0.uri]["referenced_data_file"] is None
    assert by_uri[region0.uri]["partition"] == {"region": 0}
    assert by_uri[region1.uri]["partition"] == {"region": 1}
