"""Keyed upsert, copy-on-write: what one run changes in an upsert table, and how it is recorded.

A run of an upsert table ends in ONE Iceberg commit that replaces files and adds files. The run's
driver and tasks make the files (`execution/upsert_stage.py`), so the commit step reads no data file:

1. **Resolve** (`dataplane/upsert_rewrite.py`): of the run's changes of a key - its new rows and its
   deleted keys - the last wins: by offset within its Kafka partition; a key met in several Kafka
   partitions of one run (its producer's partitioning changed) is decided by the higher partition.
2. **Locate** (`dataplane/upsert_locate.py`, in the driver): the files of the table version the plan
   names (`TableTarget.metadata_location`) that may hold a changed key, pruned by partition and by the
   key columns' bounds in the manifests.
3. **Rewrite** (the run's tasks): each candidate's key columns are read, and a file holding a changed
   key is written again without those rows (same columns and field ids, a name derived from the run
   and the file it replaces); the run's own files lose the rows a later change of their key superseded.

The commit (`services/commits/upsert_commit.py`) removes the replaced files and adds the rewritten ones and
the run's, with the offsets marker, through the verified loop - only while the located version still
stands (`LocatedIn`, checked in `adapters/iceberg_upsert.py`): a file the run replaces that left the
table (a `maintain` compaction), or a commit that added files after it, refuses the run
(`UpsertLocateStaleError`, nothing written) and the run is planned again on the table's current
version, never half applied. Only plain data files are written, so every engine reads the table; the
locate step is separate so position deletes can later take the rewrite's place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafscale_iceberg.domain.runs import UpsertWrite

SUMMARY_UPSERT_INSERTED = "kafscale.upsert.inserted"
SUMMARY_UPSERT_UPDATED = "kafscale.upsert.updated"
SUMMARY_UPSERT_DELETED = "kafscale.upsert.deleted"
SUMMARY_UPSERT_FILES_REWRITTEN = "kafscale.upsert.files-rewritten"
SUMMARY_UPSERT_BYTES_REWRITTEN = "kafscale.upsert.bytes-rewritten"
SUMMARY_UPSERT_BYTES_LOCATED = "kafscale.upsert.bytes-located"

AUTO_COPY_ON_WRITE_MAX_FILES = 4
"""`upsert.write: auto` rewrites (copy-on-write) at most this many candidate files..."""
AUTO_COPY_ON_WRITE_MAX_BYTES = 32 * 1024 * 1024
"""...of at most these bytes in all; beyond either, it writes position deletes (merge-on-read)."""

WRITE_MODE_PROPERTIES = ("write.update.mode", "write.delete.mode", "write.merge.mode")
"""The table properties other writers (Spark, Trino) follow for row-level changes."""


def choose_write(policy: UpsertWrite, candidate_sizes: Sequence[int]) -> UpsertWrite:
    """How a run removes the rows its changed keys replace, given `upsert.write` and the sizes of the
    table files that may hold a changed key: `copy-on-write` or `merge-on-read`, never `auto`.

    `auto` rewrites when the candidates are few and small (`AUTO_COPY_ON_WRITE_MAX_FILES`,
    `AUTO_COPY_ON_WRITE_MAX_BYTES`: the rewrite then costs about what its delete files would cost
    readers until the next compaction), and writes position deletes otherwise, so a run's cost
    follows its changes, not the table."""
    if policy is not UpsertWrite.AUTO:
        return policy
    few = len(candidate_sizes) <= AUTO_COPY_ON_WRITE_MAX_FILES
    if few and sum(candidate_sizes) <= AUTO_COPY_ON_WRITE_MAX_BYTES:
        return UpsertWrite.COPY_ON_WRITE
    return UpsertWrite.MERGE_ON_READ


def write_mode_properties(policy: UpsertWrite) -> dict[str, str]:
    """The table's `write.update.mode`, `write.delete.mode`, `write.merge.mode` for `upsert.write`:
    `copy-on-write` only when every run rewrites; a table `auto` lands in may hold delete files, so
    other writers treat it as `merge-on-read`."""
    mode = "copy-on-write" if policy is UpsertWrite.COPY_ON_WRITE else "merge-on-read"
    return dict.fromkeys(WRITE_MODE_PROPERTIES, mode)


@dataclass(frozen=True)
class LocatedIn:
    """The table version an upsert commit's changes were located in (its snapshot id; None: the table
    had no snapshot). The commit lands only while it stands: every snapshot after it is a compaction
    or adds no data file, and every file the commit removes is still in the table."""

    snapshot_id: int | None


@dataclass(frozen=True)
class UpsertCounts:
    """What a run did to an upsert table: keys inserted (new), updated (a row replaced), deleted (a
    row removed), and the table files rewritten to do it (their bytes, as the table knew them).

    A deleted key the table did not hold, and a run's row superseded within the run, count nowhere.
    """

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    files_rewritten: int = 0
    bytes_rewritten: int = 0
    delete_files: int = 0
    """Position delete files written (merge-on-read)."""
    bytes_located: int = 0
    """Bytes read from table files to locate the changed keys (key columns only)."""

    def plus(self, other: UpsertCounts) -> UpsertCounts:
        """Both counts added."""
        return UpsertCounts(
            inserted=self.inserted + other.inserted,
            updated=self.updated + other.updated,
            deleted=self.deleted + other.deleted,
            files_rewritten=self.files_rewritten + other.files_rewritten,
            bytes_rewritten=self.bytes_rewritten + other.bytes_rewritten,
            delete_files=self.delete_files + other.delete_files,
            bytes_located=self.bytes_located + other.bytes_located,
        )

    def to_json(self) -> dict[str, int]:
        """A JSON-ready dict (what `status --json` shows)."""
        return {
            "inserted": self.inserted,
            "updated": self.updated,
            "deleted": self.deleted,
            "files_rewritten": self.files_rewritten,
            "bytes_rewritten": self.bytes_rewritten,
            "delete_files": self.delete_files,
            "bytes_located": self.bytes_located,
        }

    def summary(self) -> dict[str, str]:
        """The snapshot summary keys (`kafscale.upsert.*`): the audit trail `status` reads."""
        return {
            SUMMARY_UPSERT_INSERTED: str(self.inserted),
            SUMMARY_UPSERT_UPDATED: str(self.updated),
            SUMMARY_UPSERT_DELETED: str(self.deleted),
            SUMMARY_UPSERT_FILES_REWRITTEN: str(self.files_rewritten),
            SUMMARY_UPSERT_BYTES_REWRITTEN: str(self.bytes_rewritten),
            SUMMARY_UPSERT_BYTES_LOCATED: str(self.bytes_located),
        }


def upsert_counts_of(summary: Mapping[str, str]) -> UpsertCounts | None:
    """An upsert snapshot's counts from its summary (None when it has none); a value that is not a
    count reads as 0: the summary is an audit trail, never a reason to fail a status."""
    if SUMMARY_UPSERT_INSERTED not in summary:
        return None

    def count(key: str) -> int:
        text = summary.get(key) or ""
        return int(text) if text.isdigit() else 0

    return UpsertCounts(
        inserted=count(SUMMARY_UPSERT_INSERTED),
        updated=count(SUMMARY_UPSERT_UPDATED),
        deleted=count(SUMMARY_UPSERT_DELETED),
        files_rewritten=count(SUMMARY_UPSERT_FILES_REWRITTEN),
        bytes_rewritten=count(SUMMARY_UPSERT_BYTES_REWRITTEN),
        delete_files=count("added-delete-files"),
        bytes_located=count(SUMMARY_UPSERT_BYTES_LOCATED),
    )
