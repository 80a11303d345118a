"""An upsert run's second stage (`domain/upsert.py`), in the run's driver and its tasks: the run's
changes are resolved, located in the table and made into files, so the commit step only commits.

After the tasks wrote the run's new rows and deleted keys (`dataplane/upsert_changes.py`), the driver

1. **resolves** the last change of each key from the key columns of the run's files (`KeyChanges`) and
   writes the winners beside the run's files, for the tasks;
2. **locates** the table files that may hold a changed key in the table version the plan names
   (`dataplane/upsert_locate.py`: partition and key-bound pruning in the manifests, no catalog);
3. **fans out the rewrites** as tasks on the run's `TaskExecutor` (Spark or this process): each task
   reads only the key columns of its files and writes again only those holding a changed key, without
   those rows (`dataplane/upsert_rewrite.py`); the run's own files lose the rows a later change of
   their key superseded;
4. **folds** the task reports into the result: `data_files` become the files to add (the run's, some
   rewritten, and the table's rewritten ones), `upsert` the table files they replace, the located
   snapshot and the keys inserted, updated and deleted.

The commit step replaces those files in one overwrite snapshot carrying the offsets, and refuses the
run when the located version no longer stands (`adapters/iceberg_upsert.py`): the run is then
planned again on the table's current version. Idempotent: file names derive from the run's folder
and the file rewritten, and a plan always locates in the version it names.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pydantic import Field

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.dataplane.position_deletes import write_position_deletes
from kafscale_iceberg.dataplane.storage import join_uri
from kafscale_iceberg.dataplane.upsert_keys import KeyChanges
from kafscale_iceberg.dataplane.upsert_locate import Located, locate
from kafscale_iceberg.dataplane.upsert_positions import LocatedRows, locate_rows, read_delete_rows
from kafscale_iceberg.dataplane.upsert_rewrite import (
    read_change_columns,
    read_winners,
    rewrite_without,
    write_winners,
)
from kafscale_iceberg.domain.runs import (
    DataFile,
    PartitionValue,
    PositionDeleteFile,
    ReplacedFile,
    RunPlan,
    RunResult,
    UpsertOutcome,
    UpsertWrite,
)
from kafscale_iceberg.domain.runs.documents import DocumentModel
from kafscale_iceberg.domain.upsert import choose_write
from kafscale_iceberg.execution.stores import worker_stores
from kafscale_iceberg.ports import FileSink, TaskExecutor

logger = logging.getLogger(__name__)

REWRITE_FOLDER = "upsert"
"""The folder of the table's run prefix the winners and the rewritten files go to."""
WINNERS_NAME = "changes.parquet"


class RewriteSource(DocumentModel):
    """A file a rewrite task reads: one of the run's own (`own`) or a candidate of the table."""

    uri: str
    size_bytes: int = Field(ge=0)
    own: bool
    partition_values: dict[str, PartitionValue] = Field(default_factory=dict)
    partition_key: str = ""
    """A table file's partition spec and values."""
    delete_files: tuple[str, ...] = ()
    """The table's position delete files that may delete rows of a table file."""
    own_delete_files: tuple[str, ...] = ()
    """Of `delete_files`, those deleting rows of this file only (merged and removed by merge-on-read)."""


class FileRewritten(DocumentModel):
    """What a rewrite task did to one file: the rows it dropped (of them, `deleted` of deleted keys)
    and the file written without them (None: nothing dropped, or every row was)."""

    source: RewriteSource
    written: DataFile | None = None
    dropped: int = Field(ge=0)
    deleted: int = Field(ge=0)
    delete: PositionDeleteFile | None = None
    """Merge-on-read: the file's one position delete file, of every position of it deleted once the
    run lands - the `dropped` rows it replaces and those the table's delete files already delete;
    it supersedes the file's own delete files (`replaces`)."""
    bytes_read: int = Field(default=0, ge=0)
    """Bytes read from a table file to locate its changed keys."""


class RewriteReport(DocumentModel):
    """One rewrite task's files, and its seconds."""

    task_index: int
    files: tuple[FileRewritten, ...]
    seconds: float = 0.0


