"""Table maintenance values and rules: health, what expiry keeps, outcomes of a maintenance pass.

Pure: no I/O. The adapter (`adapters/iceberg_maintenance.py`) reads and writes the tables; the
service (`services/maintenance.py`) decides when and in which order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

LAST_MAINTENANCE_PROPERTY = "kafscale.maintenance.last-ms"
"""Table property: when `maintain` last expired snapshots of the table (Unix ms)."""
LAST_COMPACTION_PROPERTY = "kafscale.compaction.last-ms"
"""Table property: when `maintain` last committed a compaction of the table (Unix ms)."""
FILES_BASELINE_PROPERTY = "kafscale.maintenance.files-baseline"
"""Table property: the data files the table had when maintenance last passed (after its compaction);
the small-file trigger counts the files added since (`services/compaction_trigger.py`)."""
SUMMARY_COMPACTION = "kafscale.compaction"
"""Snapshot summary key of a compaction's `overwrite` snapshot (`true`)."""


def total_data_files(summary: Mapping[str, str] | None) -> int:
    """A snapshot summary's `total-data-files`: the table's data files at that snapshot (0 without a
    snapshot, or a summary that does not say)."""
    return _count((summary or {}).get("total-data-files"))


def files_baseline(properties: Mapping[str, str]) -> int:
    """`kafscale.maintenance.files-baseline` of a table's properties (0: maintenance never passed)."""
    return _count(properties.get(FILES_BASELINE_PROPERTY))


def _count(value: str | None) -> int:
    return int(value) if value is not None and value.isdigit() else 0


@dataclass(frozen=True)
class DeleteFolding:
    """When compaction folds a table's position deletes into its data files (`maintenance.max_delete_ratio`,
    `maintenance.max_delete_files`): a data file whose deleted share (its delete files' rows, an upper
    bound) passes the ratio, or every data file with deletes of a partition holding at least that many
    delete files, is rewritten with its deletes applied, and the delete files no remaining data file
    needs leave the table."""

    max_delete_ratio: float = 0.3
    max_delete_files: int = 20


@dataclass(frozen=True)
class TableHealth:
    """What a table looks like now: its current snapshot's files and manifests, its snapshots."""

    table: str
    files: int
    small_files: int
    data_bytes: int
    rows: int
    snapshots: int
    manifests: int
    manifest_bytes: int
    last_maintenance_ms: int | None = None
    last_compaction_ms: int | None = None
    delete_files: int = 0
    """Position delete files the current snapshot's data files carry (merge-on-read upserts)."""
    data_location: str = ""
    """Where the table keeps its data files (`write.data.path`, else `{location}/data`); this
    product's own files are under `{data_location}/kafscale/` (`domain/table_locations.py`)."""
    managed_compaction: bool = False
    """The catalog compacts the table itself (Amazon S3 Tables' compaction, on unless turned off):
    `maintain` leaves compaction to it."""


@dataclass(frozen=True)
class CompactionOutcome:
    """What one compaction pass of a table did."""

    table: str
    committed: bool
    files_removed: int = 0
    files_added: int = 0
    rows: int = 0
    attempts: int = 0
    abandoned: bool = False
    delete_files_removed: int = 0
    """The files it replaces left the table meanwhile (e.g. a reset): nothing committed."""
    version: str | None = None
    """The table's metadata file its commit wrote (None: nothing committed)."""
    earlier_versions: tuple[str, ...] = ()
    """The metadata files before `version` its metadata log keeps (the versions it follows)."""


@dataclass(frozen=True)
class ExpiryOutcome:
    """What snapshot expiry of a table did (or, in a dry run, would do)."""

    table: str
    expired: tuple[int, ...]
    kept: int
    metadata_files_deleted: int = 0
    conflicted: bool = False


@dataclass(frozen=True)
class OrphanFile:
    """A file under the product's run-scoped prefixes that no snapshot references."""

    uri: str
    size_bytes: int
    modified_ms: int


def snapshots_to_expire(
    snapshots: Sequence[tuple[int, int, str | None]],
    *,
    current: int | None,
    protected: Iterable[int],
    topics: Iterable[str],
    older_than_ms: int,
    keep: int,
) -> list[int]:
    """The snapshot ids to expire, oldest first, from `(id, timestamp_ms, kafscale.topic or None)`.

    Kept: the current snapshot and every branch/tag head (`protected`); the newest `keep`; those at
    or after `older_than_ms`; and for each topic the table records offsets for, the newest snapshot
    whose summary names it (the last run's audit record, which `status` shows as its last commit).
    """
    ordered = sorted(snapshots, key=lambda s: (s[1], s[0]))
    keep_ids = {current, *protected} - {None}
    keep_ids.update(s[0] for s in ordered[-keep:] if keep > 0)
    for topic in topics:
        newest = [s for s in ordered if s[2] == topic]
        if newest:
            keep_ids.add(newest[-1][0])
    return [s[0] for s in ordered if s[0] not in keep_ids and s[1] < older_than_ms]
