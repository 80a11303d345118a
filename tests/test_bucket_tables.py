"""Tables partitioned by `bucket(N, col)` and `truncate(W, col)`: created, fed, read, compacted, reset.

Real parts: segments decoded and written by the data plane's task (in this process, no Spark), the
commit service over a SQLite Iceberg catalog and a SQLite checkpoint store, `maintain`, the offset
reset, pyiceberg's scan planning and DuckDB's Iceberg reader. Each file's partition is checked
against pyiceberg's own transforms of the rows the file holds, so a wrong value cannot hide.
"""

from __future__ import annotations

import glob
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, TruncateTransform
from pyiceberg.types import LongType, StringType

from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import PartitionField, PartitionTransform, RunPlan
from kafscale_iceberg.services.offset_reset import OffsetReset
from tests.support.spark_job import order_value
from tests.support.upsert_world import TABLE as UPSERT_TABLE
from tests.support.upsert_world import UpsertWorld
from tests.test_maintenance import DLQ, PARTITIONS, PER_RUN, TABLE, TOPIC, World

BUCKETS, WIDTH = 4, 11
PARTITION_BY = (
    PartitionField(column="order_id", transform=PartitionTransform.BUCKET, parameter=BUCKETS),
    # "customer <17> & co" -> "customer <1": values of several offsets share a partition.
    PartitionField(column="customer", transform=PartitionTransform.TRUNCATE, parameter=WIDTH),
)
ORDER_BUCKET = BucketTransform(BUCKETS).transform(LongType())
CUSTOMER_TRUNC = TruncateTransform(WIDTH).transform(StringType())


class BucketWorld(World):
    """`test_maintenance.World` whose runs write a table partitioned by `PARTITION_BY`."""

    def plan_next(self, *, min_bytes: int = 1 << 30) -> RunPlan:
        plan = super().plan_next(min_bytes=min_bytes)
        conversion = plan.conversion.model_copy(update={"partition_by": PARTITION_BY})
        return plan.model_copy(update={"conversion": conversion})

    def table(self) -> Table:
        return self.catalog.load_table(TABLE)


def _order_id(partition: int, offset: int) -> int:
    return int(order_value(offset, partition).split(b'"order_id":')[1].split(b",")[0])


def _assert_each_file_holds_its_partitions_rows(table: Table) -> None:
    """Every data file's partition is pyiceberg's bucket and truncate of each of its rows."""
    for task in table.scan().plan_files():
        rows = pq.read_table(task.file.file_path.removeprefix("file://"), columns=["order_id", "customer"])
        buckets = {ORDER_BUCKET(v) for v in rows.column("order_id").to_pylist()}
        prefixes = {CUSTOMER_TRUNC(v) for v in rows.column("customer").to_pylist()}
        assert (buckets, prefixes) == ({task.file.partition[0]}, {task.file.partition[1]}), (
            task.file.file_path
        )


@pytest.fixture
def world(tmp_path: Path) -> BucketWorld:
    return BucketWorld(tmp_path)


def test_a_new_table_is_created_with_bucket_and_truncate_fields_named_as_iceberg_names_them(
    world: BucketWorld,
) -> None:
    world.produce(1)

    fields = [(f.name, str(f.transform)) for f in world.table().spec().fields]
    assert fields == [("order_id_bucket", "bucket[4]"), ("customer_trunc", "truncate[11]")]


def test_each_committed_file_holds_one_bucket_and_one_prefix_and_every_record_lands_once(
    world: BucketWorld,
) -> None:
    world.produce(3)

    table = world.table()
    _assert_each_file_holds_its_partitions_rows(table)
    assert len(table.scan().plan_files()) > BUCKETS  # the runs' rows really were split
    assert Counter(zip(*world.rows().select(["partition", "offset"]).to_pydict().values(), strict=True)) == (
        world.expected_pairs()
    )


def test_a_scan_filtered_on_the_source_column_reads_only_its_buckets_files_and_returns_its_row(
    world: BucketWorld,
) -> None:
    world.produce(3)
    table = world.table()
    wanted = _order_id(1, 17)

    planned = table.scan(row_filter=EqualTo("order_id", wanted)).plan_files()
    rows = table.scan(row_filter=EqualTo("order_id", wanted)).to_arrow()

    assert rows.select(["partition", "offset"]).to_pylist() == [{"partition": 1, "offset": 17}]
    assert {t.file.partition[0] for t in planned} == {ORDER_BUCKET(wanted)}
    assert len(planned) < len(table.scan().plan_files())


