"""Table maintenance (`kafscale-iceberg maintain`, the `run` loop, the scheduled AWS function).

For each mapped table and its dead-letter table, in this order:

1. **Compaction** (in this process, or as a Spark job through the job runner with
   `maintenance.compaction_engine: spark` - `services/compaction_jobs.py`) when the table has at
   least `maintenance.compaction_min_small_files` files smaller
   than `maintenance.small_file_bytes` (or always, with `force_compaction`): small files of
   committed runs are rewritten into files of the mapping's target size, partition-pure (one Kafka
   partition each, offset order), and swapped in ONE `overwrite` snapshot. It takes no lease: the
   commit is optimistic and re-checked (see `adapters/iceberg_maintenance.py`), so it never blocks
   or races a run's commit: both land, no row lost or doubled. An upsert table's compaction then
   moves the table version recorded in `field-ids.json` to its own (`FieldIdRecords.record_version`),
   so the next run locates its changed keys in the compacted files; otherwise a run changing a key
   of a compacted file would be refused once (it would rewrite files the compaction replaced).
2. **Snapshot expiry**: older than `maintenance.snapshot_retention`, keeping the newest
   `maintenance.keep_snapshots` and the snapshot each topic's last run wrote; the offsets markers
   are table properties, which expiry never touches. The metadata log is bounded by
   `maintenance.metadata_previous_versions_max`.
3. **Orphan files**: files under the table's `{data location}/kafscale/` (`domain/table_locations.py`) that no
   snapshot references and older than `maintenance.orphan_grace` are deleted; the folder of the run
   holding the topic's lease is never touched, whatever its age (a run in flight keeps its files),
   nor the folder of any run whose stored result succeeded and whose range the topic has not passed
   (a run stranded between its tables' commits, whoever holds the lease: it may still be finished).
   The commit step checks every file it references exists besides, so neither a maintenance bug
   nor a manual delete can make a table reference a missing file.
   With an Amazon S3 Tables warehouse (a table bucket ARN) this step is deferred, not run: a table
   bucket refuses listing its tables' storage, and S3 Tables removes unreferenced files itself
   (its unreferenced-file removal, on by default); the report says so (`orphans_deferred`).

`dry_run` reads only and reports what each step would do. Every step is idempotent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafscale_iceberg.config import KafscaleConfig, MappingConfig
from kafscale_iceberg.domain.commits import TableState
from kafscale_iceberg.domain.maintenance import (
    CompactionOutcome,
    ExpiryOutcome,
    OrphanFile,
    TableHealth,
)
from kafscale_iceberg.domain.routing import matches_template
from kafscale_iceberg.domain.runs import RunPlan, RunResult, RunStatus
from kafscale_iceberg.domain.table_locations import kafscale_data_prefix
from kafscale_iceberg.domain.tickets import PLAN_NAME, join_uri, run_document_uri
from kafscale_iceberg.exceptions import DocumentMissingError, UnmappedTopicError
from kafscale_iceberg.ports import CheckpointStore, FileLister, RunDocuments, TableMaintainer
from kafscale_iceberg.services.compaction_jobs import SparkCompaction
from kafscale_iceberg.services.compaction_trigger import SmallFileTrigger
from kafscale_iceberg.services.field_id_records import FieldIdRecords

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableMaintenance:
    """What maintenance did (or would do, in a dry run) to one table."""

    table: str
    before: TableHealth
    after: TableHealth | None = None
    compaction: CompactionOutcome | None = None
    compaction_candidates: int = 0
    expiry: ExpiryOutcome | None = None
    orphans: tuple[OrphanFile, ...] = ()
    orphans_deleted: int = 0
    orphans_deferred: bool = False
    """Orphan cleanup left to Amazon S3 Tables' unreferenced-file removal (not run here)."""


