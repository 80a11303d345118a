"""`maintain`: compaction, snapshot expiry and orphan cleanup on real tables.

Real parts: segments decoded and written by the data plane's task (in this process, no Spark), a
SQLite Iceberg catalog, a SQLite checkpoint store, the commit service, local files. The clock is
the machine's, moved ahead where a test needs files older than the grace period.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.file_listing import StorageFileLister
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_maintenance import IcebergTableMaintainer
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.cli import main
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.dataplane.reports import build_run_result
from kafscale_iceberg.dataplane.tasks import plan_tasks, run_task
from kafscale_iceberg.domain.commits import TableState
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.maintenance import SUMMARY_COMPACTION
from kafscale_iceberg.domain.runs import RunPlan, RunResult, RunTimings
from kafscale_iceberg.domain.tickets import join_uri
from kafscale_iceberg.services.commits.outcome import CommitOutcome
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.launch import run_data_prefix
from kafscale_iceberg.services.maintenance import MaintenanceSchedule, MaintenanceService
from tests.support.config_documents import local_document
from tests.support.spark_job import SegmentFolder, make_plan

TOPIC, TABLE, DLQ = "orders", "prod.orders", "prod.orders_dead_letters"
PARTITIONS, PER_RUN = 3, 20
CREATE = TablePolicy(create_table_if_missing=True)


class World:
    """A topic's table fed by real data-plane runs, and the maintenance service over it."""

    def __init__(self, tmp_path: Path, **maintenance: Any) -> None:
        self.root = tmp_path
        self.config_data: dict[str, Any] = local_document(
            tmp_path,
            None,
            bucket="segments",
            maintenance={"compaction_min_small_files": 2, **maintenance},
            mappings=[{"topic": TOPIC, "table": TABLE, "create_table_if_missing": True}],
        )
        self.config: KafscaleConfig = config_from_mapping(self.config_data, source="test")
        self.assembly = Assembly(self.config, owner_id="test")
        self.catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        self.folder = SegmentFolder(tmp_path / "segments")
        self.prefix = run_data_prefix(self.config, ("prod", "orders"))
        self.runs = 0
        self.clock_offset_s = 0.0

    def service(self) -> MaintenanceService:
        maintainer = IcebergTableMaintainer(self.catalog, StagedFileStore())
        return MaintenanceService(
            self.config,
            maintainer,
            StorageFileLister(),
            self.assembly.checkpoints,
            self.assembly.documents,
            clock=lambda: time.time() + self.clock_offset_s,
        )

    def maintainer(self) -> IcebergTableMaintainer:
        return IcebergTableMaintainer(self.catalog, StagedFileStore())

    def plan_next(self, *, min_bytes: int = 1 << 30) -> RunPlan:
        """The next run: PER_RUN more records in each partition (shared files unless `min_bytes`)."""
        first = self.runs * PER_RUN
        for p in range(PARTITIONS):
            self.folder.add_orders(p, first, PER_RUN)
        plan = make_plan(
            self.folder,
            str(self.root),
            ranges=dict.fromkeys(range(PARTITIONS), (first - 1, first + PER_RUN - 1)),
            segments={p: self.folder.written[p][self.runs :] for p in range(PARTITIONS)},
            partition_file_min_bytes=min_bytes,
        )
        self.runs += 1
        table = plan.table.model_copy(update={"data_uri": join_uri(self.prefix, plan.run_id)})
        return plan.model_copy(update={"table": table})

    def write(self, plan: RunPlan) -> RunResult:
        reports = [
            run_task(plan, task, reader=DocumentStore(), sink=StagedFileStore())
            for task in plan_tasks(plan, max_tasks=2, min_task_bytes=1)
        ]
        return build_run_result(plan, reports, RunTimings(started_at_ms=0, ended_at_ms=0))

    def commit(self, plan: RunPlan, result: RunResult) -> CommitOutcome:
        grant = self.assembly.checkpoints.claim_lease(TOPIC, owner_id="test", run_id=plan.run_id)
        assert isinstance(grant, LeaseGrant)
        return self.assembly.commits.commit_run(plan, result, grant, CREATE)

    def produce(self, runs: int, **options: Any) -> CommitOutcome | None:
        """Commit `runs` more runs; the last one's outcome."""
        outcome = None
        for _ in range(runs):
            plan = self.plan_next(**options)
            outcome = self.commit(plan, self.write(plan))
        return outcome

    def committed_states(self, runs: int) -> Mapping[str, TableState]:
        """Commit `runs` more runs; the tables as the last commit left them (`CommitOutcome.states`)."""
        outcome = self.produce(runs)
        assert outcome is not None
        assert outcome.table_committed
        return outcome.states

    def rows(self) -> pa.Table:
        rows = self.catalog.load_table(TABLE).scan().to_arrow()
        return rows.sort_by([("partition", "ascending"), ("offset", "ascending")])

    def files(self) -> list[Any]:
        return [t.file for t in self.catalog.load_table(TABLE).scan().plan_files()]

    def expected_pairs(self) -> Counter[tuple[int, int]]:
        return Counter((p, o) for p in range(PARTITIONS) for o in range(self.runs * PER_RUN))


