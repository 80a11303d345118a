"""A reset of one Kafka partition's tail rewrites only the files holding it, in one snapshot.

Real parts: segments decoded and written by the data plane's task (in this process, no Spark), a
SQLite Iceberg catalog, a SQLite checkpoint store, the offset reset (`OffsetReset`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import RunPlan, RunTimings
from kafscale_iceberg.ports import CheckpointStore
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.offset_reset import OffsetReset
from tests.support.iceberg_runs import sql_settings
from tests.support.spark_job import SegmentFolder, make_plan

TABLE, DLQ, TOPIC = "prod.orders", "prod.orders_dead_letters", "orders"
PARTITIONS, RUNS, PER_RUN = 4, 5, 20
CREATE = TablePolicy(create_table_if_missing=True)


def _lease(store: CheckpointStore, run_id: str) -> LeaseGrant:
    grant = store.claim_lease(TOPIC, owner_id="test", run_id=run_id)
    assert isinstance(grant, LeaseGrant)
    return grant


def _produce(tmp_path: Path, catalog: Catalog, store: CheckpointStore, *, min_bytes: int) -> CommitService:
    """RUNS runs of PER_RUN records in each of PARTITIONS partitions, each run written by 2 tasks."""
    service = CommitService(IcebergTableCommitter(catalog), store)
    folder = SegmentFolder(tmp_path / "segments")
    for run in range(RUNS):
        first = run * PER_RUN
        for p in range(PARTITIONS):
            folder.add_orders(p, first, PER_RUN)
        plan: RunPlan = make_plan(
            folder,
            str(tmp_path),
            ranges=dict.fromkeys(range(PARTITIONS), (first - 1, first + PER_RUN - 1)),
            segments={p: folder.written[p][run:] for p in range(PARTITIONS)},
            partition_file_min_bytes=min_bytes,
        )
        reports = [
            run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
            for task in plan_tasks(plan, max_tasks=2, min_task_bytes=1)
        ]
        result = build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
        service.commit_run(plan, result, _lease(store, plan.run_id), CREATE)
    return service


def _reset_tail(service: CommitService, store: CheckpointStore, catalog: Catalog) -> tuple[int, int, int]:
    """Reset partition 2 to keep its first 90 %; returns (snapshots added, rows removed, rows rewritten)."""
    before = len(catalog.load_table(TABLE).snapshots())
    keep_through = RUNS * PER_RUN * 9 // 10 - 1
    OffsetReset(IcebergTableCommitter(catalog), store).reset_offsets(
        TOPIC, (TABLE, DLQ), {2: keep_through}, _lease(store, "reset")
    )
    table = catalog.load_table(TABLE)
    added = table.snapshots()[before:]
    summary = added[-1].summary
    assert summary is not None
    deleted, rewritten = int(summary["deleted-records"]), int(summary.get("added-records", "0"))
    rows = table.scan(selected_fields=("partition", "offset")).to_arrow()
    pairs = Counter(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True))
    assert pairs == Counter(
        (p, o) for p in range(PARTITIONS) for o in range(RUNS * PER_RUN) if p != 2 or o <= keep_through
    )
    return len(added), deleted - rewritten, rewritten


@pytest.mark.slow
def test_a_reset_with_per_partition_files_rewrites_at_most_twice_the_rows_it_removes_in_one_snapshot(
    tmp_path: Path,
) -> None:
    catalog = load_iceberg_catalog(sql_settings(tmp_path))
    store = SqliteCheckpointStore(tmp_path / "offsets.db")
    service = _produce(tmp_path, catalog, store, min_bytes=0)
    paths = {t.file.file_path for t in catalog.load_table(TABLE).scan().plan_files()}
    assert len(paths) == RUNS * PARTITIONS  # one file per Kafka partition per run

    snapshots, removed, rewritten = _reset_tail(service, store, catalog)

    assert (snapshots, removed) == (1, RUNS * PER_RUN // 10)
    assert rewritten <= 2 * removed
    after = {t.file.file_path for t in catalog.load_table(TABLE).scan().plan_files()}
    assert len(paths - after) <= 1  # only partition 2's last file was touched


@pytest.mark.slow
def test_files_mixing_partitions_make_the_same_reset_rewrite_far_more(tmp_path: Path) -> None:
    catalog = load_iceberg_catalog(sql_settings(tmp_path))
    store = SqliteCheckpointStore(tmp_path / "offsets.db")
    service = _produce(tmp_path, catalog, store, min_bytes=1 << 30)  # every partition shares files

    _, removed, rewritten = _reset_tail(service, store, catalog)

    assert rewritten > 2 * removed  # the baseline the per-partition layout is measured against
