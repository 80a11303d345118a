"""A topic's table built by real runs, for the reset and maintenance benchmarks.

Each run: one segment per partition (KafScale format, `records` pizza orders each), planned like
the launcher plans (the data files under the table's run-scoped prefix, the tables' field ids),
written by the data plane's tasks in this process (`run_task`, no Spark: the files are the same),
committed by the commit service on a SQLite catalog with a SQLite checkpoint store.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.field_ids import planned_field_ids
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import (
    ConversionSettings,
    PartitionPlan,
    PlannedSegment,
    RunPlan,
    RunTimings,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, table_fields
from kafscale_iceberg.domain.tickets import join_uri
from kafscale_iceberg.local.config_document import one_machine_document
from kafscale_iceberg.segments.decode import Record
from kafscale_iceberg.segments.encode import build_segment, encode_record_batch
from kafscale_iceberg.segments.generate import pizza_order
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.launch import run_data_prefix

TOPIC, TABLE, DEAD_LETTERS = "orders", "bench.orders", "bench.orders__dlq"
BASE_TIME_MS = 1_763_600_000_000
CREATE = TablePolicy(create_table_if_missing=True)


@dataclass
class BenchTable:
    """A table fed run by run; `partition_file_min_bytes` decides the file layout of each run."""

    root: Path
    partitions: int
    records: int
    partition_file_min_bytes: int
    maintenance: dict[str, object] = field(default_factory=dict)
    target_file_size_bytes: int | None = None
    """The mapping's `target_file_size_bytes` (compaction writes files of about this size)."""
    runs: int = 0

    def __post_init__(self) -> None:
        self.config: KafscaleConfig = config_from_mapping(
            one_machine_document(
                self.root,
                bucket="unused",
                maintenance=self.maintenance,
                mappings=[
                    {
                        "topic": TOPIC,
                        "table": TABLE,
                        "create_table_if_missing": True,
                        **(
                            {"target_file_size_bytes": self.target_file_size_bytes}
                            if self.target_file_size_bytes
                            else {}
                        ),
                    }
                ],
            ),
            source="bench",
        )
        self.assembly = Assembly(self.config, owner_id="bench")
        self.segments = self.root / "segments"
        self._rng = random.Random(7)

    def run(self) -> None:
        """One more run: `records` new records in every partition, written and committed."""
        first = self.runs * self.records
        planned = []
        for p in range(self.partitions):
            records = [
                Record(
                    offset=o,
                    timestamp_ms=BASE_TIME_MS + o,
                    key=f"k{o}".encode(),
                    value=pizza_order(
                        self._rng, order_id=o * 100 + p, store_id=o % 50, event_time_ms=BASE_TIME_MS + o
                    ),
                )
                for o in range(first, first + self.records)
            ]
            files = build_segment([encode_record_batch(records)], created_at_ms=BASE_TIME_MS)
            key = format_segment_key("bench", TOPIC, p, first)
            (self.segments / key).parent.mkdir(parents=True, exist_ok=True)
            (self.segments / key).write_bytes(files.kfs)
            segment = PlannedSegment(
                key=key, base_offset=first, last_offset=first + self.records - 1, size_bytes=len(files.kfs)
            )
            planned.append(
                PartitionPlan(
                    partition=p,
                    start_exclusive=first - 1,
                    end_inclusive=first + self.records - 1,
                    segments=(segment,),
                )
            )
        self.runs += 1
        plan = self._plan(tuple(planned))
        reports = [
            run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
            for task in plan_tasks(plan, max_tasks=4, min_task_bytes=1, multiple_of=2)
        ]
        result = build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))
        grant = self.assembly.checkpoints.claim_lease(TOPIC, owner_id="bench", run_id=plan.run_id)
        assert isinstance(grant, LeaseGrant)
        self.assembly.commits.commit_run(plan, result, grant, CREATE)

    def _plan(self, partitions: tuple[PartitionPlan, ...]) -> RunPlan:
        run_id = make_run_id(TOPIC, [(p.partition, p.start_exclusive, p.end_inclusive) for p in partitions])
        known = self.assembly.commits.field_ids((TABLE, DEAD_LETTERS))
        return RunPlan(
            run_id=run_id,
            topic=TOPIC,
            created_at_ms=int(time.time() * 1000),
            source=SegmentSource(root=str(self.segments)),
            partitions=partitions,
            table=TableTarget(
                identifier=TABLE,
                data_uri=join_uri(run_data_prefix(self.config, ("bench", "orders")), run_id),
                field_ids=planned_field_ids(table_fields(()), known.table(TABLE)),
            ),
            dead_letter_table=TableTarget(
                identifier=DEAD_LETTERS,
                data_uri=join_uri(run_data_prefix(self.config, ("bench", "orders__dlq")), run_id),
                field_ids=planned_field_ids(DEAD_LETTER_FIELDS, known.table(DEAD_LETTERS)),
            ),
            conversion=ConversionSettings(partition_file_min_bytes=self.partition_file_min_bytes),
            result_uri=f"file://{self.root}/runs/{run_id}/result.json",
        )


@dataclass(frozen=True)
class ResetMeasure:
    """One `replay --reset-offsets`-style reset: snapshots it wrote, rows removed and rewritten."""

    snapshots: int
    rows_removed: int
    rows_rewritten: int
    files_before: int
    seconds: float

    @property
    def ratio(self) -> float:
        """Rows rewritten per row removed."""
        return self.rows_rewritten / self.rows_removed if self.rows_removed else 0.0


def reset_tail(bench: BenchTable, partition: int, fraction: float) -> ResetMeasure:
    """Reset `partition` to drop its last `fraction` of offsets (the commit service's reset)."""
    catalog = load_iceberg_catalog(CatalogSettings.from_config(bench.config))
    catalog_table = catalog.load_table(TABLE)
    before = len(catalog_table.snapshots())
    files_before = len(list(catalog_table.scan().plan_files()))
    total = bench.runs * bench.records
    keep_through = total - int(total * fraction) - 1
    grant = bench.assembly.checkpoints.claim_lease(TOPIC, owner_id="bench", run_id="bench-reset")
    assert isinstance(grant, LeaseGrant)
    started = time.perf_counter()
    bench.assembly.offset_reset.reset_offsets(TOPIC, (TABLE, DEAD_LETTERS), {partition: keep_through}, grant)
    seconds = time.perf_counter() - started
    bench.assembly.checkpoints.release_lease(grant)
    table = catalog.load_table(TABLE)
    added = table.snapshots()[before:]
    summary = added[-1].summary
    assert summary is not None
    deleted = int(summary.get("deleted-records") or 0)
    rewritten = int(summary.get("added-records") or 0)
    return ResetMeasure(len(added), deleted - rewritten, rewritten, files_before, seconds)