def _pairs(rows: pa.Table) -> Counter[tuple[int, int]]:
    return Counter(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True))


def _partition_pure(data_file: Any, field_id: int) -> bool:
    return bool(data_file.lower_bounds[field_id] == data_file.upper_bounds[field_id])


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_compaction_makes_files_partition_pure_in_one_snapshot_and_changes_no_row(world: World) -> None:
    world.produce(4)  # each run: one file mixing the 3 partitions
    rows_before = world.rows()
    properties_before = dict(world.catalog.load_table(TABLE).properties)
    snapshots_before = len(world.catalog.load_table(TABLE).snapshots())

    report = world.service().maintain(force_compaction=True)

    (done, _dlq) = report.tables if len(report.tables) == 2 else (report.tables[0], None)
    assert done.compaction is not None
    assert done.compaction.committed
    table = world.catalog.load_table(TABLE)
    assert len(table.snapshots()) == snapshots_before + 1
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None
    assert (summary.operation.value, summary[SUMMARY_COMPACTION]) == ("replace", "true")
    assert world.rows().equals(rows_before)
    partition_id = table.schema().find_field("partition").field_id
    files = world.files()
    assert len(files) == PARTITIONS
    assert all(_partition_pure(f, partition_id) for f in files)
    kept = {k: v for k, v in table.properties.items() if k.startswith("kafscale.offsets")}
    assert kept == {k: v for k, v in properties_before.items() if k.startswith("kafscale.offsets")}
    # The exactly-once checks still work: the next run commits once.
    world.produce(1)
    assert _pairs(world.rows()) == world.expected_pairs()


def test_compaction_merges_a_partitions_pure_small_file_with_its_rows_from_mixed_files(world: World) -> None:
    """Issue 24: a Kafka partition with one pure small file and rows in mixed files ended in two files
    (`maintain --compact` on 8 partitions gave 9, partition 3 in files of 540 and 60 rows)."""
    world.produce(2)  # each run: files mixing the 3 partitions
    world.produce(1, min_bytes=1)  # one pure file per partition
    partition_id = world.catalog.load_table(TABLE).schema().find_field("partition").field_id

    world.service().maintain(force_compaction=True)

    files = world.files()
    assert all(_partition_pure(f, partition_id) for f in files)
    per_partition = Counter(f.lower_bounds[partition_id] for f in files)
    assert sorted(per_partition.values()) == [1] * PARTITIONS
    assert _pairs(world.rows()) == world.expected_pairs()


def test_a_compaction_racing_a_commit_lands_with_it_and_no_row_is_lost_or_doubled(world: World) -> None:
    world.produce(3)
    maintainer = world.maintainer()
    plan = maintainer.plan_compaction(TABLE, small_file_bytes=1 << 30, min_small_files=2, max_bytes=1 << 30)
    written = maintainer.write_compaction(plan, data_prefix=world.prefix, target_file_size_bytes=1 << 27)
    world.produce(1)  # a run commits between the compaction's planning and its commit

    outcome = maintainer.commit_compaction(written, now_ms=0)

    assert outcome.committed
    assert outcome.attempts == 2  # lost the race once, re-checked, committed on the new snapshot
    assert _pairs(world.rows()) == world.expected_pairs()  # every record exactly once


