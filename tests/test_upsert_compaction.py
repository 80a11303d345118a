"""Compaction of an upsert table keeps its files sorted by key: after `maintain --compact` the files
of each Iceberg partition hold disjoint key ranges (so a later run's locate step prunes by the key
bounds), no row changes, the table declares its key as its sort order, and a lone sorted file is not
rewritten again.

Real parts: the runs' tasks in this process and the real commit service on a SQLite catalog
(`tests/support/upsert_world.py`), the real maintainer.
"""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.iceberg_maintenance import CompactionPlan, IcebergTableMaintainer
from kafscale_iceberg.domain.maintenance import DeleteFolding
from kafscale_iceberg.domain.runs import PartitionField, PartitionTransform
from tests.support.upsert_world import TABLE, UpsertWorld


def keyed_world(tmp_path: Path) -> UpsertWorld:
    """An upsert table in 2 key buckets fed by 4 runs of random keys across 3 Kafka partitions."""
    bucket = PartitionField(column="id", transform=PartitionTransform.BUCKET, parameter=2)
    world = UpsertWorld(tmp_path, partition_by=(bucket,))
    shuffled = random.Random(7)
    for run in range(4):
        for partition in range(3):
            keys = shuffled.sample(range(3000), 60)
            world.write(partition, [({"id": k}, {"id": k, "name": f"r{run}-{k}"}) for k in keys])
        world.run()
    return world


def plan(maintainer: IcebergTableMaintainer) -> CompactionPlan:
    # Every position delete folded too (the runs of random keys are merge-on-read under `auto`).
    return maintainer.plan_compaction(
        TABLE,
        small_file_bytes=1 << 30,
        min_small_files=2,
        max_bytes=1 << 30,
        folding=DeleteFolding(max_delete_ratio=1e-9, max_delete_files=1),
    )


def compact(world: UpsertWorld, target_file_size_bytes: int) -> None:
    maintainer = IcebergTableMaintainer(world.catalog, StagedFileStore())
    written = maintainer.write_compaction(
        plan(maintainer),
        data_prefix=str(world.root / "compacted"),
        target_file_size_bytes=target_file_size_bytes,
    )
    assert maintainer.commit_compaction(written, now_ms=0).committed


def key_ranges_by_partition(world: UpsertWorld) -> dict[str, list[tuple[int, int]]]:
    """Per Iceberg partition, each data file's (lower, upper) bound of `id`, by lower bound."""
    table = world.catalog.load_table(TABLE)
    field_id = table.schema().find_field("id").field_id
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for task in table.scan().plan_files():
        bounds = [task.file.lower_bounds[field_id], task.file.upper_bounds[field_id]]
        low, high = (int.from_bytes(b, "little", signed=True) for b in bounds)
        ranges[repr(task.file.partition)].append((low, high))
    return {partition: sorted(found) for partition, found in ranges.items()}


def test_compaction_writes_an_upsert_tables_files_in_key_order_with_disjoint_key_bounds(
    tmp_path: Path,
) -> None:
    world = keyed_world(tmp_path)
    before = world.by_key()
    overlapping = [
        r for r in key_ranges_by_partition(world).values() if any(a[1] >= b[0] for a, b in pairwise(r))
    ]
    assert overlapping, "the runs' files overlap before compaction (else this test shows nothing)"

    compact(world, target_file_size_bytes=4096)

    assert world.by_key() == before
    ranges = key_ranges_by_partition(world)
    assert len(ranges) == 2
    for files in ranges.values():
        assert len(files) > 1
        assert all(earlier[1] < later[0] for earlier, later in pairwise(files)), files


def test_an_upsert_table_declares_its_key_as_its_sort_order(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path)
    world.write(0, [({"id": 1}, {"id": 1, "name": "a"})])
    world.run()
    table = world.catalog.load_table(TABLE)
    [field] = table.sort_order().fields
    assert (table.schema().find_column_name(field.source_id), str(field.transform), field.direction.name) == (
        "id",
        "identity",
        "ASC",
    )


def test_a_compacted_upsert_partition_of_one_file_is_not_rewritten_again(tmp_path: Path) -> None:
    world = keyed_world(tmp_path)
    compact(world, target_file_size_bytes=1 << 30)
    assert [len(files) for files in key_ranges_by_partition(world).values()] == [1, 1]
    assert plan(IcebergTableMaintainer(world.catalog, StagedFileStore())).groups == ()


def test_a_table_that_becomes_an_upsert_table_gets_its_key_as_its_sort_order_at_its_next_run(
    tmp_path: Path,
) -> None:
    world = UpsertWorld(tmp_path)
    upsert, world.upsert = world.upsert, None  # type: ignore[assignment]
    world.write(0, [({"id": 1}, {"id": 1, "name": "a"})])
    world.run()  # an append run: no identifier fields, no sort order
    assert world.catalog.load_table(TABLE).sort_order().is_unsorted
    world.upsert = upsert
    world.write(0, [({"id": 2}, {"id": 2, "name": "b"})])
    world.run()
    table = world.catalog.load_table(TABLE)
    assert table.schema().identifier_field_names() == {"id"}
    assert [table.schema().find_column_name(f.source_id) for f in table.sort_order().fields] == ["id"]