@dataclass(frozen=True)
class MaintenanceReport:
    """One maintenance pass over the mapped tables."""

    dry_run: bool
    tables: tuple[TableMaintenance, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready values (`maintain --json`, the maintenance function's answer)."""
        return {"dry_run": self.dry_run, "tables": [_table_json(t) for t in self.tables]}


def _run_folder(prefix: str, uri: str) -> str:
    """The first folder of `uri` under `prefix` (a run's id, or a compaction job's); "" when none."""
    head = prefix.rstrip("/") + "/"
    if not uri.startswith(head):
        return ""
    rest = uri[len(head) :]
    return rest.split("/", 1)[0] if "/" in rest else ""


def _table_json(done: TableMaintenance) -> dict[str, Any]:
    compaction = done.compaction
    expiry = done.expiry
    return {
        "table": done.table,
        "before": vars(done.before),
        "after": vars(done.after) if done.after is not None else None,
        "compaction": {
            "candidates": done.compaction_candidates,
            "committed": bool(compaction and compaction.committed),
            "files_removed": compaction.files_removed if compaction else 0,
            "files_added": compaction.files_added if compaction else 0,
        },
        "expired_snapshots": list(expiry.expired) if expiry else [],
        "orphans": [o.uri for o in done.orphans],
        "orphans_deleted": done.orphans_deleted,
        "orphans_deferred": done.orphans_deferred,
    }


class MaintenanceService:
    """Compaction, snapshot expiry and orphan cleanup of the mapped tables (see the module docstring)."""

    def __init__(
        self,
        config: KafscaleConfig,
        tables: TableMaintainer,
        files: FileLister,
        checkpoints: CheckpointStore,
        documents: RunDocuments,
        *,
        clock: Callable[[], float] = time.time,
        spark: SparkCompaction | None = None,
        tables_of: Callable[[str], tuple[str, ...]] | None = None,
    ) -> None:
        """With `spark`, compaction is a Spark job through the job runner (`services/compaction_jobs.py`);
        without, it runs in this process (`maintenance.compaction_engine: inline`). `tables_of(topic)`
        finds the tables a route's template created (without it only the config's tables are kept)."""
        self._tables_of = tables_of
        self._config = config
        self._tables = tables
        self._files = files
        self._checkpoints = checkpoints
        self._field_ids = FieldIdRecords(documents, config.runs.location)
        self._documents = documents
        self._clock = clock
        self._spark = spark

    def maintain(
        self,
        *,
        topics: Sequence[str] = (),
        dry_run: bool = False,
        force_compaction: bool = False,
    ) -> MaintenanceReport:
        """One pass over the mappings of `topics` (all when empty). Idempotent.

        Raises `UnmappedTopicError` naming a topic without a mapping, and the adapters' catalog
        and storage errors (a pass stopped by one can simply be run again).
        """
        mappings = self._mappings(topics)
        done: list[TableMaintenance] = []
        for mapping in mappings:
            for table in self._mapping_tables(mapping):
                if not self._tables.exists(table):
                    continue
                identifier = tuple(table.split("."))
                done.append(self.maintain_table(mapping, identifier, dry_run=dry_run, force=force_compaction))
        return MaintenanceReport(dry_run=dry_run, tables=tuple(done))

    def _mapping_tables(self, mapping: MappingConfig) -> tuple[str, ...]:
        """Every table of a mapping: those it names (data tables, then dead letters), and those its
        route's template created (found through `tables_of`)."""
        template = mapping.route.table_template if mapping.route is not None else ""
        if not template or self._tables_of is None:
            return (*mapping.data_tables, mapping.dead_letter_table)
        named = self._config.named_tables  # dead letters, other mappings' tables: not the template's
        made = tuple(
            t for t in self._tables_of(mapping.topic) if t not in named and matches_template(template, t)
        )
        return tuple(dict.fromkeys((*mapping.data_tables, *made, mapping.dead_letter_table)))

    def maintain_table(
        self, mapping: MappingConfig, identifier: tuple[str, ...], *, dry_run: bool, force: bool = False
    ) -> TableMaintenance:
        """Compaction, expiry, orphan cleanup of one table (see the module docstring)."""
        settings = self._config.maintenance
        table = ".".join(identifier)
        before = self._tables.health(table, small_file_bytes=settings.small_file_bytes)
        prefix = kafscale_data_prefix(before.data_location)
        compaction, candidates, spared = self._compact(
            mapping, table, prefix, before, dry_run=dry_run, force=force
        )
        if compaction is not None and compaction.version is not None and mapping.upsert is not None:
            self._field_ids.record_version(
                mapping.topic, table, compaction.version, follows=compaction.earlier_versions
            )
        now_ms = self._now_ms()
        expiry = self._tables.expire_snapshots(
            table,
            older_than_ms=now_ms - settings.snapshot_retention * 1000,
            keep=settings.keep_snapshots,
            previous_versions_max=settings.metadata_previous_versions_max,
            now_ms=now_ms,
            dry_run=dry_run,
        )
        deferred = self._config.iceberg.in_table_bucket
        if deferred:
            logger.info(
                "orphan cleanup left to Amazon S3 Tables (its unreferenced-file removal; a table bucket "
                "refuses listing)",
                extra={"table": table},
            )
        orphans = () if deferred else tuple(self.orphan_files(mapping.topic, table, prefix, spared=spared))
        deleted = 0 if dry_run or deferred else self._files.delete_files([o.uri for o in orphans])
        after = None if dry_run else self._tables.health(table, small_file_bytes=settings.small_file_bytes)
        logger.info(
            "table maintained",
            extra={
                "table": table,
                "dry_run": dry_run,
                "compacted_files": compaction.files_removed if compaction else 0,
                "expired_snapshots": len(expiry.expired),
                "orphans": len(orphans),
            },
        )
        return TableMaintenance(
            table=table,
            before=before,
            after=after,
            compaction=compaction,
            compaction_candidates=candidates,
            expiry=expiry,
            orphans=orphans,
            orphans_deleted=deleted,
            orphans_deferred=deferred,
        )

    def _compact(
        self,
        mapping: MappingConfig,
        table: str,
        prefix: str,
        before: TableHealth,
        *,
        dry_run: bool,
        force: bool,
    ) -> tuple[CompactionOutcome | None, int, tuple[str, ...]]:
        """A table's compaction, sized to its work: `(outcome, files planned, folders spared)`.

        Nothing when the catalog compacts the table or nothing is worth merging (no job, no write).
        A Spark job the table waits for is finished first. Otherwise the plan's bytes choose: up to
        `maintenance.compaction_inline_max_bytes` the rewrite runs here (pyarrow, deletes folded; on
        AWS inside the maintenance function, every small table of the pass in the one invocation),
        beyond it a Spark job sized like a run of its bytes (`services/compaction_jobs.py`)."""
        settings = self._config.maintenance
        spark = self._spark
        if before.managed_compaction:
            logger.info(
                "compaction left to the catalog (Amazon S3 Tables compacts the table)", extra={"table": table}
            )
            return None, 0, ()
        waiting = spark.pending(table) if spark is not None else None
        if waiting is None:
            if not settings.compaction_due(before, force=force):
                return None, 0, ()
            plan = self._tables.plan_compaction(
                table,
                small_file_bytes=settings.small_file_bytes,
                min_small_files=2 if force else settings.compaction_min_small_files,
                max_bytes=settings.compaction_max_bytes,
                folding=settings.delete_folding(),
            )
            if spark is None or not plan.file_count or settings.compacts_inline(plan.total_bytes):
                return self._compact_here(mapping, plan, prefix, dry_run=dry_run), plan.file_count, ()
        assert spark is not None
        compaction, candidates = spark.compact(
            mapping, table, data_prefix=prefix, health=before, dry_run=dry_run, force=force
        )
        waiting = spark.pending(table)
        return compaction, candidates, ((join_uri(prefix, waiting.job_id) + "/",) if waiting else ())

    def _compact_here(
        self, mapping: MappingConfig, plan: Any, prefix: str, *, dry_run: bool
    ) -> CompactionOutcome | None:
        if not plan.file_count or dry_run:
            return None
        written = self._tables.write_compaction(
            plan, data_prefix=prefix, target_file_size_bytes=self._config.target_file_size_for(mapping)
        )
        outcome: CompactionOutcome = self._tables.commit_compaction(written, now_ms=self._now_ms())
        return outcome

    def orphan_files(
        self, topic: str, table: str, prefix: str, *, spared: tuple[str, ...] = ()
    ) -> list[OrphanFile]:
        """Files under `prefix` no snapshot of `table` references, older than the grace period, and not
        in the folder of the run holding `topic`'s lease, of an unfinished run (`_unfinished_runs`),
        nor in `spared` folders (a compaction job waiting to be committed). Reads only.

        The lease is read before the listing and the references after it: a file a run commits
        while this runs is referenced by then, and a run that starts meanwhile writes files younger
        than the grace period.
        """
        holder = self._checkpoints.read_lease_holder(topic)
        spared_run = join_uri(prefix, holder.run_id) + "/" if holder is not None and holder.run_id else None
        listed = self._files.list_files(prefix)
        referenced = self._tables.referenced_files(table)
        cutoff = self._now_ms() - self._config.maintenance.orphan_grace * 1000
        candidates = [
            f
            for f in listed
            if f.uri not in referenced
            and f.modified_ms < cutoff
            and (spared_run is None or not f.uri.startswith(spared_run))
            and not f.uri.startswith(spared)
        ]
        folders = {_run_folder(prefix, f.uri) for f in candidates} - {""}
        unfinished = self._unfinished_runs(topic, folders)
        return sorted(
            (f for f in candidates if _run_folder(prefix, f.uri) not in unfinished), key=lambda f: f.uri
        )

    def _unfinished_runs(self, topic: str, run_ids: set[str]) -> set[str]:
        """Those of `run_ids` whose stored result succeeded and whose range the topic has not passed
        on every partition (the checkpoint store's offsets): a run stranded between its tables'
        commits, or one still to be committed, whoever holds the lease - its files may still be
        committed (`services/commits/stranded_runs.py`), so they are never deleted. A run folder
        without documents (a compaction's, a run's whose documents were removed) is not spared."""
        if not run_ids:
            return set()
        committed = self._checkpoints.load_committed_offsets(topic)
        location = self._config.runs.location
        unfinished: set[str] = set()
        for run_id in sorted(run_ids):
            try:
                plan = RunPlan.model_validate_json(
                    self._documents.read_text(run_document_uri(location, topic, run_id, PLAN_NAME))
                )
                result = RunResult.model_validate_json(self._documents.read_text(plan.result_uri))
            except DocumentMissingError:
                continue
            ends = plan.end_offsets()
            if result.status is RunStatus.SUCCEEDED and any(committed.offset(p) < e for p, e in ends.items()):
                unfinished.add(run_id)
        if unfinished:
            logger.info(
                "orphan cleanup spares the files of unfinished runs",
                extra={"topic": topic, "run_ids": sorted(unfinished)},
            )
        return unfinished

    def _mappings(self, topics: Sequence[str]) -> list[MappingConfig]:
        mappings = list(self._config.mappings)
        if not topics:
            return mappings
        known = {m.topic for m in mappings}
        unknown = [t for t in topics if t not in known]
        if unknown:
            raise UnmappedTopicError(
                f"topic(s) {', '.join(unknown)} not mapped: maintain takes the topics of the config's "
                f"mappings ({', '.join(sorted(known))})"
            )
        return [m for t in topics for m in mappings if m.topic == t]

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


class MaintenanceSchedule:
    """Runs a maintenance pass when `maintenance.interval_seconds` have passed since the last one
    (the one-machine `run` calls it after each discovery pass). The first pass is one interval after
    start, so a restart loop never turns into a maintenance loop.

    With a `trigger` (`services/compaction_trigger.py`), a topic whose run committed (`committed`)
    and whose table gathered `maintenance.trigger_small_files` new files gets a pass of its own at
    the next call, without waiting for the interval."""

    def __init__(
        self,
        service: MaintenanceService,
        interval_s: float,
        *,
        clock: Callable[[], float],
        trigger: SmallFileTrigger | None = None,
    ) -> None:
        self._service = service
        self._interval_s = interval_s
        self._clock = clock
        self._next_at = clock() + interval_s
        self._trigger = trigger
        self._committed: dict[str, Mapping[str, TableState]] = {}

    def committed(self, topic: str, states: Mapping[str, TableState]) -> None:
        """A run of `topic` committed, leaving its tables as `states` (`CommitOutcome.states`): check
        them at the next call (the last commit's, when several came)."""
        self._committed[topic] = states

    def __call__(self) -> MaintenanceReport | None:
        """Maintain now if due (or triggered); the report, or None when not due or failed.

        A failed pass is logged at error level with its reason and tried again one interval later:
        maintenance must never stop ingestion, and every step of it is safe to repeat.
        """
        now = self._clock()
        if now < self._next_at:
            return self._triggered()
        self._next_at = now + self._interval_s
        self._committed.clear()
        try:
            return self._service.maintain()
        except Exception as exc:
            logger.exception("maintenance pass failed; retried next interval", extra={"problem": str(exc)})
            return None

    def _triggered(self) -> MaintenanceReport | None:
        if self._trigger is None or not self._committed:
            return None
        committed, self._committed = self._committed, {}
        try:
            due = [t for t in sorted(committed) if self._trigger.due(t, committed[t])]
            if not due:
                return None
            logger.info("small-file trigger: maintenance pass", extra={"topics": due})
            return self._service.maintain(topics=due)
        except Exception as exc:
            logger.exception("triggered maintenance pass failed", extra={"problem": str(exc)})
            return None
