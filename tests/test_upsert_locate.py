"""The locate step in the run's driver (`dataplane/upsert_locate.py`): from the table version the plan
names, only the files whose partition and key bounds may hold a changed key are candidates, read from
the Iceberg metadata with no catalog (a real SQLite-catalog table; its files read through the
`ObjectReader` port)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.dataplane.upsert_keys import KeyChanges
from kafscale_iceberg.dataplane.upsert_locate import locate
from kafscale_iceberg.domain.runs import PartitionField, PartitionTransform
from kafscale_iceberg.exceptions import UpsertTableError
from tests.support.upsert_world import TABLE, UpsertWorld


def row(key: int, name: str) -> tuple[object, object]:
    return {"id": key}, {"id": key, "name": name}


def changed(*keys: int) -> KeyChanges:
    rows = pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "partition": pa.array([0] * len(keys), pa.int32()),
            "offset": pa.array(range(len(keys)), pa.int64()),
        }
    )
    return KeyChanges(("id",), rows, rows.slice(0, 0))


def test_only_files_whose_key_bounds_hold_a_changed_key_are_candidates(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    for first in (0, 100, 200):  # three runs: three files of disjoint key ranges
        world.write(0, [row(k, "old") for k in range(first, first + 50)])
        world.run()
    located = locate(DocumentStore(), world.metadata_location(), changed(120, 130))
    assert located.table_files == 3
    assert located.snapshot_id == world.catalog.load_table(TABLE).metadata.current_snapshot_id
    [candidate] = located.candidates
    holding = [t.file for t in world.catalog.load_table(TABLE).scan(row_filter="id == 120").plan_files()]
    assert [candidate.uri] == [f.file_path for f in holding]
    assert candidate.size_bytes == holding[0].file_size_in_bytes


def test_a_key_between_files_bounds_is_in_no_candidate(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    for first in (0, 100):
        world.write(0, [row(k, "old") for k in range(first, first + 50)])
        world.run()
    assert locate(DocumentStore(), world.metadata_location(), changed(75)).candidates == ()


def test_a_bucket_partitioned_table_prunes_by_the_changed_keys_buckets(tmp_path: Path) -> None:
    world = UpsertWorld(
        tmp_path,
        partition_by=(PartitionField(column="id", transform=PartitionTransform.BUCKET, parameter=8),),
    )
    world.write(0, [row(k, "old") for k in range(64)])
    world.run()
    table = world.catalog.load_table(TABLE)
    located = locate(DocumentStore(), world.metadata_location(), changed(7))
    [holding] = [t.file for t in table.scan(row_filter="id == 7").plan_files()]
    assert [c.uri for c in located.candidates] == [holding.file_path]
    # A file written from the candidate's rows must carry its bucket (its bounds cannot give it).
    assert located.candidates[0].partition_values == {"id_bucket": holding.partition[0]}
    assert located.table_files == len(list(table.scan().plan_files())) > 1


def test_a_table_without_a_snapshot_or_version_has_no_candidates(tmp_path: Path) -> None:
    located = locate(DocumentStore(), None, changed(1))
    assert (located.snapshot_id, located.candidates, located.table_files) == (None, (), 0)


def test_a_key_column_the_table_lacks_is_refused_naming_it(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [row(1, "a")])
    world.run()
    rows = pa.table(
        {"sku": ["x"], "partition": pa.array([0], pa.int32()), "offset": pa.array([0], pa.int64())}
    )
    with pytest.raises(UpsertTableError, match="no key column 'sku'"):
        locate(DocumentStore(), world.metadata_location(), KeyChanges(("sku",), rows, rows.slice(0, 0)))
