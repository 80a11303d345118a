"""Setting a topic's committed offsets on purpose: the reset behind "re-ingest a range".

Since the table's marker wins over the checkpoint store, a reset of the store alone would be undone.
`OffsetReset.reset_offsets` gives each table (the table, then its dead-letter table) ONE Iceberg
commit that deletes its rows after the new offsets, records the new offsets and drops the quarantined
ranges lying after them (summary `kafscale.reset`) - verified before every attempt like every table
write (`services.commits.verified_commit`) - then sets the store, fenced by the lease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Unpack

from kafscale_iceberg.domain.commits import (
    QuarantinedRange,
    Standing,
    TableCommit,
    TableMarker,
    TableState,
    ranges_after,
    ranges_straddling,
)
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.runs import NO_OFFSET
from kafscale_iceberg.domain.tickets import join_uri
from kafscale_iceberg.exceptions import OffsetResetRefusedError, TableMissingError
from kafscale_iceberg.ports import CheckpointStore, TableCommitter
from kafscale_iceberg.services.commits.checkpoint_sync import offsets_of, stored_timestamp
from kafscale_iceberg.services.commits.verified_commit import (
    CommitRetryOptions,
    TableWrite,
    TableWriter,
    commit_verified,
    read_state_if_exists,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResetWrite(TableWrite):
    """One table's reset to `offsets`: delete the rows after them, record them (done when recorded)."""

    offsets: Mapping[int, int]
    adopted: Mapping[int, int]
    """The store's offsets: a table that never recorded the topic records them for its other partitions."""
    lease: LeaseGrant
    checkpoints: CheckpointStore
    rewrite_location: str | None = None
    """Where the files the delete rewrites go (the reset's run folder under the table's data prefix)."""
    action: ClassVar[str] = "offset reset"

    def verify(self, state: TableState) -> Standing:
        """COMMITTED when the table records the new offsets already; `OffsetResetRefusedError` when the
        reset would cut a quarantined range. READY renews the lease (a delete may rewrite files for a
        while), so `LeaseLostError` stops the reset before its commit."""
        if is_at_offsets(state, self.offsets):
            return Standing.COMMITTED
        refuse_cut_ranges(self.table, self.topic, state.marker.quarantined, self.offsets)
        self.checkpoints.renew_lease(self.lease)
        return Standing.READY

    def build(self, state: TableState) -> TableCommit:
        current = dict(state.marker.offsets) if state.marker.offsets is not None else dict(self.adopted)
        dropped = set(ranges_after(state.marker.quarantined, self.offsets))
        return TableCommit(
            topic=self.topic,
            run_id=self.run_id,
            file_uris=(),
            start_offsets={p: current.get(p, NO_OFFSET) for p in self.offsets},
            end_offsets=dict(self.offsets),
            marker_after=TableMarker(
                offsets={**current, **self.offsets},
                run_id=state.marker.run_id,
                quarantined=tuple(r for r in state.marker.quarantined if r not in dropped),
            ),
            reset=True,
            delete_after=dict(self.offsets),
            rewrite_location=self.rewrite_location,
        )

    def landed(self, commit: TableCommit, after: TableState) -> None:
        logger.warning(
            "committed offsets reset in the table; the rows after them deleted",
            extra={
                "table": self.table,
                "topic": self.topic,
                "before": dict(commit.start_offsets),
                "after": dict(self.offsets),
                "snapshot_id": after.snapshot_id,
            },
        )


