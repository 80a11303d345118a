"""A topic's history in a table: its snapshots, the offsets each committed, the snapshot holding an offset.

Read from the `kafscale.*` snapshot summaries the commit step writes (`domain/commits.py`): each run's
snapshot carries `kafscale.start-offsets` (exclusive) and `kafscale.offsets` (inclusive) per partition,
so a snapshot committed offsets `(start, end]` of each partition where `end > start`. An offset reset's
snapshot (`kafscale.reset`) carries the offsets before and after: it removed every row after `end`.

Which snapshot *holds* an offset: the oldest snapshot of the current lineage that committed it, after the
last reset that removed it (a reset then a re-ingest makes the re-ingesting snapshot the answer). The
answer is about the commit, not the row: a record that went to the dead-letter table, or an offset no
segment held (a gap), was committed by that snapshot but has no row in the data table. Snapshots
expired by `maintain` are no longer in the table, so the history only goes back as far as it retains.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafscale_iceberg.domain.commits import (
    SUMMARY_OFFSETS,
    SUMMARY_RESET,
    SUMMARY_RUN_ID,
    SUMMARY_START_OFFSETS,
    decode_offsets,
)
from kafscale_iceberg.exceptions import TableMarkerError


@dataclass(frozen=True)
class OffsetRange:
    """Offsets `(start_exclusive, end_inclusive]` of one partition a snapshot committed (or, for a
    reset, the offsets it moved from `start_exclusive` back to `end_inclusive`)."""

    partition: int
    start_exclusive: int
    end_inclusive: int

    def holds(self, offset: int) -> bool:
        """Whether `offset` is in the range."""
        return self.start_exclusive < offset <= self.end_inclusive

    def to_json(self) -> dict[str, int]:
        """A JSON-ready dict."""
        return {"partition": self.partition, "first": self.start_exclusive + 1, "last": self.end_inclusive}


@dataclass(frozen=True)
class TopicSnapshot:
    """One snapshot of a table committed for a topic."""

    table: str
    snapshot_id: int
    timestamp_ms: int
    run_id: str | None
    ranges: tuple[OffsetRange, ...]
    """Per partition, what the snapshot committed (only partitions it moved)."""
    reset: bool = False
    """An explicit offset reset: `ranges` are rewinds, rows after each range's end were removed."""

    @classmethod
    def from_summary(
        cls, table: str, snapshot_id: int, timestamp_ms: int, summary: Mapping[str, str]
    ) -> TopicSnapshot:
        """A snapshot from its summary; a summary without offsets gives no ranges (never an error:
        the history is an audit view)."""
        start = _offsets(summary, SUMMARY_START_OFFSETS, table)
        end = _offsets(summary, SUMMARY_OFFSETS, table)
        reset = summary.get(SUMMARY_RESET) == "true"
        ranges: list[OffsetRange] = []
        for partition in sorted(end):
            before, after = start.get(partition, -1), end[partition]
            if reset and after < before:
                ranges.append(OffsetRange(partition, after, before))
            elif not reset and after > before:
                ranges.append(OffsetRange(partition, before, after))
        return cls(
            table=table,
            snapshot_id=snapshot_id,
            timestamp_ms=timestamp_ms,
            run_id=summary.get(SUMMARY_RUN_ID),
            ranges=tuple(ranges),
            reset=reset,
        )

    def range_of(self, partition: int) -> OffsetRange | None:
        """The snapshot's range of `partition` (None: it did not move it)."""
        return next((r for r in self.ranges if r.partition == partition), None)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "table": self.table,
            "snapshot_id": self.snapshot_id,
            "timestamp_ms": self.timestamp_ms,
            "run_id": self.run_id,
            "reset": self.reset,
            "ranges": [r.to_json() for r in self.ranges],
        }


def _offsets(summary: Mapping[str, str], key: str, table: str) -> dict[int, int]:
    text = summary.get(key)
    if not text:
        return {}
    try:
        return decode_offsets(text, table=table, key=key)
    except TableMarkerError:
        return {}


def snapshot_holding(snapshots: Iterable[TopicSnapshot], partition: int, offset: int) -> TopicSnapshot | None:
    """The oldest snapshot (of `snapshots`, oldest first) that committed `offset` of `partition` after
    the last reset that removed it; None when no retained snapshot did."""
    holding: TopicSnapshot | None = None
    for snapshot in snapshots:
        found = snapshot.range_of(partition)
        if found is None or not found.holds(offset):
            continue
        if snapshot.reset:
            holding = None
        elif holding is None:
            holding = snapshot
    return holding


@dataclass(frozen=True)
class TableHistory:
    """A table's snapshots committed for a topic, oldest first, and the metadata file it was read at."""

    table: str
    metadata_location: str
    snapshots: tuple[TopicSnapshot, ...]


@dataclass(frozen=True)
class AsOfQueries:
    """SQL reading a table as of one snapshot, filtered to one record, in three engines."""

    spark: str
    trino: str
    duckdb: str

    def to_json(self) -> dict[str, str]:
        """A JSON-ready dict."""
        return {"spark": self.spark, "trino": self.trino, "duckdb": self.duckdb}


def as_of_queries(
    table: str, snapshot_id: int, metadata_location: str, partition: int, offset: int
) -> AsOfQueries:
    """The SQL reading record (`partition`, `offset`) of `table` as of `snapshot_id`.

    Spark and Trino name the table through their Iceberg catalog (here `<catalog>`, the name the engine
    gives the catalog); DuckDB's `iceberg_scan` reads the metadata file the table had when asked.
    """
    where = f'WHERE "partition" = {partition} AND "offset" = {offset}'
    quoted = metadata_location.replace("'", "''")
    return AsOfQueries(
        spark=f"SELECT * FROM <catalog>.{table} VERSION AS OF {snapshot_id} "
        f"WHERE `partition` = {partition} AND `offset` = {offset}",
        trino=f"SELECT * FROM <catalog>.{table} FOR VERSION AS OF {snapshot_id} {where}",
        duckdb=f"SELECT * FROM iceberg_scan('{quoted}', snapshot_from_id => {snapshot_id}) {where}",
    )
