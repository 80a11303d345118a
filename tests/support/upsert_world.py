"""An upsert table fed run by run, in this process: segments of JSON records written to a folder, each
run executed by the run driver with the in-process executor (the Spark job's code, no JVM: its tasks
write the rows, locate and rewrite), committed by the real commit service on a real SQLite catalog
and checkpoint store; the table read back by key. What the upsert tests share.

Each plan names the table's current metadata file, as the launcher's (from `field-ids.json`, which the
commit step writes after every commit of an upsert table) would."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_maintenance import IcebergTableMaintainer
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import (
    NO_OFFSET,
    ColumnSpec,
    ColumnType,
    PartitionField,
    RunPlan,
    RunResult,
    UpsertSettings,
)
from kafscale_iceberg.exceptions import UpsertLocateStaleError
from kafscale_iceberg.execution.driver import TaskSizing
from kafscale_iceberg.execution.in_process import run_plan_in_process
from kafscale_iceberg.ports import TableCommitter
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.outcome import CommitOutcome
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from tests.support.iceberg_runs import sql_settings
from tests.support.spark_job import BASE_TIME_MS, SegmentFolder, make_plan, write_plan
from tests.support.table_readers import full_compaction

TABLE = "prod.orders"
COLUMNS = (
    ColumnSpec(name="id", type=ColumnType.LONG, required=True),
    ColumnSpec(name="name", type=ColumnType.STRING),
)


def record(offset: int, key: object, value: object) -> Record:
    """A record whose key and value are JSON (None: null; bytes: as they are)."""

    def encoded(part: object) -> bytes | None:
        if part is None or isinstance(part, bytes):
            return part
        return json.dumps(part).encode()

    return Record(offset=offset, timestamp_ms=BASE_TIME_MS + offset, key=encoded(key), value=encoded(value))


@dataclass
class UpsertWorld:
    """One topic landing in one upsert table (key `id`), run by run."""

    root: Path
    upsert: UpsertSettings = field(default_factory=lambda: UpsertSettings(key=("id",)))
    partition_by: tuple[PartitionField, ...] = ()
    target_file_size_bytes: int = 128 * 1024 * 1024
    folder: SegmentFolder = field(init=False)
    catalog: Catalog = field(init=False)
    tables: TableCommitter = field(init=False)
    ends: dict[int, int] = field(default_factory=dict)
    """The last offset written per partition (what the next run's range starts after)."""
    committed: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.folder = SegmentFolder(self.root / "segments")
        self.catalog = load_iceberg_catalog(sql_settings(self.root))
        self.tables = IcebergTableCommitter(self.catalog)
        self.store = SqliteCheckpointStore(self.root / "checkpoints.db")

    def service(self, tables: TableCommitter | None = None) -> CommitService:
        return CommitService(tables or self.tables, self.store, sleep=lambda _s: None)

    def write(self, partition: int, changes: list[tuple[object, object]]) -> None:
        """A segment of records `(key, value)` appended to `partition`."""
        first = self.ends.get(partition, NO_OFFSET) + 1
        records = [record(first + i, key, value) for i, (key, value) in enumerate(changes)]
        self.folder.add(partition, records)
        self.ends[partition] = first + len(records) - 1

    def plan(self) -> RunPlan:
        """A plan of everything written since the last commit (`committed`)."""
        ranges = {
            p: (self.committed.get(p, NO_OFFSET), end)
            for p, end in self.ends.items()
            if end > self.committed.get(p, NO_OFFSET)
        }
        segments = {p: [s for s in self.folder.written[p] if s.last_offset > ranges[p][0]] for p in ranges}
        plan = make_plan(
            self.folder,
            str(self.root),
            ranges=ranges,
            segments=segments,
            columns=COLUMNS,
            partition_by=self.partition_by,
            upsert=self.upsert,
            target_file_size_bytes=self.target_file_size_bytes,
        )
        assert plan.table is not None
        table = plan.table.model_copy(update={"metadata_location": self.metadata_location()})
        return plan.model_copy(update={"table": table})

    def metadata_location(self) -> str | None:
        """The table's current metadata file (None: no table yet)."""
        if not self.catalog.table_exists(TABLE):
            return None
        return str(self.catalog.load_table(TABLE).metadata_location)

    def execute(self, plan: RunPlan) -> RunResult:
        """The run driver with the in-process executor (two threads), as the Lambda runner runs it."""
        result = run_plan_in_process(write_plan(plan), workers=2, sizing=TaskSizing(min_task_bytes=1))
        assert result.failure is None, result.failure
        return result

    def compact(self) -> bool:
        """A `maintain` compaction of every file of the table into one, its position deletes folded
        (the real maintainer); whether it landed (not when the table does not exist yet)."""
        if not self.catalog.table_exists(TABLE):
            return False
        maintainer = IcebergTableMaintainer(self.catalog, StagedFileStore())
        # Every position delete folded (a merge-on-read table): the compacted table has none.
        written = full_compaction(
            maintainer, TABLE, data_prefix=str(self.root / "compacted"), target_file_size_bytes=1 << 30
        )
        return maintainer.commit_compaction(written, now_ms=0).committed

    def commit(self, plan: RunPlan, result: RunResult, tables: TableCommitter | None = None) -> CommitOutcome:
        grant = self.store.claim_lease(plan.topic, owner_id="test", run_id=plan.run_id)
        assert isinstance(grant, LeaseGrant), grant
        try:
            outcome = self.service(tables).commit_run(
                plan, result, grant, TablePolicy(create_table_if_missing=True)
            )
        except UpsertLocateStaleError:
            self.store.release_lease(grant)  # as the abort step does; the topic is planned again
            raise
        self.committed.update(outcome.offsets)
        return outcome

    def run(self) -> CommitOutcome:
        """Plan, execute and commit what was written since the last commit."""
        plan = self.plan()
        return self.commit(plan, self.execute(plan))

    def rows(self) -> pa.Table:
        return self.catalog.load_table(TABLE).scan().to_arrow()

    def by_key(self) -> dict[int, dict[str, Any]]:
        """The table's rows by key; fails when a key has two rows."""
        found: dict[int, dict[str, Any]] = {}
        for row in self.rows().to_pylist():
            assert row["id"] not in found, f"key {row['id']} has two rows"
            found[row["id"]] = row
        return found

    def names(self) -> dict[int, str | None]:
        return {key: row["name"] for key, row in self.by_key().items()}
