"""Compaction and position deletes (`adapters/iceberg_maintenance.py`): which data files a compaction
rewrites to fold their deletes in, which delete files then leave the table, and whether a row-level
change landed on a file the compaction replaces while it ran.

- **Folding** (`folded_files`, `DeleteFolding`): a data file whose delete files' rows reach
  `max_delete_ratio` of its rows (an upper bound: a delete file naming several data files counts
  whole for each), or any data file with deletes in a partition holding `max_delete_files` delete
  files or more. Its rewrite reads it through the table (pyiceberg's scan applies its deletes).
- **Removal** (`delete_files_to_remove`): every live delete file no data file that stays needs -
  those of the rewritten files, and dangling ones whose data files left the table earlier.
- **Rows a rewrite keeps** (`deleted_rows`): the rows of a data file its delete files delete,
  counted from the delete files' positions, so a Spark compaction job's result is checked against
  the rows its rewrite must hold, deletes applied.
- **Race** (`deletes_landed_on`): the compaction replaces a file only with the deletes it applied;
  a merge-on-read upsert run that committed deletes against it meanwhile makes the compaction
  abandon (its rewrite would bring those rows back). The run's side is `iceberg_upsert.py`: its
  deletes' targets must still be live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, FileFormat, ManifestContent
from pyiceberg.table import FileScanTask, Table

from kafscale_iceberg.domain.maintenance import DeleteFolding


def folded_files(tasks: Sequence[FileScanTask], folding: DeleteFolding) -> set[str]:
    """The data files of `tasks` (the table's live files) whose deletes compaction folds."""
    per_partition: dict[tuple[int, str], set[str]] = {}
    for task in tasks:
        key = (task.file.spec_id, repr(task.file.partition))
        per_partition.setdefault(key, set()).update(d.file_path for d in task.delete_files)
    folded = set()
    for task in tasks:
        if not task.delete_files:
            continue
        deleted = sum(d.record_count for d in task.delete_files)
        crowded = (
            len(per_partition[(task.file.spec_id, repr(task.file.partition))]) >= folding.max_delete_files
        )
        if crowded or deleted >= folding.max_delete_ratio * max(1, task.file.record_count):
            folded.add(task.file.file_path)
    return folded


def deleted_rows(io: FileIO, tasks: Sequence[FileScanTask]) -> dict[str, int]:
    """Per data file of `tasks` that has delete files, how many of its rows they delete: the
    distinct positions naming it below its record count, read from the (small) delete files, each
    once. Raises `ValueError` for a delete file that is not Parquet (a Puffin deletion vector)."""
    rows_of: dict[str, set[str]] = {}
    for task in tasks:
        for delete in task.delete_files:
            if delete.file_format != FileFormat.PARQUET:
                raise ValueError(f"delete file {delete.file_path} is {delete.file_format}, not Parquet")
            rows_of.setdefault(delete.file_path, set()).add(task.file.file_path)
    found: dict[str, list[np.ndarray]] = {}
    for delete_path, targets in rows_of.items():
        with io.new_input(delete_path).open() as stream:
            rows = pq.read_table(stream, columns=["file_path", "pos"])
        paths = rows.column("file_path").cast("string")
        for target in targets:
            found.setdefault(target, []).append(rows.filter(pc.equal(paths, target)).column("pos").to_numpy())
    counts = {t.file.file_path: t.file.record_count for t in tasks}
    return {
        path: int(np.count_nonzero(np.unique(np.concatenate(chunks)) < counts[path]))
        for path, chunks in found.items()
    }


def live_delete_files(table: Table) -> list[DataFile]:
    """Every delete file of `table`'s current snapshot (read from its delete manifests)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [
        entry.data_file
        for manifest in snapshot.manifests(table.io)
        if manifest.content == ManifestContent.DELETES
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    ]


def delete_files_to_remove(
    table: Table, live: Sequence[FileScanTask], replaced: AbstractSet[str]
) -> list[DataFile]:
    """The live delete files no data file left in the table after `replaced` go needs."""
    needed = {d.file_path for t in live if t.file.file_path not in replaced for d in t.delete_files}
    return [d for d in live_delete_files(table) if d.file_path not in needed]


def applied_deletes(tasks: Mapping[str, FileScanTask]) -> dict[str, frozenset[str]]:
    """Per data file, the delete files its rewrite applied (those of the scan it was read in)."""
    return {path: frozenset(d.file_path for d in task.delete_files) for path, task in tasks.items()}


def deletes_landed_on(
    live: Sequence[FileScanTask], replaced: AbstractSet[str], applied: Mapping[str, frozenset[str]]
) -> list[str]:
    """The replaced data files that now carry a delete file their rewrite did not apply."""
    return sorted(
        t.file.file_path
        for t in live
        if t.file.file_path in replaced
        and not {d.file_path for d in t.delete_files} <= applied.get(t.file.file_path, frozenset())
    )
