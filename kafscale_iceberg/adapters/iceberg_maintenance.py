"""Iceberg table maintenance through pyiceberg: health, compaction, snapshot expiry, referenced files.

`IcebergTableMaintainer` is the `TableMaintainer` port's adapter (`services/maintenance.py`):

- **Compaction** (`plan_compaction` -> `write_compaction` -> `commit_compaction`): small data files
  of the current partition spec are grouped by Iceberg partition; a group's rows are split by Kafka
  partition and sorted by offset, so every new file is partition-pure and in offset order (a reset
  then touches few files) - an upsert table's are sorted by its key instead, so the new files' key
  bounds do not overlap (`iceberg_compaction_files.py`) - and written with the table's field ids
  under the product's run-scoped prefix (`…/kafscale/compaction-…/`), so files of an interrupted
  compaction are orphans the
  cleanup finds. Files whose position deletes pass `DeleteFolding`'s thresholds are rewritten too,
  deletes applied (`iceberg_delete_folding.py`). ONE `replace` snapshot deletes the old files and the
  delete files no remaining file needs, and adds the new ones. The commit is optimistic: built on
  the snapshot planned from and asserted by the catalog; when a run's commit landed meanwhile, it
  re-checks that every file it replaces is still in the table and carries no delete file its
  rewrite did not apply, and commits again on the new snapshot (the run's files are untouched). No
  row changes; table properties (the `kafscale.*` offsets markers) are kept as they are.
- **Snapshot expiry**: snapshots older than the retention, beyond the newest `keep`, never the
  current one and never, per topic, the newest snapshot carrying its commit summary
  (`kafscale.topic`: the audit trail of the last run and what `status` reads). Manifest lists and
  manifests only the expired snapshots used are deleted; data files are left to the orphan cleanup
  (only under the product's prefixes). The metadata log is bounded with
  `write.metadata.previous-versions-max` and `write.metadata.delete-after-commit.enabled`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update.snapshot import ExpireSnapshots

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.iceberg_catalog import CatalogTableAccess
from kafscale_iceberg.adapters.iceberg_compaction_files import rewrite_group
from kafscale_iceberg.adapters.iceberg_data_files import bucket_values, data_file_from_footer
from kafscale_iceberg.adapters.iceberg_delete_folding import (
    applied_deletes,
    delete_files_to_remove,
    deleted_rows,
    deletes_landed_on,
    folded_files,
)
from kafscale_iceberg.adapters.iceberg_row_delta import replace_files as replace_data_files
from kafscale_iceberg.adapters.iceberg_writes import single_attempt
from kafscale_iceberg.dataplane.storage import join_uri
from kafscale_iceberg.domain.commits import SUMMARY_TOPIC
from kafscale_iceberg.domain.compaction_jobs import (
    CompactionJob,
    CompactionJobGroup,
    CompactionJobResult,
)
from kafscale_iceberg.domain.maintenance import (
    FILES_BASELINE_PROPERTY,
    LAST_COMPACTION_PROPERTY,
    LAST_MAINTENANCE_PROPERTY,
    SUMMARY_COMPACTION,
    CompactionOutcome,
    DeleteFolding,
    ExpiryOutcome,
    TableHealth,
    snapshots_to_expire,
    total_data_files,
)
from kafscale_iceberg.domain.table_locations import data_location_of
from kafscale_iceberg.exceptions import (
    CompactionResultError,
    KafscaleIcebergError,
    TableMissingError,
)

logger = logging.getLogger(__name__)

_OFFSETS_PREFIX = "kafscale.offsets."
_PREVIOUS_VERSIONS_MAX = "write.metadata.previous-versions-max"
_DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
_COMMIT_ATTEMPTS = 4


@dataclass(frozen=True)
class CompactionGroup:
    """Small files of one Iceberg partition that are rewritten together."""

    partition_key: str
    files: tuple[IcebergDataFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)


@dataclass(frozen=True)
class CompactionPlan:
    """What one compaction pass of a table rewrites, planned on `snapshot_id`."""

    table: str
    snapshot_id: int | None
    groups: tuple[CompactionGroup, ...]
    tasks: dict[str, FileScanTask] = field(default_factory=dict, repr=False)
    base: Table | None = field(default=None, repr=False)
    """The table as planned from: the commit is built on it, and the catalog refuses it if it moved."""

    @property
    def file_count(self) -> int:
        return sum(len(g.files) for g in self.groups)

    @property
    def total_bytes(self) -> int:
        """The bytes the plan reads (its files' sizes): what chooses where it runs."""
        return sum(g.bytes for g in self.groups)


@dataclass(frozen=True)
class CompactionWrite:
    """A planned compaction whose new files are written (not yet in the table)."""

    plan: CompactionPlan
    files_by_group: tuple[tuple[str, ...], ...]
    """The new files of each of the plan's groups, in the plan's order."""
    rows: int

    @property
    def new_files(self) -> tuple[str, ...]:
        """Every new file, group after group."""
        return tuple(uri for files in self.files_by_group for uri in files)


class IcebergTableMaintainer(CatalogTableAccess):
    """Maintenance of the tables of one catalog (see the module docstring)."""

    def __init__(
        self,
        catalog: Catalog,
        sink: StagedFileStore,
        *,
        describe: str = "",
        managed_compaction: Callable[[str], bool] | None = None,
    ) -> None:
        """`managed_compaction(table)`: whether the catalog compacts the table itself (Amazon S3 Tables)."""
        super().__init__(catalog, describe=describe)
        self._sink = sink
        self._managed_compaction = managed_compaction

    # -- health -------------------------------------------------------------------------------------

    def health(self, table: str, *, small_file_bytes: int) -> TableHealth:
        """Files, small files, snapshots and manifest bytes of the current snapshot; last maintenance."""
        loaded = self._load(table)
        try:
            tasks = list(loaded.scan().plan_files())
            files = [t.file for t in tasks]
            snapshot = loaded.current_snapshot()
            manifests = snapshot.manifests(loaded.io) if snapshot is not None else []
        except Exception as exc:
            raise self._translate(f"read the files of {table!r}", exc) from exc
        properties = loaded.properties
        return TableHealth(
            table=table,
            files=len(files),
            small_files=sum(1 for f in files if f.file_size_in_bytes < small_file_bytes),
            data_bytes=sum(f.file_size_in_bytes for f in files),
            rows=sum(f.record_count for f in files),
            snapshots=len(loaded.metadata.snapshots),
            manifests=len(manifests),
            manifest_bytes=sum(m.manifest_length for m in manifests),
            last_maintenance_ms=_int_or_none(properties.get(LAST_MAINTENANCE_PROPERTY)),
            last_compaction_ms=_int_or_none(properties.get(LAST_COMPACTION_PROPERTY)),
            data_location=data_location_of(loaded.location(), dict(properties)),
            managed_compaction=self._managed_compaction is not None and self._managed_compaction(table),
            delete_files=len({d.file_path for t in tasks for d in t.delete_files}),
        )

    # -- compaction ---------------------------------------------------------------------------------

    def plan_compaction(
        self,
        table: str,
        *,
        small_file_bytes: int,
        min_small_files: int,
        max_bytes: int,
        folding: DeleteFolding | None = None,
    ) -> CompactionPlan:
        """The small files to rewrite: per Iceberg partition of the current spec, groups of >= 2 files
        (or one file mixing Kafka partitions), up to `max_bytes` read in all, when the table has at
        least `min_small_files` small files; and the files whose position deletes `folding` says to
        fold (`folded_files`), rewritten with their deletes applied. Reads only."""
        loaded = self._load(table)
        try:
            spec_id = loaded.metadata.default_spec_id
            live = [
                t
                for t in loaded.scan().plan_files()
                if t.file.content == DataFileContent.DATA and t.file.spec_id == spec_id
            ]
        except Exception as exc:
            raise self._translate(f"plan the compaction of {table!r}", exc) from exc
        folded = folded_files(live, folding) if folding is not None else set()
        small = [t for t in live if not t.delete_files and t.file.file_size_in_bytes < small_file_bytes]
        tasks = [
            *(small if len(small) >= min_small_files else ()),
            *(t for t in live if t.file.file_path in folded),
        ]
        snapshot_id = loaded.metadata.current_snapshot_id
        if not tasks:
            return CompactionPlan(table, snapshot_id, ())
        partition_column = _partition_field_id(loaded)
        keyed = bool(loaded.schema().identifier_field_ids)
        by_partition: dict[str, list[IcebergDataFile]] = {}
        for task in tasks:
            by_partition.setdefault(repr(task.file.partition), []).append(task.file)
        groups: list[CompactionGroup] = []
        budget = max_bytes
        for key in sorted(by_partition):
            files = _worth_rewriting(by_partition[key], partition_column, keyed=keyed, folded=folded)
            chosen: list[IcebergDataFile] = []
            for data_file in files:
                if data_file.file_size_in_bytes > budget:
                    break
                chosen.append(data_file)
                budget -= data_file.file_size_in_bytes
            if chosen and _worth_rewriting(chosen, partition_column, keyed=keyed, folded=folded):
                groups.append(CompactionGroup(key, tuple(chosen)))
            if budget <= 0:
                break
        return CompactionPlan(table, snapshot_id, tuple(groups), {t.file.file_path: t for t in tasks}, loaded)

    def write_compaction(
        self, plan: CompactionPlan, *, data_prefix: str, target_file_size_bytes: int
    ) -> CompactionWrite:
        """Write the groups' rows, per Kafka partition in offset order, under a new folder of
        `data_prefix` (in this process; `compaction_job` hands the same work to Spark). Not in the
        table until `commit_compaction`; files of a pass that stops here are orphans for the cleanup."""
        loaded = self._load(plan.table)
        folder = join_uri(data_prefix, new_compaction_id())
        written: list[tuple[str, ...]] = []
        rows_total = 0
        for index, group in enumerate(plan.groups):
            uris, rows = rewrite_group(
                loaded,
                [plan.tasks[f.file_path] for f in group.files],
                folder=folder,
                name=f"part-{index:05d}",
                target_file_size_bytes=target_file_size_bytes,
                sink=self._sink,
            )
            written.append(tuple(uris))
            rows_total += rows
        return CompactionWrite(plan, tuple(written), rows_total)

    def compaction_job(
        self,
        plan: CompactionPlan,
        *,
        job_id: str,
        data_prefix: str,
        target_file_size_bytes: int,
        result_uri: str,
        started_ms: int,
    ) -> CompactionJob:
        """The job document of `plan` for Spark (`spark_app/main.py --compaction`): the metadata
        file it was planned from, each group's file paths, row counts and rows its position deletes
        delete (read from its delete files), a new output folder."""
        base = plan.base or self._load(plan.table)
        try:
            deleted = deleted_rows(base.io, list(plan.tasks.values()))
        except Exception as exc:
            raise self._translate(f"read the position deletes of {plan.table!r}", exc) from exc
        return CompactionJob(
            job_id=job_id,
            table=plan.table,
            metadata_location=base.metadata_location,
            snapshot_id=plan.snapshot_id,
            groups=tuple(
                CompactionJobGroup(
                    partition_key=g.partition_key,
                    files=tuple(f.file_path for f in g.files),
                    rows=sum(f.record_count for f in g.files),
                    deleted_rows=sum(deleted.get(f.file_path, 0) for f in g.files),
                    bytes=sum(f.file_size_in_bytes for f in g.files),
                )
                for g in plan.groups
            ),
            folder=join_uri(data_prefix, job_id),
            target_file_size_bytes=target_file_size_bytes,
            result_uri=result_uri,
            io_properties={k: v for k, v in base.io.properties.items() if k in _SHAREABLE_IO_PROPERTIES},
            started_ms=started_ms,
        )

    def commit_compaction_job(
        self, job: CompactionJob, result: CompactionJobResult, *, now_ms: int
    ) -> CompactionOutcome:
        """Commit what a Spark compaction job wrote, after checking it against its job.

        The result must be this job's, succeeded, with every group's rows equal to the rows of the
        files it replaces and every new file present under the job's folder; otherwise
        `CompactionResultError` (nothing committed; the files are orphans). Files the job replaces
        that left the table meanwhile (a reset, another compaction) abandon it. Then the same
        optimistic commit with re-check as `commit_compaction`.
        """
        _check_job_result(job, result)
        loaded = self._load(job.table)
        files_by_group = tuple(output.files for output in sorted(result.groups, key=lambda o: o.index))
        new_files = [uri for files in files_by_group for uri in files]
        missing = [uri for uri in new_files if not loaded.io.new_input(uri).exists()]
        if missing:
            raise CompactionResultError(
                f"compaction job {job.job_id} of {job.table}: result names files that do not exist: "
                f"{', '.join(missing[:5])}; nothing committed (run maintain again)"
            )
        try:
            live = {t.file.file_path: t for t in loaded.scan().plan_files()}
        except Exception as exc:
            raise self._translate(f"read the files of {job.table!r}", exc) from exc
        gone = [path for g in job.groups for path in g.files if path not in live]
        if gone:
            logger.warning(
                "compaction job abandoned: files it replaces left the table",
                extra={"table": job.table, "job_id": job.job_id, "gone": gone[:5]},
            )
            return CompactionOutcome(table=job.table, committed=False, abandoned=True)
        groups = tuple(
            CompactionGroup(g.partition_key, tuple(live[path].file for path in g.files)) for g in job.groups
        )
        # The deletes the job applied: those of the snapshot it read (none known once it expired).
        read = {}
        if job.snapshot_id is not None and loaded.metadata.snapshot_by_id(job.snapshot_id) is not None:
            read = {t.file.file_path: t for t in loaded.scan(snapshot_id=job.snapshot_id).plan_files()}
        plan = CompactionPlan(job.table, loaded.metadata.current_snapshot_id, groups, read, loaded)
        return self.commit_compaction(
            CompactionWrite(plan, files_by_group, sum(o.rows for o in result.groups)), now_ms=now_ms
        )

    def commit_compaction(self, write: CompactionWrite, *, now_ms: int) -> CompactionOutcome:
        """ONE `replace` snapshot: the planned files out (and the delete files folded into them), the
        new files in; optimistic with a re-check.

        Raises nothing for a lost race it cannot repair (a replaced file left the table meanwhile,
        e.g. a reset, or an upsert run committed deletes against one): the outcome says
        `committed=False` and the new files are orphans.
        """
        plan = write.plan
        replaced = [f for g in plan.groups for f in g.files]
        if not replaced:
            return CompactionOutcome(table=plan.table, committed=False)
        loaded = plan.base or self._load(plan.table)
        # A group is one Iceberg partition: its files take the group's (bucket values are not in bounds).
        new_files = [
            data_file_from_footer(
                loaded.io, loaded.metadata, uri, bucket_values(loaded.spec(), group.files[0])
            )
            for group, files in zip(plan.groups, write.files_by_group, strict=True)
            for uri in files
        ]
        paths = {f.file_path for f in replaced}
        applied = applied_deletes(plan.tasks)
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            live = list(loaded.scan().plan_files())
            problem = _replaced_moved(live, paths, applied)
            if problem:
                logger.warning("compaction abandoned: %s", problem, extra={"table": plan.table})
                return CompactionOutcome(table=plan.table, committed=False, abandoned=True)
            folded = delete_files_to_remove(loaded, live, paths)
            transaction = single_attempt(loaded).transaction()
            replace_data_files(transaction, [*replaced, *folded], new_files, {SUMMARY_COMPACTION: "true"})
            transaction.set_properties({LAST_COMPACTION_PROPERTY: str(now_ms)})
            try:
                committed = transaction.commit_transaction()
            except CommitFailedException as exc:
                logger.info(
                    "compaction lost a race with a commit; re-checking",
                    extra={"table": plan.table, "attempt": attempt, "problem": str(exc)},
                )
                loaded = self._load(plan.table)
                continue
            return CompactionOutcome(
                table=plan.table,
                committed=True,
                files_removed=len(replaced),
                files_added=len(new_files),
                rows=write.rows,
                attempts=attempt,
                version=committed.metadata_location,
                earlier_versions=tuple(e.metadata_file for e in committed.metadata.metadata_log),
                delete_files_removed=len(folded),
            )
        return CompactionOutcome(table=plan.table, committed=False, attempts=_COMMIT_ATTEMPTS)

    # -- snapshots ----------------------------------------------------------------------------------

    def expire_snapshots(
        self,
        table: str,
        *,
        older_than_ms: int,
        keep: int,
        previous_versions_max: int,
        now_ms: int,
        dry_run: bool,
    ) -> ExpiryOutcome:
        """Expire what `snapshots_to_expire` picks; delete the manifests only they used. Idempotent."""
        loaded = self._load(table)
        metadata = loaded.metadata
        topics = sorted(
            k.removeprefix(_OFFSETS_PREFIX) for k in metadata.properties if k.startswith(_OFFSETS_PREFIX)
        )
        snapshots = [
            (s.snapshot_id, s.timestamp_ms, s.summary.get(SUMMARY_TOPIC) if s.summary is not None else None)
            for s in metadata.snapshots
        ]
        expire = snapshots_to_expire(
            snapshots,
            current=metadata.current_snapshot_id,
            protected={ref.snapshot_id for ref in metadata.refs.values()},
            topics=topics,
            older_than_ms=older_than_ms,
            keep=keep,
        )
        if dry_run:
            return ExpiryOutcome(table=table, expired=tuple(expire), kept=len(snapshots) - len(expire))
        try:
            kept_ids = {s.snapshot_id for s in metadata.snapshots} - set(expire)
            kept_files = _metadata_files(loaded, (s for s in metadata.snapshots if s.snapshot_id in kept_ids))
            expired_files = _metadata_files(
                loaded, (s for s in metadata.snapshots if s.snapshot_id in expire)
            )
            transaction = single_attempt(loaded).transaction()
            if expire:
                ExpireSnapshots(transaction).by_ids(list(expire)).commit()
            transaction.set_properties(
                {
                    _PREVIOUS_VERSIONS_MAX: str(previous_versions_max),
                    _DELETE_AFTER_COMMIT: "true",
                    LAST_MAINTENANCE_PROPERTY: str(now_ms),
                    FILES_BASELINE_PROPERTY: str(_total_data_files(metadata.current_snapshot())),
                }
            )
            transaction.commit_transaction()
        except CommitFailedException:
            # A run committed meanwhile: nothing was expired; the next pass tries again.
            return ExpiryOutcome(table=table, expired=(), kept=len(snapshots), conflicted=True)
        except KafscaleIcebergError:
            raise
        except Exception as exc:
            raise self._translate(f"expire snapshots of {table!r}", exc) from exc
        unused = sorted(expired_files - kept_files)
        for path in unused:
            try:
                loaded.io.delete(path)
            except FileNotFoundError:
                continue
        return ExpiryOutcome(
            table=table, expired=tuple(expire), kept=len(kept_ids), metadata_files_deleted=len(unused)
        )

    # -- files --------------------------------------------------------------------------------------

    def referenced_files(self, table: str) -> frozenset[str]:
        """Every data and delete file live in some snapshot of `table` (what orphan cleanup spares).

        A manifest entry marked DELETED is not a reference: it records that the snapshot which wrote
        it removed the file (the file is live in that snapshot's parent, if the parent is kept), and
        pyiceberg carries such manifests into later snapshots - counting them would keep every file
        a compaction or reset replaced forever (Java's orphan removal reads live entries too)."""
        loaded = self._load(table)
        paths: set[str] = set()
        try:
            seen: set[str] = set()
            for snapshot in loaded.metadata.snapshots:
                for manifest in snapshot.manifests(loaded.io):
                    if manifest.manifest_path in seen:
                        continue
                    seen.add(manifest.manifest_path)
                    for entry in manifest.fetch_manifest_entry(loaded.io, discard_deleted=True):
                        paths.add(entry.data_file.file_path)
        except Exception as exc:
            raise self._translate(f"list the files of {table!r}", exc) from exc
        return frozenset(paths)

    def exists(self, table: str) -> bool:
        """Whether the catalog has `table`."""
        try:
            self._load(table)
        except TableMissingError:
            return False
        return True


def _total_data_files(snapshot: Snapshot | None) -> int:
    return total_data_files(snapshot.summary if snapshot is not None else None)


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _partition_field_id(table: Table) -> int | None:
    try:
        return table.schema().find_field("partition").field_id
    except ValueError:
        return None


def _worth_rewriting(
    files: Sequence[IcebergDataFile],
    field_id: int | None,
    *,
    keyed: bool = False,
    folded: AbstractSet[str] = frozenset(),
) -> list[IcebergDataFile]:
    """The files whose rewrite lowers the file count: every file mixing Kafka partitions, and the
    partition-pure files of Kafka partitions with more than one, or whose rows the mixed files may
    hold too (its compacted output joins them). A lone pure file no mixed file may add to stays.

    `keyed` (an upsert table, written in key order, not per Kafka partition): every file when there
    are two or more, none for a lone file (already sorted). A file whose deletes are `folded` is
    always worth it (its rewrite drops delete files)."""
    if any(f.file_path in folded for f in files):
        return sorted(files, key=lambda f: f.file_path)
    if keyed:
        return sorted(files, key=lambda f: f.file_path) if len(files) > 1 else []
    mixed = [f for f in files if _mixes_partitions(f, field_id)]
    pure: dict[int, list[IcebergDataFile]] = {}
    for data_file in files:
        if field_id is not None and not _mixes_partitions(data_file, field_id):
            pure.setdefault(_bound(data_file.lower_bounds[field_id]), []).append(data_file)
    spans = [_partition_span(f, field_id) for f in mixed]
    joined = [
        f
        for partition, group in pure.items()
        if len(group) > 1 or any(low <= partition <= high for low, high in spans)
        for f in group
    ]
    chosen = sorted([*mixed, *joined], key=lambda f: f.file_path)
    return chosen if len(chosen) > 1 or mixed else []


def _partition_span(data_file: IcebergDataFile, field_id: int | None) -> tuple[float, float]:
    """The Kafka partitions a file's statistics say it may hold (any, without statistics)."""
    lower = (data_file.lower_bounds or {}).get(field_id) if field_id is not None else None
    upper = (data_file.upper_bounds or {}).get(field_id) if field_id is not None else None
    return (
        float("-inf") if lower is None else _bound(lower),
        float("inf") if upper is None else _bound(upper),
    )


def _bound(value: bytes) -> int:
    """An `int` column's bound as Iceberg serializes it (4 bytes, little-endian, signed)."""
    return int.from_bytes(value, "little", signed=True)


def _mixes_partitions(data_file: IcebergDataFile, field_id: int | None) -> bool:
    """True unless the file's statistics show one Kafka partition (lower bound == upper bound)."""
    if field_id is None:
        return False
    lower = (data_file.lower_bounds or {}).get(field_id)
    upper = (data_file.upper_bounds or {}).get(field_id)
    return lower is None or lower != upper


def _replaced_moved(
    live: Sequence[FileScanTask], replaced: AbstractSet[str], applied: dict[str, frozenset[str]]
) -> str | None:
    """Why the compaction can no longer replace `replaced` (None: it can): a file left the table, or
    carries a delete file its rewrite did not apply (an upsert run's, committed meanwhile)."""
    gone = sorted(replaced - {t.file.file_path for t in live})
    if gone:
        return f"{len(gone)} file(s) it replaces left the table, e.g. {gone[0]}"
    changed = deletes_landed_on(live, replaced, applied)
    if changed:
        return f"rows of {len(changed)} file(s) it replaces were deleted meanwhile, e.g. {changed[0]}"
    return None


def _metadata_files(table: Table, snapshots: Iterable[Snapshot]) -> set[str]:
    files: set[str] = set()
    for snapshot in snapshots:
        if snapshot.manifest_list:
            files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            files.add(manifest.manifest_path)
    return files


_SHAREABLE_IO_PROPERTIES = frozenset(
    {"py-io-impl", "s3.endpoint", "s3.region", "s3.force-virtual-addressing", "s3.path-style-access"}
)


def new_compaction_id() -> str:
    """A compaction job's id and folder name: `compaction-{unix ms}-{8 hex}`."""
    return f"compaction-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


def _check_job_result(job: CompactionJob, result: CompactionJobResult) -> None:
    problem = None
    if result.job_id != job.job_id:
        problem = f"the result is job {result.job_id}'s"
    elif not result.succeeded:
        problem = f"the job failed: {result.failure}"
    elif sorted(o.index for o in result.groups) != list(range(len(job.groups))):
        problem = f"the result has groups {sorted(o.index for o in result.groups)}, the job {len(job.groups)}"
    else:
        for output in result.groups:
            group = job.groups[output.index]
            expected = group.rows - group.deleted_rows
            if output.rows != expected:
                problem = f"group {output.index} wrote {output.rows} rows, its files hold {expected}"
                if group.deleted_rows:
                    problem += f" once {group.deleted_rows} deleted by position deletes are applied"
                break
            outside = [uri for uri in output.files if not uri.startswith(job.folder.rstrip("/") + "/")]
            if outside:
                problem = f"group {output.index} names files outside {job.folder}: {outside[:3]}"
                break
    if problem is not None:
        raise CompactionResultError(
            f"compaction job {job.job_id} of {job.table}: {problem}; nothing committed (its files are "
            "orphans the cleanup deletes; the next maintain plans again)"
        )
