"""The checkpoint store kept in step with the tables' records (the table's record always wins).

The commit step advances the store to what the table records after a commit (`advance_store`); a
plan refused as stale repairs it (`repair_store`); planning reads both and repairs the store under
the lease (`reconciled_offsets`). Every write here is fenced by the topic's lease and idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kafscale_iceberg.domain.commits import Reconciliation, reconcile
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import CommittedOffsets, OffsetUpdate
from kafscale_iceberg.domain.runs import NO_OFFSET, RunPlan, RunResult
from kafscale_iceberg.exceptions import KafscaleIcebergError
from kafscale_iceberg.ports import CheckpointStore, TableCommitter
from kafscale_iceberg.services.commits.verified_commit import read_state_or_empty

logger = logging.getLogger(__name__)


def reconciled_offsets(
    tables: TableCommitter,
    checkpoints: CheckpointStore,
    topic: str,
    table: str,
    *,
    lease: LeaseGrant | None = None,
) -> Reconciliation:
    """The topic's committed offsets for planning: the table's record wins over the checkpoint store.

    A table that never recorded the topic adopts the store's offsets (Go-processor handover). A
    store behind the table (a commit that crashed before its offset write) is repaired when
    `lease` is given (fenced). A store AHEAD of the table means an offset moved without a commit:
    it is logged as an error and, with `lease`, set back to the table's value - re-ingesting a
    range can't lose records, trusting the store could. Without `lease` nothing is written.
    """
    if lease is not None and lease.topic != topic:
        raise ValueError(f"the lease given is for topic {lease.topic!r}, not {topic!r}")
    marker = read_state_or_empty(tables, table, topic).marker
    stored = checkpoints.load_committed_offsets(topic)
    reconciliation = reconcile(topic, marker, offsets_of(stored))
    if reconciliation.store_ahead:
        logger.error(
            "checkpoint store is ahead of the table: offsets moved without an Iceberg commit; "
            "the table's offsets are used",
            extra={"topic": topic, "table": table, "ahead": dict(reconciliation.store_ahead)},
        )
    if lease is None:
        return reconciliation
    if reconciliation.store_behind:
        checkpoints.commit_offsets(lease, repairs(stored, reconciliation.store_behind))
        logger.warning(
            "topic %s: the checkpoint store caught up with the table's offsets %s (a commit's offset "
            "write had not landed)",
            topic,
            _moves(reconciliation.store_behind),
            extra={"topic": topic, "repaired": dict(reconciliation.store_behind)},
        )
    if reconciliation.store_ahead:
        checkpoints.reset_offsets(lease, repairs(stored, reconciliation.store_ahead))
        logger.error(
            "topic %s: the checkpoint store set back to the table's offsets %s",
            topic,
            _moves(reconciliation.store_ahead),
            extra={"topic": topic, "reset": dict(reconciliation.store_ahead)},
        )
    return reconciliation


def repair_store(
    tables: TableCommitter, checkpoints: CheckpointStore, plan: RunPlan, lease: LeaseGrant
) -> dict[int, int]:
    """Set the store to the table's offsets after a refused (stale) plan, fenced by the run's lease.

    A crash between the Iceberg commit and the offset write leaves the store behind the table; every
    plan made from it would be refused forever. Repairing here makes a stale plan cost one wasted
    run. Best effort: a failure is logged (the refusal stands and the next refusal repairs).
    """
    try:
        reconciliation = reconciled_offsets(
            tables, checkpoints, plan.topic, plan.anchor.identifier, lease=lease
        )
    except KafscaleIcebergError as exc:
        logger.warning(
            "could not repair the checkpoint store after a refused plan",
            extra={"topic": plan.topic, "run_id": plan.run_id, "problem": str(exc)},
        )
        return {}
    changed = {**reconciliation.store_behind, **reconciliation.store_ahead}
    return {partition: table for partition, (_store, table) in changed.items()}


def advance_store(
    checkpoints: CheckpointStore,
    lease: LeaseGrant,
    result: RunResult,
    targets: Mapping[int, int],
    ends: Mapping[int, int],
) -> dict[int, int]:
    """Move the store up to the table's offsets for the run's partitions (fenced); never down here."""
    current = checkpoints.load_committed_offsets(lease.topic)
    newest = {o.partition: o.max_timestamp_ms for o in result.partitions if o.max_timestamp_ms is not None}
    updates: dict[int, OffsetUpdate] = {}
    for partition, target in sorted(targets.items()):
        stored = current.state(partition)
        stored_offset = NO_OFFSET if stored is None else stored.offset
        if stored_offset > target:
            logger.error(
                "checkpoint store is ahead of the table: an offset moved without a commit",
                extra={
                    "topic": lease.topic,
                    "partition": partition,
                    "store": stored_offset,
                    "table": target,
                },
            )
            continue
        if stored_offset == target:
            continue
        timestamp = newest.get(partition) if target == ends.get(partition) else None
        if timestamp is None:
            timestamp = 0 if stored is None else stored.last_timestamp_ms
        updates[partition] = OffsetUpdate(offset=target, last_timestamp_ms=timestamp)
    if updates:
        checkpoints.commit_offsets(lease, updates)
    return {p: u.offset for p, u in updates.items()}


def offsets_of(committed: CommittedOffsets) -> dict[int, int]:
    """Offset per partition of the checkpoint store's committed offsets."""
    return {p: s.offset for p, s in committed.states.items()}


def repairs(stored: CommittedOffsets, differences: Mapping[int, tuple[int, int]]) -> dict[int, OffsetUpdate]:
    """Store updates setting each differing partition to the table's offset (timestamps kept)."""
    return {
        partition: OffsetUpdate(offset=table_offset, last_timestamp_ms=stored_timestamp(stored, partition))
        for partition, (_store_offset, table_offset) in differences.items()
    }


def stored_timestamp(stored: CommittedOffsets, partition: int) -> int:
    """The store's last timestamp for `partition` (0 when none): kept when an offset is set back."""
    state = stored.state(partition)
    return 0 if state is None else state.last_timestamp_ms


def _moves(differences: Mapping[int, tuple[int, int]]) -> str:
    """`p0=19 (was -1), p1=7 (was 3)`: the table's offsets the store was set to, and what it held."""
    return ", ".join(f"p{p}={table} (was {store})" for p, (store, table) in sorted(differences.items()))