@dataclass(frozen=True)
class RewriteRunner:
    """The function each rewrite task runs: task ids in, one JSON `RewriteReport` per task out
    (picklable: the stores are made where it runs)."""

    s3: S3Settings
    key: tuple[str, ...]
    winners_uri: str
    folder: str
    tasks: tuple[tuple[RewriteSource, ...], ...]
    merge_on_read: bool = False
    """Table files are left in place: their replaced rows' positions go to a delete file each."""

    def __call__(self, task_indexes: Iterable[int]) -> Iterator[str]:
        reader, sink = worker_stores(self.s3)
        changes = _winners(self.s3, self.winners_uri, self.key)
        for task_index in task_indexes:
            started = time.perf_counter()
            files = [self._one(reader, sink, changes, source) for source in self.tasks[task_index]]
            yield RewriteReport(
                task_index=task_index, files=tuple(files), seconds=time.perf_counter() - started
            ).model_dump_json()

    def _one(
        self, reader: DocumentStore, sink: StagedFileStore, changes: KeyChanges, source: RewriteSource
    ) -> FileRewritten:
        """One file: the run's own rewritten without superseded rows; a table file's changed keys
        located by position, then rewritten without them or reported for the delete step."""
        located = None
        if not source.own:
            located = locate_rows(
                reader,
                source.uri,
                source.size_bytes,
                changes,
                source.delete_files,
                functools.partial(_delete_rows, self.s3),
            )
            if self.merge_on_read:
                return FileRewritten(
                    source=source,
                    dropped=int(located.replaced.size),
                    deleted=int(located.deleted.size),
                    delete=_write_delete(sink, self.folder, source, located)
                    if located.replaced.size
                    else None,
                    bytes_read=located.bytes_read,
                )
        outcome = rewrite_without(
            reader,
            sink,
            source.uri,
            changes,
            folder=self.folder,
            own=source.own,
            partition_values=source.partition_values,
            located=located,
        )
        return FileRewritten(
            source=source,
            written=outcome.written,
            dropped=outcome.dropped,
            deleted=outcome.deleted,
            bytes_read=0 if located is None else located.bytes_read,
        )


@functools.lru_cache(maxsize=2)
def _winners(s3: S3Settings, uri: str, key: tuple[str, ...]) -> KeyChanges:
    """The run's resolved changes, read once per process (every rewrite task of a run reads the same)."""
    reader, _sink = worker_stores(s3)
    return read_winners(reader, uri, key)


@functools.lru_cache(maxsize=512)
def _delete_rows(s3: S3Settings, uri: str) -> pa.Table:
    """A position delete file's rows, read once per process (immutable; a partition's delete file
    names rows of many of the files the tasks locate in)."""
    reader, _sink = worker_stores(s3)
    return read_delete_rows(reader, uri)


def run_upsert_stage(
    plan: RunPlan, result: RunResult, executor: TaskExecutor, s3: S3Settings, *, max_tasks: int
) -> RunResult:
    """`result` (the tasks' rows and deleted keys of the plan's upsert table) made into the files the
    commit adds and replaces (see the module docstring). Raises `UpsertTableError` for a table it
    cannot locate in, storage errors, and what a task raised (the driver fails the run)."""
    assert plan.conversion.upsert is not None
    assert plan.table is not None
    key = plan.conversion.upsert.key
    reader, sink = worker_stores(s3)
    changes = KeyChanges(
        key,
        read_change_columns(reader, result.data_files, key),
        read_change_columns(reader, result.deleted_key_files, key),
    )
    if not changes.count:
        outcome = UpsertOutcome(
            located_version=plan.table.metadata_location, policy=plan.conversion.upsert.write
        )
        return result.model_copy(update={"upsert": outcome})
    located = locate(reader, plan.table.metadata_location, changes)
    write = choose_write(plan.conversion.upsert.write, [c.size_bytes for c in located.candidates])
    folder = join_uri(plan.table.data_uri, REWRITE_FOLDER)
    winners_uri = join_uri(folder, WINNERS_NAME)
    write_winners(sink, winners_uri, changes)
    sources = [
        *(
            RewriteSource(uri=f.uri, size_bytes=f.size_bytes, own=True, partition_values=f.partition_values)
            for f in result.data_files
        ),
        *(
            RewriteSource(
                uri=c.uri,
                size_bytes=c.size_bytes,
                own=False,
                partition_values=dict(c.partition_values),
                partition_key=c.partition_key,
                delete_files=c.delete_files,
                own_delete_files=c.own_delete_files,
            )
            for c in located.candidates
        ),
    ]
    runner = RewriteRunner(
        s3=s3,
        key=key,
        winners_uri=winners_uri,
        folder=folder,
        tasks=cut_by_bytes(sources, max_tasks),
        merge_on_read=write is UpsertWrite.MERGE_ON_READ,
    )
    documents = executor.map_tasks(runner, len(runner.tasks)) if runner.tasks else []
    reports = sorted((RewriteReport.model_validate_json(d) for d in documents), key=lambda r: r.task_index)
    rewrites = [f for r in reports for f in r.files]
    outcome, added = _fold(plan, result, changes, located, rewrites)
    if write is UpsertWrite.MERGE_ON_READ:
        deletes = tuple(sorted((r.delete for r in rewrites if r.delete is not None), key=lambda d: d.uri))
        outcome = outcome.model_copy(update={"write": write, "deletes": deletes})
    outcome = outcome.model_copy(update={"policy": plan.conversion.upsert.write})
    logger.info(
        "upsert located: run_id=%s snapshot=%s write=%s table_files=%d candidates=%d bytes_read=%d "
        "replaced=%d delete_files=%d tasks=%d inserted=%d updated=%d deleted=%d",
        plan.run_id,
        located.snapshot_id,
        write.value,
        located.table_files,
        len(located.candidates),
        outcome.located_bytes_read,
        len(outcome.replaced),
        len(outcome.deletes),
        len(runner.tasks),
        outcome.inserted,
        outcome.updated,
        outcome.deleted,
    )
    return result.model_copy(update={"data_files": added, "upsert": outcome})