class OffsetReset(TableWriter):
    """Explicit offset resets over a `TableCommitter` and a `CheckpointStore` (see the module docstring)."""

    def __init__(
        self,
        tables: TableCommitter,
        checkpoints: CheckpointStore,
        *,
        rewrite_prefix: Callable[[str], str | None] | None = None,
        **retry: Unpack[CommitRetryOptions],
    ) -> None:
        """`rewrite_prefix(table)` is the product's data prefix of a table: a reset writes the files it
        rewrites under `{prefix}/{reset's lease run id}/`, where orphan cleanup finds them (and spares
        them while the reset holds the lease); None (or a None answer): the table's own data location."""
        super().__init__(tables, checkpoints, **retry)
        self._rewrite_prefix = rewrite_prefix

    def _rewrite_location(self, table: str, run_id: str) -> str | None:
        prefix = self._rewrite_prefix(table) if self._rewrite_prefix else None
        return None if prefix is None else join_uri(prefix, run_id)

    def reset_offsets(
        self, topic: str, tables: tuple[str, ...], offsets: Mapping[int, int], lease: LeaseGrant
    ) -> dict[int, int]:
        """Set the topic's committed offsets on purpose (backwards included) and delete the rows after them.

        Each table in `tables` (the table, then its dead-letter table) gets ONE Iceberg commit that
        deletes its rows of each partition whose `offset` is after the new one, records the new
        offsets and drops the quarantined ranges lying after them (summary `kafscale.reset`); then
        the store is set, fenced by `lease`. A table that never recorded the topic (the Go
        processor's) records the store's offsets for its other partitions, as its first commit
        would. A table already at the new offsets is left alone, so a rerun after a crash at any
        point finishes the job and deletes nothing more: idempotent.

        Raises `OffsetResetRefusedError` (nothing written) when a new offset falls inside a
        quarantined range, `LeaseLostError`, `CommitConflictError` (transient: the table kept
        changing), and the adapters' errors. Returns the offsets now committed.
        """
        if lease.topic != topic:
            raise ValueError(f"the lease given is for topic {lease.topic!r}, not {topic!r}")
        self._checkpoints.renew_lease(lease)
        stored = self._checkpoints.load_committed_offsets(topic)
        self.check_reset(topic, tables, offsets)  # every refusal before any write
        for table in tables:
            write = ResetWrite(
                table=table,
                topic=topic,
                run_id=lease.run_id,
                offsets=dict(offsets),
                adopted=offsets_of(stored),
                lease=lease,
                checkpoints=self._checkpoints,
                rewrite_location=self._rewrite_location(table, lease.run_id),
            )
            try:
                commit_verified(self._tables, write, self._retry)
            except TableMissingError:
                continue  # no table, no rows and no marker to reset
        self._checkpoints.reset_offsets(
            lease,
            {
                p: OffsetUpdate(offset=o, last_timestamp_ms=stored_timestamp(stored, p))
                for p, o in offsets.items()
            },
        )
        return dict(offsets)

    def check_reset(self, topic: str, tables: tuple[str, ...], offsets: Mapping[int, int]) -> None:
        """Raise `OffsetResetRefusedError` if `reset_offsets` would refuse these offsets now. Reads only.

        Refused: an offset inside a quarantined range recorded in one of the tables (`first <=
        offset < last`): the range's dead-letter row would stay while the rest of its segment is
        re-ingested. Resets to just before a range, or to its end, are accepted.
        """
        for table in tables:
            state = read_state_if_exists(self._tables, table, topic)
            if state is not None:
                refuse_cut_ranges(table, topic, state.marker.quarantined, offsets)

    def count_rows_after(self, table: str, offsets: Mapping[int, int]) -> int | None:
        """How many rows of `table` a reset to `offsets` would delete; None when the table does not exist."""
        try:
            return self._tables.count_rows(table, offsets)
        except TableMissingError:
            return None


def is_at_offsets(state: TableState, offsets: Mapping[int, int]) -> bool:
    """True when the table records exactly `offsets` for their partitions (a reset already made)."""
    recorded = state.marker.offsets
    return recorded is not None and all(recorded.get(p, NO_OFFSET) == o for p, o in offsets.items())


def refuse_cut_ranges(
    table: str, topic: str, quarantined: tuple[QuarantinedRange, ...], offsets: Mapping[int, int]
) -> None:
    """Raise `OffsetResetRefusedError` when a reset to `offsets` would cut a quarantined range in two."""
    cut = ranges_straddling(quarantined, offsets)
    if cut:
        detail = "; ".join(
            f"partition {r.partition}: a reset to offset {offsets[r.partition]} (re-ingesting from "
            f"{offsets[r.partition] + 1}) cuts quarantined segment {r.segment_key} [{r.first_offset}, "
            f"{r.last_offset}] recorded in {table!r}; re-ingest from offset {r.first_offset} (the whole "
            f"segment) or from {r.last_offset + 1} instead"
            for r in cut
        )
        raise OffsetResetRefusedError(topic, detail)