def test_a_scan_filtered_on_a_truncated_column_prunes_to_its_prefix(world: BucketWorld) -> None:
    world.produce(3)
    table = world.table()
    customer = "customer <42> & co"

    planned = table.scan(row_filter=EqualTo("customer", customer)).plan_files()
    rows = table.scan(row_filter=EqualTo("customer", customer)).to_arrow()

    assert sorted(rows.column("partition").to_pylist()) == list(range(PARTITIONS))
    assert {t.file.partition[1] for t in planned} == {"customer <4"}


def _files_per_partition_pair(world: BucketWorld) -> Counter[tuple[Any, ...]]:
    """How many files each (Iceberg partition, Kafka partition) has; a file mixing Kafka partitions
    counts under None."""
    kafka = world.table().schema().find_field("partition").field_id
    return Counter(
        (*f.partition, f.lower_bounds[kafka] if f.lower_bounds[kafka] == f.upper_bounds[kafka] else None)
        for f in world.files()
    )


def test_compaction_leaves_one_file_per_bucket_prefix_and_kafka_partition_and_changes_no_row(
    world: BucketWorld,
) -> None:
    world.produce(4)  # each run: files of one bucket and prefix mixing the Kafka partitions
    rows_before = world.rows()
    assert None in {pair[-1] for pair in _files_per_partition_pair(world)}

    report = world.service().maintain(force_compaction=True)

    compacted = report.tables[0].compaction
    assert compacted is not None
    assert compacted.committed
    assert set(_files_per_partition_pair(world).values()) == {1}  # no mixed file, no pure file beside
    assert world.rows().equals(rows_before)
    _assert_each_file_holds_its_partitions_rows(world.table())


def test_an_offset_reset_rewrites_a_partitions_tail_keeping_every_file_in_its_bucket(
    world: BucketWorld,
) -> None:
    world.produce(3)
    keep_through = 2 * PER_RUN + 4
    grant = world.assembly.checkpoints.claim_lease(TOPIC, owner_id="test", run_id="reset")
    assert isinstance(grant, LeaseGrant)

    OffsetReset(IcebergTableCommitter(world.catalog), world.assembly.checkpoints).reset_offsets(
        TOPIC, (TABLE, DLQ), {2: keep_through}, grant
    )

    pairs = Counter(zip(*world.rows().select(["partition", "offset"]).to_pydict().values(), strict=True))
    assert pairs == Counter(k for k in world.expected_pairs() if k[0] != 2 or k[1] <= keep_through)
    _assert_each_file_holds_its_partitions_rows(world.table())


def _duckdb() -> Any:
    """DuckDB with its Iceberg reader, loaded from the extension wheels (no download)."""
    connection = duckdb.connect()
    for package in (duckdb_extension_avro, duckdb_extension_iceberg):
        (path,) = glob.glob(f"{Path(package.__file__).parent}/extensions/*/*.duckdb_extension")
        connection.load_extension(path)
    return connection


def test_duckdb_reads_a_bucket_table_and_its_filtered_rows_as_pyiceberg_does(world: BucketWorld) -> None:
    world.produce(2)
    table = world.table()
    location = table.metadata_location.removeprefix("file://")
    wanted = _order_id(0, 13)
    connection = _duckdb()

    total = connection.execute("SELECT count(*) FROM iceberg_scan(?)", [location]).fetchone()
    found = connection.execute(
        'SELECT partition, "offset" FROM iceberg_scan(?) WHERE order_id = ?', [location, wanted]
    ).fetchall()

    assert total == (table.scan().count(),)
    assert found == [(0, 13)]


def test_an_upsert_table_bucketed_by_its_key_takes_updates_and_deletes_in_each_keys_bucket(
    tmp_path: Path,
) -> None:
    world = UpsertWorld(
        tmp_path,
        partition_by=(PartitionField(column="id", transform=PartitionTransform.BUCKET, parameter=4),),
    )
    world.write(0, [({"id": k}, {"id": k, "name": f"v{k}"}) for k in range(20)])
    world.write(1, [({"id": k}, {"id": k, "name": f"w{k}"}) for k in range(20, 30)])
    world.run()
    world.write(0, [({"id": 3}, {"id": 3, "name": "new3"}), ({"id": 25}, None)])
    world.write(1, [({"id": 7}, {"id": 7, "name": "new7"})])

    world.run()

    expected = {k: f"v{k}" for k in range(20)} | {k: f"w{k}" for k in range(20, 30)}
    assert world.names() == {**{k: v for k, v in expected.items() if k != 25}, 3: "new3", 7: "new7"}
    table = world.catalog.load_table(UPSERT_TABLE)
    id_bucket = BucketTransform(4).transform(LongType())
    for task in table.scan().plan_files():
        ids = pq.read_table(task.file.file_path.removeprefix("file://"), columns=["id"]).column("id")
        assert {id_bucket(i) for i in ids.to_pylist()} == {task.file.partition[0]}, task.file.file_path
