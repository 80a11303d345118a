"""The product's overwrite (`adapters/iceberg_writes.overwrite`): pyiceberg 0.12's delete staging shares
one stateful manifest evaluator between its threads, which now and then judged a manifest by another's
partition bounds and refused live files (`Missing required files to delete`, issue 29's defect 3)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType, NestedField, StringType

from kafscale_iceberg.adapters.iceberg_writes import overwrite

_MANIFESTS = 24


@pytest.fixture
def many_manifests(tmp_path: Path) -> Table:
    """A `bucket(16)` table of one file per append, so one manifest per file with narrow bounds."""
    catalog = SqlCatalog(
        "c", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    catalog.create_namespace("n")
    schema = Schema(
        NestedField(1, "k", LongType(), required=False), NestedField(2, "v", StringType(), required=False)
    )
    bucket = PartitionField(source_id=1, field_id=1000, transform=BucketTransform(16), name="k_b")
    spec = PartitionSpec(bucket)
    table = catalog.create_table("n.t", schema, partition_spec=spec)
    for i in range(_MANIFESTS):
        table.append(pa.table({"k": pa.array([i * 7], pa.int64()), "v": ["x"]}))
    return catalog.load_table("n.t")


@pytest.fixture
def eager_thread_switches() -> Iterator[None]:
    """Threads switched every microsecond: the interleaving that hit once in six runs, every few."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("eager_thread_switches")
def test_staging_a_delete_of_live_files_across_many_manifests_never_misses_one(many_manifests: Table) -> None:
    files = [task.file for task in many_manifests.scan().plan_files()]
    assert len(files) == _MANIFESTS
    for _ in range(60):  # pyiceberg's own overwrite failed 13 of 200 stagings like these
        producer = overwrite(many_manifests.transaction().update_snapshot())
        for data_file in files:
            producer.delete_data_file(data_file)
        producer._build_delete_files_partition_predicate()
        assert len(producer._deleted_entries()) == _MANIFESTS  # raises ValidationException when one is missed


def test_an_overwrite_through_it_commits_the_delete_and_the_add(many_manifests: Table) -> None:
    files = [task.file for task in many_manifests.scan().plan_files()]
    transaction = many_manifests.transaction()
    with overwrite(transaction.update_snapshot()) as producer:
        for data_file in files[:5]:
            producer.delete_data_file(data_file)
    table = transaction.commit_transaction()
    assert len(list(table.scan().plan_files())) == _MANIFESTS - 5