def test_a_compaction_interrupted_after_writing_its_files_leaves_the_table_unchanged_and_orphans_cleaned(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, orphan_grace="1h")
    world.produce(3)
    before = world.catalog.load_table(TABLE).metadata.current_snapshot_id
    maintainer = world.maintainer()
    plan = maintainer.plan_compaction(TABLE, small_file_bytes=1 << 30, min_small_files=2, max_bytes=1 << 30)
    written = maintainer.write_compaction(plan, data_prefix=world.prefix, target_file_size_bytes=1 << 27)
    # ... and the process dies here: nothing committed.
    assert written.new_files
    assert world.catalog.load_table(TABLE).metadata.current_snapshot_id == before

    young = world.service().maintain(dry_run=True)
    assert young.tables[0].orphans == ()  # within the grace period: could be a compaction in flight
    world.clock_offset_s = 2 * 3600
    report = world.service().maintain()

    assert sorted(o.uri for o in report.tables[0].orphans) == sorted(written.new_files)
    assert not any(Path(uri.removeprefix("file://")).exists() for uri in written.new_files)
    assert _pairs(world.rows()) == world.expected_pairs()


def test_expiry_keeps_the_current_and_the_topics_last_run_snapshot_and_the_offsets(tmp_path: Path) -> None:
    world = World(tmp_path, snapshot_retention=0, keep_snapshots=1)
    world.produce(4)
    maintainer = world.maintainer()  # the current snapshot becomes a compaction's
    plan = maintainer.plan_compaction(TABLE, small_file_bytes=1 << 30, min_small_files=2, max_bytes=1 << 30)
    written = maintainer.write_compaction(plan, data_prefix=world.prefix, target_file_size_bytes=1 << 27)
    assert maintainer.commit_compaction(written, now_ms=0).committed
    table = world.catalog.load_table(TABLE)
    last_run = table.snapshots()[-2]
    count = len(table.snapshots())
    world.clock_offset_s = 1

    report = world.service().maintain()

    table = world.catalog.load_table(TABLE)
    expiry = report.tables[0].expiry
    assert expiry is not None
    assert len(expiry.expired) == count - 2
    assert {s.snapshot_id for s in table.snapshots()} == {
        last_run.snapshot_id,
        table.metadata.current_snapshot_id,
    }
    assert table.properties["kafscale.offsets.orders"] == '{"0":79,"1":79,"2":79}'
    assert table.properties["write.metadata.previous-versions-max"] == "100"
    assert world.assembly.tables.last_commit_ms(TABLE, TOPIC) == last_run.timestamp_ms
    # The exactly-once check reads the offsets properties: the next run lands once.
    world.produce(1)
    assert _pairs(world.rows()) == world.expected_pairs()


def test_orphan_cleanup_spares_the_run_in_flight_and_deletes_a_dead_runs_files(tmp_path: Path) -> None:
    world = World(tmp_path, orphan_grace="10m")
    world.produce(1)
    dead = world.plan_next()
    dead_files = world.write(dead).data_files  # a run that failed after writing: never committed
    world.runs -= 1
    in_flight = world.plan_next().model_copy(update={"run_id": "orders-inflight-a0"})
    in_flight = in_flight.model_copy(
        update={
            "table": in_flight.table.model_copy(update={"data_uri": join_uri(world.prefix, in_flight.run_id)})
        }
    )
    flight_files = world.write(in_flight).data_files
    grant = world.assembly.checkpoints.claim_lease(TOPIC, owner_id="spark", run_id=in_flight.run_id)
    assert isinstance(grant, LeaseGrant)
    world.clock_offset_s = 3600  # every file is past the grace period now

    listed = world.service().maintain(dry_run=True).tables[0].orphans
    assert sorted(o.uri for o in listed) == sorted(f.uri for f in dead_files)
    assert all(Path(f.uri.removeprefix("file://")).exists() for f in dead_files)  # dry run: listed only

    world.service().maintain()

    assert not any(Path(f.uri.removeprefix("file://")).exists() for f in dead_files)
    assert all(Path(f.uri.removeprefix("file://")).exists() for f in flight_files)
    assert all(Path(f.file_path.removeprefix("file://")).exists() for f in world.files())
    world.assembly.checkpoints.release_lease(grant)


