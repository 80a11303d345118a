"""History: a topic's snapshots in a table, and the snapshot holding an offset (`kafscale-iceberg history`).

Reads only the table's metadata (one catalog load, no data file, no checkpoint store): each snapshot
committed for the topic with its run id, time and per-partition offset range, from the `kafscale.*`
summaries (`domain/history.py` says how a range and "holds" are read). The table is the topic's anchor
unless one is named (a dead-letter table, a routed table: each records the runs that gave it rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from kafscale_iceberg.config import KafscaleConfig
from kafscale_iceberg.domain.history import (
    AsOfQueries,
    TableHistory,
    TopicSnapshot,
    as_of_queries,
    snapshot_holding,
)
from kafscale_iceberg.exceptions import OffsetNotInHistoryError, UnmappedTopicError
from kafscale_iceberg.ports import TableHistoryReader


@dataclass(frozen=True)
class OffsetLocation:
    """The snapshot holding one offset, and the SQL reading the table as of it."""

    table: str
    partition: int
    offset: int
    snapshot: TopicSnapshot
    queries: AsOfQueries

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "table": self.table,
            "partition": self.partition,
            "offset": self.offset,
            "snapshot": self.snapshot.to_json(),
            "sql": self.queries.to_json(),
        }


class HistoryService:
    """Answers `history`: reads the table's metadata only."""

    def __init__(self, config: KafscaleConfig, tables: TableHistoryReader) -> None:
        self._config = config
        self._tables = tables

    def history(self, topic: str, table: str | None = None) -> TableHistory:
        """`topic`'s snapshots in `table` (default: its anchor), oldest first.

        Raises `UnmappedTopicError`, `TableMissingError`, or the catalog's errors.
        """
        return self._tables.topic_history(self._table(topic, table), topic)

    def locate(self, topic: str, partition: int, offset: int, table: str | None = None) -> OffsetLocation:
        """The first snapshot of `table` (default: the anchor) holding `offset` of `partition`.

        Raises `OffsetNotInHistoryError` when no retained snapshot committed it (not yet committed, or
        its snapshot expired), and what `history` raises.
        """
        history = self.history(topic, table)
        snapshot = snapshot_holding(history.snapshots, partition, offset)
        if snapshot is None:
            raise OffsetNotInHistoryError(topic, history.table, partition, offset, _span(history, partition))
        return OffsetLocation(
            table=history.table,
            partition=partition,
            offset=offset,
            snapshot=snapshot,
            queries=as_of_queries(
                history.table, snapshot.snapshot_id, history.metadata_location, partition, offset
            ),
        )

    def _table(self, topic: str, table: str | None) -> str:
        anchor = self._config.anchor_table(topic)
        if anchor is None:
            raise UnmappedTopicError(f"topic {topic!r} has no mapping in {self._config.source}")
        return table or anchor


def _span(history: TableHistory, partition: int) -> str:
    """What the retained snapshots committed of `partition`, for the error."""
    ranges = [s.range_of(partition) for s in history.snapshots if not s.reset]
    held = [r for r in ranges if r is not None]
    if not held:
        return f"no retained snapshot committed partition {partition}"
    first = min(r.start_exclusive for r in held) + 1
    last = max(r.end_inclusive for r in held)
    return f"the retained snapshots committed offsets {first}..{last} of partition {partition}"
