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
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from pydantic import Field

from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.dataplane.storage import join_uri
from kafscale_iceberg.dataplane.upsert_locate import Located, locate
from kafscale_iceberg.dataplane.upsert_rewrite import (
    KeyChanges,
    read_change_columns,
    read_winners,
    rewrite_without,
    write_winners,
)
from kafscale_iceberg.domain.runs import (
    DataFile,
    PartitionValue,
    ReplacedFile,
    RunPlan,
    RunResult,
    UpsertOutcome,
)
from kafscale_iceberg.domain.runs.documents import DocumentModel
from kafscale_iceberg.execution.stores import worker_stores
from kafscale_iceberg.ports import TaskExecutor

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


class FileRewritten(DocumentModel):
    """What a rewrite task did to one file: the rows it dropped (of them, `deleted` of deleted keys)
    and the file written without them (None: nothing dropped, or every row was)."""

    source: RewriteSource
    written: DataFile | None = None
    dropped: int = Field(ge=0)
    deleted: int = Field(ge=0)


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

    def __call__(self, task_indexes: Iterable[int]) -> Iterator[str]:
        reader, sink = worker_stores(self.s3)
        changes = _winners(self.s3, self.winners_uri, self.key)
        for task_index in task_indexes:
            started = time.perf_counter()
            files = []
            for source in self.tasks[task_index]:
                outcome = rewrite_without(
                    reader,
                    sink,
                    source.uri,
                    changes,
                    folder=self.folder,
                    own=source.own,
                    partition_values=source.partition_values,
                )
                files.append(
                    FileRewritten(
                        source=source,
                        written=outcome.written,
                        dropped=outcome.dropped,
                        deleted=outcome.deleted,
                    )
                )
            yield RewriteReport(
                task_index=task_index, files=tuple(files), seconds=time.perf_counter() - started
            ).model_dump_json()


@functools.lru_cache(maxsize=2)
def _winners(s3: S3Settings, uri: str, key: tuple[str, ...]) -> KeyChanges:
    """The run's resolved changes, read once per process (every rewrite task of a run reads the same)."""
    reader, _sink = worker_stores(s3)
    return read_winners(reader, uri, key)


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
        return result.model_copy(
            update={"upsert": UpsertOutcome(located_version=plan.table.metadata_location)}
        )
    located = locate(reader, plan.table.metadata_location, changes)
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
                uri=c.uri, size_bytes=c.size_bytes, own=False, partition_values=dict(c.partition_values)
            )
            for c in located.candidates
        ),
    ]
    runner = RewriteRunner(
        s3=s3, key=key, winners_uri=winners_uri, folder=folder, tasks=cut_by_bytes(sources, max_tasks)
    )
    documents = executor.map_tasks(runner, len(runner.tasks)) if runner.tasks else []
    reports = sorted((RewriteReport.model_validate_json(d) for d in documents), key=lambda r: r.task_index)
    outcome, added = _fold(plan, result, changes, located, [f for r in reports for f in r.files])
    logger.info(
        "upsert rewritten: run_id=%s snapshot=%s table_files=%d candidates=%d replaced=%d tasks=%d "
        "inserted=%d updated=%d deleted=%d",
        plan.run_id,
        located.snapshot_id,
        located.table_files,
        len(located.candidates),
        len(outcome.replaced),
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
        replaced.append(ReplacedFile(uri=candidate.uri, size_bytes=candidate.size_bytes))
        updated += rewrite.dropped - rewrite.deleted
        deleted += rewrite.deleted
        if rewrite.written is not None:
            added.append(rewrite.written)
    outcome = UpsertOutcome(
        located_snapshot_id=located.snapshot_id,
        located_version=plan.table.metadata_location if plan.table is not None else None,
        changed_keys=changes.count,
        replaced=tuple(replaced),
        inserted=changes.count - changes.deleted - updated,
        updated=updated,
        deleted=deleted,
    )
    return outcome, tuple(added)


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
