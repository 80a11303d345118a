"""The commit side of an upsert run (`domain/upsert.py`) on a pyiceberg table: the files it replaces,
taken from the table only while the version the run located its keys in still stands.

The run's driver located and rewrote against the table version its plan named (`LocatedIn`); between
that and the commit, a `maintain` compaction or another writer may have moved the table. The commit
lands only when

- the located snapshot is on the table's current lineage, and every snapshot after it is a
  compaction (`kafscale.compaction`) or adds no data file - nothing can hold a changed key the run
  did not see (a compaction only moves rows; the next check catches it moving the run's);
- every file the run replaces, and every data file its position deletes target (merge-on-read), is
  still in the current snapshot - a compaction that took one meanwhile moved the rows the deletes
  name, so the run is refused rather than resurrecting them - and so is every delete file its new
  delete files supersede (`PositionDeleteFile.replaces`).

Otherwise `UpsertLocateStaleError` (nothing written): the run is aborted and planned again on the
table's current version. Only manifests are read here, never a data file.
"""

from __future__ import annotations

from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.table import Table

from kafscale_iceberg.domain.commits import TableCommit
from kafscale_iceberg.domain.maintenance import SUMMARY_COMPACTION
from kafscale_iceberg.exceptions import UpsertLocateStaleError

_ADDED_DATA_FILES = "added-data-files"


def files_to_replace(table: Table, identifier: str, commit: TableCommit) -> list[IcebergDataFile]:
    """The current snapshot's entries of `commit.removed_files`, of the data files its position
    deletes target and of the delete files they supersede, once `commit.located` is checked to still
    stand on `table` (see the module docstring). Raises `UpsertLocateStaleError`."""
    metadata = table.metadata
    if commit.located is None and not commit.removed_files and not commit.added_deletes:
        return []
    if commit.located is not None:
        located = commit.located.snapshot_id
        by_id = {s.snapshot_id: s for s in metadata.snapshots}
        walked = metadata.current_snapshot_id
        while walked != located:
            snapshot = by_id.get(walked) if walked is not None else None
            if snapshot is None:
                raise UpsertLocateStaleError(
                    identifier,
                    commit.run_id,
                    located,
                    "it is not on the table's current lineage (expired, or the table was rolled back)",
                )
            summary = snapshot.summary
            added = (summary.get(_ADDED_DATA_FILES) if summary is not None else None) or "0"
            if (summary is None or summary.get(SUMMARY_COMPACTION) != "true") and added != "0":
                operation = summary.operation.value if summary is not None else "unknown"
                raise UpsertLocateStaleError(
                    identifier,
                    commit.run_id,
                    located,
                    f"snapshot {walked} ({operation}, {added} data file(s) added) landed after it",
                )
            walked = snapshot.parent_snapshot_id
    superseded = {r for d in commit.added_deletes for r in d.replaces}
    wanted = {*commit.removed_files, *(t for d in commit.added_deletes for t in d.targets), *superseded}
    if not wanted:
        return []
    snapshot_id = metadata.current_snapshot_id
    live = [] if snapshot_id is None else list(table.scan(snapshot_id=snapshot_id).plan_files())
    removed = [task.file for task in live if task.file.file_path in wanted]
    deletes = {d.file_path: d for task in live for d in task.delete_files if d.file_path in superseded}
    removed.extend(deletes.values())
    if len(removed) != len(wanted):
        gone = sorted(wanted - {f.file_path for f in removed})
        raise UpsertLocateStaleError(
            identifier,
            commit.run_id,
            None if commit.located is None else commit.located.snapshot_id,
            f"{len(gone)} file(s) it replaces or deletes rows of left the table (replaced by a compaction "
            f"or another writer), "
            f"e.g. {gone[0]}",
        )
    return removed