@pytest.mark.slow  # `maintain` compacts on local Spark (compaction_engine spark, runner local): a JVM
def test_the_maintain_command_dry_run_lists_and_changes_nothing_then_maintains(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world.produce(3)
    config = world.root / "config.json"
    config.write_text(json.dumps(world.config_data))
    before = world.catalog.load_table(TABLE).metadata_location

    assert main(["maintain", "--config", str(config), "--dry-run", "--json"]) == 0

    document = json.loads(capsys.readouterr().out)
    (table,) = [t for t in document["tables"] if t["table"] == TABLE]
    assert document["dry_run"] is True
    assert (table["before"]["files"], table["compaction"]["candidates"]) == (6, 6)  # 2 tasks a run
    assert world.catalog.load_table(TABLE).metadata_location == before

    assert main(["maintain", "--config", str(config)]) == 0

    out = capsys.readouterr().out
    assert f"{TABLE}: 6 files (6 small)" in out
    assert "  compaction    6 files -> 3, committed" in out
    assert len(world.files()) == PARTITIONS
    assert _pairs(world.rows()) == world.expected_pairs()


def test_the_run_loop_schedule_maintains_once_per_interval(world: World) -> None:
    world.produce(2)
    now = [100.0]
    schedule = MaintenanceSchedule(world.service(), 60.0, clock=lambda: now[0])

    assert schedule() is None  # not due at start
    now[0] += 61
    report = schedule()
    assert report is not None
    assert report.tables[0].compaction is not None
    now[0] += 30
    assert schedule() is None
    assert len(world.files()) == PARTITIONS


def test_files_a_reset_rewrites_land_in_its_run_folder_and_are_cleaned_once_no_snapshot_needs_them(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, orphan_grace="10m", snapshot_retention=0, keep_snapshots=1)
    world.produce(3)  # shared files: a reset of partition 2 rewrites files holding the others' rows
    before = {f.file_path for f in world.files()}
    commits, checkpoints = world.assembly.offset_reset, world.assembly.checkpoints

    def reset(run_id: str, offset: int) -> set[str]:
        grant = checkpoints.claim_lease(TOPIC, owner_id="replay", run_id=run_id)
        assert isinstance(grant, LeaseGrant)
        commits.reset_offsets(TOPIC, (TABLE, DLQ), {2: offset}, grant)
        checkpoints.release_lease(grant)
        return {f.file_path for f in world.files()}

    first = reset("replay-reset-first", 49) - before
    assert first  # files rewritten without partition 2's rows after 49
    folder = join_uri(world.prefix, "replay-reset-first") + "/"
    assert all(path.startswith(folder) for path in first)  # under the prefix orphan cleanup lists
    world.clock_offset_s = 3600
    assert world.service().maintain(dry_run=True).tables[0].orphans == ()  # live: never an orphan

    # A second reset rewrites the first's file holding partition 2's 40..49; the snapshot that did
    # it carries the file only as a DELETED entry, which is no reference once its parent expired.
    replaced = first - reset("replay-reset-second", 44)
    assert replaced
    world.clock_offset_s = 7200
    report = world.service().maintain()  # expiry drops the first reset's snapshot, then orphans

    deleted = {o.uri for o in report.tables[0].orphans}
    assert replaced <= deleted  # replaced and unreferenced: gone
    assert not any(Path(uri.removeprefix("file://")).exists() for uri in deleted)
    assert all(Path(f.file_path.removeprefix("file://")).exists() for f in world.files())
    pairs = _pairs(world.rows())
    assert pairs == Counter(
        (p, o) for p in range(PARTITIONS) for o in range(world.runs * PER_RUN) if p != 2 or o <= 44
    )


# -- compaction as a Spark job (one machine: local Spark through the job runner) ----------------------


@pytest.fixture
def local_runner(spark: Any) -> Any:
    """The one-machine job runner on the session's local Spark (warm: the same `spark_app` code)."""
    from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner

    runner = LocalSparkJobRunner(master="local[2]", keep_session_warm=True)
    yield runner
    runner.close()


def _spark_service(world: World, runner: Any, **maintenance: Any) -> MaintenanceService:
    from kafscale_iceberg.adapters.iceberg_maintenance import new_compaction_id
    from kafscale_iceberg.services.compaction_jobs import SparkCompaction

    # The world's tables are small: inline max 0 sends every compaction to the Spark job.
    settings = {**world.config_data["maintenance"], "compaction_inline_max_bytes": 0, **maintenance}
    config = config_from_mapping({**world.config_data, "maintenance": settings}, source="test")
    spark = SparkCompaction(
        config, world.maintainer(), runner, DocumentStore(), new_job_id=new_compaction_id, poll_seconds=0.2
    )
    return MaintenanceService(
        config,
        world.maintainer(),
        StorageFileLister(),
        world.assembly.checkpoints,
        world.assembly.documents,
        clock=lambda: time.time() + world.clock_offset_s,
        spark=spark,
    )


@pytest.mark.slow
def test_a_spark_compaction_job_racing_a_commit_is_committed_by_the_next_pass_with_the_re_check(
    world: World, local_runner: Any
) -> None:
    world.produce(3)
    service = _spark_service(world, local_runner, compaction_wait_seconds=0)

    first = service.maintain()  # plans, writes the job document, starts the job; does not wait
    assert first.tables[0].compaction is None
    assert first.tables[0].compaction_candidates == 6  # 2 tasks a run
    world.produce(1)  # a run commits while the job runs
    raced = world.catalog.load_table(TABLE).metadata.current_snapshot_id
    pending = service._spark.pending(TABLE)  # type: ignore[union-attr]
    assert pending is not None
    assert local_runner.wait(pending.runner_job_id, 120)
    second = service.maintain()  # finishes the job: checks its result, commits on the new snapshot

    outcome = second.tables[0].compaction
    assert outcome is not None
    assert (outcome.committed, outcome.files_removed) == (True, 6)
    # Built on the run's snapshot, not the one the job was planned from: the replaced files were
    # re-checked there (the run's own files are untouched).
    assert world.catalog.load_table(TABLE).current_snapshot().parent_snapshot_id == raced  # type: ignore[union-attr]
    assert _pairs(world.rows()) == world.expected_pairs()  # every record exactly once
    field_id = world.catalog.load_table(TABLE).schema().find_field("partition").field_id
    compacted = [f for f in world.files() if "/compaction-" in f.file_path]
    assert len(compacted) == PARTITIONS
    assert all(_partition_pure(f, field_id) for f in compacted)
    assert service._spark.pending(TABLE) is None  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_spark_compaction_result_that_does_not_match_its_job_is_not_committed(
    world: World, local_runner: Any
) -> None:
    from kafscale_iceberg.domain.compaction_jobs import CompactionJob, CompactionJobResult
    from kafscale_iceberg.exceptions import CompactionResultError

    world.produce(2)
    service = _spark_service(world, local_runner, compaction_wait_seconds=0)
    service.maintain()
    pending = service._spark.pending(TABLE)  # type: ignore[union-attr]
    assert pending is not None
    assert local_runner.wait(pending.runner_job_id, 120)
    job = CompactionJob.model_validate_json(DocumentStore().read_text(pending.job_uri))
    result = CompactionJobResult.model_validate_json(DocumentStore().read_text(job.result_uri))
    short = result.model_copy(
        update={"groups": tuple(g.model_copy(update={"rows": g.rows - 1}) for g in result.groups)}
    )
    before = world.catalog.load_table(TABLE).metadata.current_snapshot_id

    with pytest.raises(CompactionResultError, match="wrote 119 rows, its files hold 120"):
        world.maintainer().commit_compaction_job(job, short, now_ms=0)

    assert world.catalog.load_table(TABLE).metadata.current_snapshot_id == before


def test_the_small_file_trigger_maintains_a_topic_between_scheduled_passes(world: World) -> None:
    from kafscale_iceberg.services.compaction_trigger import SmallFileTrigger

    config = config_from_mapping(
        {**world.config_data, "maintenance": {**world.config_data["maintenance"], "trigger_small_files": 2}},
        source="test",
    )
    now = [100.0]
    trigger = SmallFileTrigger(config)
    schedule = MaintenanceSchedule(world.service(), 3600.0, clock=lambda: now[0], trigger=trigger)
    schedule.committed(TOPIC, world.committed_states(1))  # one run: 2 files (2 tasks)
    assert schedule() is None  # 2 new files: not more than 2
    states = world.committed_states(1)
    assert schedule() is None  # no commit reported since the last call: nothing checked
    schedule.committed(TOPIC, states)

    report = schedule()  # 4 new files: a pass of this topic now, an hour before the schedule's

    assert report is not None
    assert report.tables[0].compaction is not None
    assert report.tables[0].compaction.committed
    assert len(world.files()) == PARTITIONS
    states = world.committed_states(1)
    assert (states[TABLE].data_files, states[TABLE].files_baseline) == (PARTITIONS + 2, PARTITIONS)
    schedule.committed(TOPIC, states)
    assert schedule() is None  # the pass set the baseline: 2 new files since


def test_the_small_file_trigger_counts_from_the_committed_version_and_loads_no_table(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to load the table again after every commit (two more S3 requests a commit on AWS)."""
    from kafscale_iceberg.services.compaction_trigger import MaintenanceTrigger, SmallFileTrigger

    config = config_from_mapping(
        {**world.config_data, "maintenance": {**world.config_data["maintenance"], "trigger_small_files": 3}},
        source="test",
    )
    started: list[str] = []
    trigger = MaintenanceTrigger(SmallFileTrigger(config), started.append)
    first = world.committed_states(1)
    second = world.committed_states(1)
    assert (first[TABLE].data_files, second[TABLE].data_files) == (2, 4)
    assert second[TABLE].files_baseline == 0
    loads: list[str] = []
    load = SqlCatalog.load_table

    def counted(catalog: SqlCatalog, identifier: Any) -> Any:
        loads.append(str(identifier))
        return load(catalog, identifier)

    monkeypatch.setattr(SqlCatalog, "load_table", counted)  # every catalog of this process

    assert not trigger.after_commit(TOPIC, first)  # 2 new files: not more than 3
    assert trigger.after_commit(TOPIC, second)  # 4

    assert started == [TOPIC]
    assert loads == []
    assert world.maintainer().exists(TABLE)
    assert loads == [TABLE]  # the count sees a load by the maintainer the trigger used to read with


@pytest.mark.slow
def test_a_spark_compaction_job_overtaken_by_a_reset_is_abandoned_and_its_files_cleaned_later(
    tmp_path: Path, local_runner: Any
) -> None:
    world = World(tmp_path, orphan_grace="1h")
    world.produce(3)
    service = _spark_service(world, local_runner, compaction_wait_seconds=0)
    service.maintain()  # the job is started and writes its files
    pending = service._spark.pending(TABLE)  # type: ignore[union-attr]
    assert pending is not None
    assert local_runner.wait(pending.runner_job_id, 120)
    grant = world.assembly.checkpoints.claim_lease(TOPIC, owner_id="replay", run_id="replay-reset-x")
    assert isinstance(grant, LeaseGrant)
    world.assembly.offset_reset.reset_offsets(TOPIC, (TABLE, DLQ), {2: 49}, grant)  # rewrites files
    world.assembly.checkpoints.release_lease(grant)
    rows = _pairs(world.rows())
    job_folder = join_uri(world.prefix, pending.job_id) + "/"

    second = service.maintain()  # the job's replaced files left the table: abandoned, nothing committed

    assert second.tables[0].compaction is not None
    assert second.tables[0].compaction.abandoned
    assert _pairs(world.rows()) == rows
    assert service._spark.pending(TABLE) is None  # type: ignore[union-attr]
    written = [p for p in (world.root / "warehouse").rglob("*.parquet") if str(p).find(pending.job_id) >= 0]
    assert written  # the job's files are orphans now...
    world.clock_offset_s = 2 * 3600
    third = service.maintain(dry_run=True)
    assert {o.uri for o in third.tables[0].orphans} >= {f"file://{p}" for p in written}
    assert all(o.uri.startswith(job_folder) or "/compaction-" not in o.uri for o in third.tables[0].orphans)
    service.maintain()  # ...deleted after the grace period
    assert not any(p.exists() for p in written)
    assert _pairs(world.rows()) == rows