def _fold(
    plan: RunPlan, result: RunResult, changes: KeyChanges, located: Located, rewrites: Sequence[FileRewritten]
) -> tuple[UpsertOutcome, tuple[DataFile, ...]]:
    """The outcome and the files to add, from every file's rewrite (the run's own in their order first)."""
    by_uri = {r.source.uri: r for r in rewrites}
    added: list[DataFile] = []
    for own in result.data_files:
        rewrite = by_uri[own.uri]
        if not rewrite.dropped:
            added.append(own)
        elif rewrite.written is not None:
            added.append(rewrite.written)
    replaced: list[ReplacedFile] = []
    updated = deleted = 0
    for candidate in located.candidates:
        rewrite = by_uri[candidate.uri]
        if not rewrite.dropped:
            continue
        updated += rewrite.dropped - rewrite.deleted
        deleted += rewrite.deleted
        if rewrite.delete is not None:
            continue
        replaced.append(ReplacedFile(uri=candidate.uri, size_bytes=candidate.size_bytes))
        if rewrite.written is not None:
            added.append(rewrite.written)
    outcome = UpsertOutcome(
        located_snapshot_id=located.snapshot_id,
        located_version=plan.table.metadata_location if plan.table is not None else None,
        changed_keys=changes.count,
        replaced=tuple(replaced),
        located_bytes_read=sum(r.bytes_read for r in rewrites),
        inserted=changes.count - changes.deleted - updated,
        updated=updated,
        deleted=deleted,
    )
    return outcome, tuple(added)


def _write_delete(
    sink: FileSink, folder: str, source: RewriteSource, located: LocatedRows
) -> PositionDeleteFile:
    """The one position delete file of table file `source` once the run lands: the positions it
    replaces and those already deleted, so it replaces the file's own delete files (removed in the
    same snapshot). A reader then matches at most one delete file to a data file, by its referenced
    data file, as Iceberg v3's deletion vectors and Spark's `write.delete.granularity=file` do
    (docs/architecture.md). Named from the file, in the run's folder (idempotent)."""
    digest = hashlib.sha256(source.uri.encode()).hexdigest()[:24]
    positions = {source.uri: np.union1d(located.replaced, located.deleted_before)}
    written = write_position_deletes(sink, join_uri(folder, f"deletes-{digest}.parquet"), positions)
    return written.model_copy(update={"replaces": source.own_delete_files})


def cut_by_bytes(sources: Sequence[RewriteSource], max_tasks: int) -> tuple[tuple[RewriteSource, ...], ...]:
    """`sources` in at most `max_tasks` tasks of about equal bytes (the largest first, each to the
    lightest task), each task's files in their given order; no empty task."""
    count = max(1, min(max_tasks, len(sources)))
    loads = [0] * count
    members: list[list[int]] = [[] for _ in range(count)]
    for index in sorted(range(len(sources)), key=lambda i: -sources[i].size_bytes):
        lightest = loads.index(min(loads))
        loads[lightest] += sources[index].size_bytes
        members[lightest].append(index)
    return tuple(tuple(sources[i] for i in sorted(m)) for m in members if m)
