"""Keyed upsert, copy-on-write: what one run changes in an upsert table, and how it is recorded.

A run of an upsert table ends in ONE Iceberg commit that replaces files and adds files:

1. **Resolve** (`dataplane/upsert_rewrite.py`): of the run's changes of a key - its new rows and its
   deleted keys - the last wins: by offset within its Kafka partition; a key met in several Kafka
   partitions of one run (its producer's partitioning changed) is decided by the higher partition.
2. **Locate** (`adapters/iceberg_upsert.py`): the table files at the verified snapshot that may hold
   a changed key, pruned by partition and by the key columns' bounds in the manifests; then only
   their key columns are read to find the files that really hold one.
3. **Rewrite**: each such file is written again without the rows of changed keys (same columns and
   field ids, a name derived from the run and the file it replaces); the run's own files lose the
   rows a later change of their key superseded.

The commit (`services/upsert_commit.py`) removes the replaced files and adds the rewritten ones and
the run's, with the offsets marker, through the verified loop: a table that moved meanwhile (a
compaction of the same files) is located and rewritten again on its new state, never overwritten.
Only plain data files are written, so every engine reads the table; the locate step is separate so
position deletes can later take the rewrite's place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafscale_iceberg.domain.runs import DataFile

SUMMARY_UPSERT_INSERTED = "kafscale.upsert.inserted"
SUMMARY_UPSERT_UPDATED = "kafscale.upsert.updated"
SUMMARY_UPSERT_DELETED = "kafscale.upsert.deleted"
SUMMARY_UPSERT_FILES_REWRITTEN = "kafscale.upsert.files-rewritten"
SUMMARY_UPSERT_BYTES_REWRITTEN = "kafscale.upsert.bytes-rewritten"


@dataclass(frozen=True)
class UpsertChange:
    """What a run changes in an upsert table: the files of its new rows and of its deleted keys, the
    key columns, and the run-scoped folder rewritten files go to."""

    key: tuple[str, ...]
    row_files: tuple[DataFile, ...]
    deleted_key_files: tuple[DataFile, ...]
    rewrite_uri: str


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

    def plus(self, other: UpsertCounts) -> UpsertCounts:
        """Both counts added."""
        return UpsertCounts(
            inserted=self.inserted + other.inserted,
            updated=self.updated + other.updated,
            deleted=self.deleted + other.deleted,
            files_rewritten=self.files_rewritten + other.files_rewritten,
            bytes_rewritten=self.bytes_rewritten + other.bytes_rewritten,
        )

    def to_json(self) -> dict[str, int]:
        """A JSON-ready dict (what `status --json` shows)."""
        return {
            "inserted": self.inserted,
            "updated": self.updated,
            "deleted": self.deleted,
            "files_rewritten": self.files_rewritten,
            "bytes_rewritten": self.bytes_rewritten,
        }

    def summary(self) -> dict[str, str]:
        """The snapshot summary keys (`kafscale.upsert.*`): the audit trail `status` reads."""
        return {
            SUMMARY_UPSERT_INSERTED: str(self.inserted),
            SUMMARY_UPSERT_UPDATED: str(self.updated),
            SUMMARY_UPSERT_DELETED: str(self.deleted),
            SUMMARY_UPSERT_FILES_REWRITTEN: str(self.files_rewritten),
            SUMMARY_UPSERT_BYTES_REWRITTEN: str(self.bytes_rewritten),
        }


@dataclass(frozen=True)
class UpsertRewrite:
    """A run's change made into files on one table state: the files to add (the run's, some rewritten
    without superseded rows, and the table's files rewritten), the table's files they replace."""

    added: tuple[DataFile, ...]
    removed: tuple[str, ...]
    counts: UpsertCounts


def upsert_counts_of(summary: Mapping[str, str]) -> UpsertCounts | None:
    """An upsert snapshot's counts from its summary (None when it has none); a value that is not a
    count reads as 0: the summary is an audit trail, never a reason to fail a status."""
    if SUMMARY_UPSERT_INSERTED not in summary:
        return None

    def count(key: str) -> int:
        text = summary.get(key, "")
        return int(text) if text.isdigit() else 0

    return UpsertCounts(
        inserted=count(SUMMARY_UPSERT_INSERTED),
        updated=count(SUMMARY_UPSERT_UPDATED),
        deleted=count(SUMMARY_UPSERT_DELETED),
        files_rewritten=count(SUMMARY_UPSERT_FILES_REWRITTEN),
        bytes_rewritten=count(SUMMARY_UPSERT_BYTES_REWRITTEN),
    )
