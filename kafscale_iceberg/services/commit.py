"""The commit step ("the final step"): a finished run's files into Iceberg exactly once, then offsets.

`CommitService.commit_run(plan, result, lease)`:

1. Refuse a result that can never be committed (failed, or not this plan's) and check the lease is
   still ours (renewing it): a committer without the lease writes nothing.
2. Read what the table records for the topic (`kafscale.offsets.<topic>`; a table that never recorded
   the topic - new, or written by the KafScale Go processor - adopts the checkpoint store's offsets).
   Every run partition at or past its end: the run is in already, skip to 4. Any partition not
   exactly at the run's start: refuse (`OffsetMismatchError`), nothing written.
3. Create/evolve the tables, then commit the dead-letter files (if any) to the dead-letter table,
   then the data files to the table: ONE Iceberg commit per table, each carrying its marker. Each
   commit is built on the state just verified; when the table changed meanwhile, or the outcome is
   unknown, the state is read again and verified again (already in? still at the start?) before
   another attempt - never a blind retry.
4. Advance the checkpoint store's offsets to what the table records (fenced by the lease), then
   release the lease.

Any step may crash; running `commit_run` again with the same plan, result and lease finishes the
job and duplicates nothing. See docs/architecture.md, "The commit step".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafscale_iceberg.domain.anomalies import OffsetAnomalies, offset_anomalies
from kafscale_iceberg.domain.commits import (
    QuarantinedRange,
    Reconciliation,
    Standing,
    TableCommit,
    TableMarker,
    TableSpec,
    TableState,
    advance_offsets,
    ranges_after,
    ranges_straddling,
    reconcile,
    stand_dead_letters,
    stand_run,
)
from kafscale_iceberg.domain.field_ids import TableFieldIds, TopicFieldIds
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import CommittedOffsets, OffsetUpdate
from kafscale_iceberg.domain.runs import NO_OFFSET, DataFile, RunPlan, RunResult, RunStatus
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, table_fields
from kafscale_iceberg.exceptions import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    DeadLetterAheadError,
    KafscaleIcebergError,
    OffsetMismatchError,
    OffsetResetRefusedError,
    RunNotCommittableError,
    TableChangedError,
    TableMissingError,
)
from kafscale_iceberg.ports import CheckpointStore, TableCommitter

if TYPE_CHECKING:
    from kafscale_iceberg.config import MappingConfig

logger = logging.getLogger(__name__)

DEFAULT_COMMIT_ATTEMPTS = 5


@dataclass(frozen=True)
class TablePolicy:
    """What the commit step may do to a mapping's table (`create_table_if_missing`, widening).

    The dead-letter table is created when missing whatever this says: it is this product's own table.
    """

    create_table_if_missing: bool = False
    allow_type_widening: bool = False

    @classmethod
    def from_mapping(cls, mapping: MappingConfig) -> TablePolicy:
        """The policy a config mapping sets (`create_table_if_missing`, `schema.allow_type_widening`)."""
        return cls(
            create_table_if_missing=mapping.create_table_if_missing,
            allow_type_widening=mapping.schema_.allow_type_widening,
        )


@dataclass(frozen=True)
class CommitOutcome:
    """What `commit_run` (or `commit_replay`) did."""

    run_id: str
    topic: str
    table_committed: bool
    """False when the table already held the run (a replayed commit)."""
    dead_letter_committed: bool
    table_snapshot_id: int | None
    offsets: Mapping[int, int]
    """The run partitions' committed offsets, as the table records them after the commit."""
    offsets_written: Mapping[int, int] = field(default_factory=dict)
    """What this call wrote to the checkpoint store (empty when it already agreed)."""
    lease_released: bool = False


class CommitService:
    """The commit step over a `TableCommitter` (Iceberg) and a `CheckpointStore` (etcd or SQLite).

    `attempts` bounds how many times one table commit is tried when the table keeps changing under
    it; each retry is preceded by re-reading and re-verifying the table's state, after a backoff
    (`backoff_s * attempt`, slept with `sleep`).
    """

    def __init__(
        self,
        tables: TableCommitter,
        checkpoints: CheckpointStore,
        *,
        attempts: int = DEFAULT_COMMIT_ATTEMPTS,
        backoff_s: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
        stranded_runs: Callable[[str, str], tuple[RunPlan, RunResult] | None] | None = None,
    ) -> None:
        """`stranded_runs(topic, run_id)` loads a run's plan and result (None when they are gone): with
        it, a run whose dead-letter commit landed and whose table commit never did is finished from
        its result when a later plan runs into it, instead of refusing that plan forever."""
        self._stranded_runs = stranded_runs
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self._tables = tables
        self._checkpoints = checkpoints
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._sleep = sleep

    # -- the commit step ---------------------------------------------------------------------------

    def commit_run(
        self, plan: RunPlan, result: RunResult, lease: LeaseGrant, policy: TablePolicy | None = None
    ) -> CommitOutcome:
        """Commit a succeeded run exactly once, advance the offsets, release the lease. Idempotent.

        Raises `RunNotCommittableError` (a failed result, or one of another plan), `LeaseLostError`
        (nothing written), `OffsetMismatchError` / `DeadLetterAheadError` (the table is not where
        the run starts; nothing written), `CommitConflictError` (transient: the table kept changing),
        and the adapters' catalog and checkpoint errors. After any error, calling again is safe.
        """
        policy = policy or TablePolicy()
        _check_committable(plan, result, lease)
        self._checkpoints.renew_lease(lease)
        try:
            try:
                return self._commit_run(plan, result, lease, policy)
            except DeadLetterAheadError as exc:
                if not self._finish_stranded(exc, lease, policy):
                    raise
                return self._commit_run(plan, result, lease, policy)  # refused: stale now, repaired
        except OffsetMismatchError as exc:
            if exc.repaired:
                raise
            repaired = self._repair_store(plan, lease)
            raise OffsetMismatchError(
                exc.table, exc.topic, exc.run_id, exc.mismatches, repaired=repaired
            ) from None

    def _finish_stranded(self, refusal: DeadLetterAheadError, lease: LeaseGrant, policy: TablePolicy) -> bool:
        """Commit the run whose dead letters are in but whose table commit never happened (a crash
        between the two), from its own plan and result, under `lease`; True if it is in now."""
        if self._stranded_runs is None or refusal.other_run_id is None:
            return False
        try:
            loaded = self._stranded_runs(refusal.topic, refusal.other_run_id)
            if loaded is None:
                return False
            plan, result = loaded
            _check_committable(plan, result, lease)
            self._commit_run(plan, result, lease, policy, release=False)
        except KafscaleIcebergError as exc:
            logger.warning(
                "could not finish the run stranded between its dead-letter and table commits",
                extra={"topic": refusal.topic, "stranded_run_id": refusal.other_run_id, "problem": str(exc)},
            )
            return False
        logger.warning(
            "finished a run stranded between its dead-letter and table commits",
            extra={"topic": refusal.topic, "stranded_run_id": refusal.other_run_id, "run_id": refusal.run_id},
        )
        return True

    def _repair_store(self, plan: RunPlan, lease: LeaseGrant) -> dict[int, int]:
        """Set the store to the table's offsets after a refused (stale) plan, fenced by the run's lease.

        A crash between the Iceberg commit and the offset write leaves the store behind the table; every
        plan made from it would be refused forever. Repairing here makes a stale plan cost one wasted
        run. Best effort: a failure is logged (the refusal stands and the next refusal repairs).
        """
        try:
            reconciliation = self.reconciled_offsets(plan.topic, plan.table.identifier, lease=lease)
        except KafscaleIcebergError as exc:
            logger.warning(
                "could not repair the checkpoint store after a refused plan",
                extra={"topic": plan.topic, "run_id": plan.run_id, "problem": str(exc)},
            )
            return {}
        changed = {**reconciliation.store_behind, **reconciliation.store_ahead}
        return {partition: table for partition, (_store, table) in changed.items()}

    def _commit_run(
        self,
        plan: RunPlan,
        result: RunResult,
        lease: LeaseGrant,
        policy: TablePolicy,
        *,
        release: bool = True,
    ) -> CommitOutcome:
        topic, run_id = plan.topic, plan.run_id
        starts, ends = plan.start_offsets(), plan.end_offsets()
        quarantined = _quarantined_ranges(result)
        store = _offsets_of(self._checkpoints.load_committed_offsets(topic))
        main = self._read_state(plan.table.identifier, topic)
        committed = _committed(main, store)
        verdict = stand_run(committed, starts, ends)
        if verdict.standing is Standing.MISMATCH:
            raise OffsetMismatchError(plan.table.identifier, topic, run_id, verdict.mismatches)

        table_committed = dead_letter_committed = False
        if verdict.standing is Standing.READY:
            if result.dead_letter_files or quarantined:
                self._check_dead_letters(plan)  # before any write, evolution included
            self._tables.ensure_table(_table_spec(plan, policy))
            # Quarantined ranges go to the dead-letter table's marker even without files, so a replay
            # finds them listed in both tables.
            if result.dead_letter_files or quarantined:
                dead_letter_committed = self._commit_dead_letters(plan, result, quarantined)
            main, table_committed = self._commit_verified(
                plan.table.identifier,
                plan,
                files=result.data_files,
                quarantined=quarantined,
                store=store,
                conversion_failures=result.counts.conversion_failures,
                anomalies=offset_anomalies(result),
            )
        else:
            logger.info("run already in the table; commit skipped", extra={"run_id": run_id, "topic": topic})

        offsets = {p: _committed(main, store).get(p, NO_OFFSET) for p in starts}
        written = self._advance_store(lease, result, offsets, ends)
        released = self._checkpoints.release_lease(lease) if release else False
        logger.info(
            "run committed",
            extra={
                "run_id": run_id,
                "topic": topic,
                "table": plan.table.identifier,
                "table_committed": table_committed,
                "dead_letter_committed": dead_letter_committed,
                "snapshot_id": main.snapshot_id,
                "data_files": len(result.data_files),
                "dead_letter_files": len(result.dead_letter_files),
                "offsets_written": written,
            },
        )
        return CommitOutcome(
            run_id=run_id,
            topic=topic,
            table_committed=table_committed,
            dead_letter_committed=dead_letter_committed,
            table_snapshot_id=main.snapshot_id,
            offsets=offsets,
            offsets_written=written,
            lease_released=released,
        )

    def _check_dead_letters(self, plan: RunPlan) -> None:
        state = self._read_state_if_exists(plan.dead_letter_table.identifier, plan.topic)
        if state is None:
            return
        offsets = dict(state.marker.offsets or {})
        standing, inside = stand_dead_letters(offsets, plan.start_offsets(), plan.end_offsets())
        if standing is Standing.MISMATCH:
            raise DeadLetterAheadError(state.table, plan.topic, plan.run_id, state.marker.run_id, inside)

    def _commit_dead_letters(
        self, plan: RunPlan, result: RunResult, quarantined: tuple[QuarantinedRange, ...]
    ) -> bool:
        self._tables.ensure_table(
            TableSpec(
                identifier=plan.dead_letter_table.identifier,
                fields=DEAD_LETTER_FIELDS,
                create_if_missing=True,
            )
        )
        _, committed = self._commit_verified(
            plan.dead_letter_table.identifier,
            plan,
            files=result.dead_letter_files,
            quarantined=quarantined,
            store=None,
        )
        return committed

    def _commit_verified(
        self,
        identifier: str,
        plan: RunPlan,
        *,
        files: tuple[DataFile, ...],
        quarantined: tuple[QuarantinedRange, ...],
        store: Mapping[int, int] | None,
        conversion_failures: Mapping[str, int] | None = None,
        anomalies: OffsetAnomalies | None = None,
    ) -> tuple[TableState, bool]:
        """Commit to one table unless it holds the run already; verify the state before every attempt.

        `store` is the checkpoint store's offsets for the data table (adopted when the table never
        recorded the topic), None for the dead-letter table (whose offsets lag: they move only when a
        run has dead letters). Returns the state after, and whether this call committed.
        """
        topic, run_id = plan.topic, plan.run_id
        starts, ends = plan.start_offsets(), plan.end_offsets()
        for attempt in range(1, self._attempts + 1):
            state = self._tables.read_state(identifier, topic)
            if store is None:
                standing, inside = stand_dead_letters(dict(state.marker.offsets or {}), starts, ends)
                if standing is Standing.MISMATCH:
                    raise DeadLetterAheadError(identifier, topic, run_id, state.marker.run_id, inside)
                baseline: Mapping[int, int] = state.marker.offsets or {}
            else:
                committed = _committed(state, store)
                verdict = stand_run(committed, starts, ends)
                if verdict.standing is Standing.MISMATCH:
                    raise OffsetMismatchError(identifier, topic, run_id, verdict.mismatches)
                standing, baseline = verdict.standing, committed
            if standing is Standing.COMMITTED:
                if attempt > 1:
                    logger.info("commit found in the table on verification", extra={"table": identifier})
                return state, False
            commit = TableCommit(
                topic=topic,
                run_id=run_id,
                file_uris=tuple(f.uri for f in files),
                files=files,
                start_offsets=starts,
                end_offsets=ends,
                marker_after=TableMarker(
                    offsets=advance_offsets(baseline, ends),
                    run_id=run_id,
                    quarantined=_merge_ranges(state.marker.quarantined, quarantined),
                ),
                quarantined=quarantined,
                field_ids=_planned_field_ids(plan, identifier),
                conversion_failures=dict(conversion_failures or {}),
                anomalies=anomalies or OffsetAnomalies(),
            )
            try:
                after = self._tables.commit(state, commit)
            except (TableChangedError, CommitOutcomeUnknownError) as exc:
                logger.warning(
                    "commit not confirmed; verifying before another attempt",
                    extra={"table": identifier, "run_id": run_id, "attempt": attempt, "problem": str(exc)},
                )
                if attempt < self._attempts:
                    self._sleep(self._backoff_s * attempt)
                continue
            logger.info(
                "table committed",
                extra={
                    "table": identifier,
                    "run_id": run_id,
                    "files": len(files),
                    "snapshot_id": after.snapshot_id,
                },
            )
            return after, True
        # The last attempt's outcome may be unknown: one more verification decides.
        state = self._tables.read_state(identifier, topic)
        if store is None:
            landed = (
                stand_dead_letters(dict(state.marker.offsets or {}), starts, ends)[0] is Standing.COMMITTED
            )
        else:
            landed = stand_run(_committed(state, store), starts, ends).standing is Standing.COMMITTED
        if landed:
            return state, True
        raise CommitConflictError(identifier, run_id, self._attempts)

    def _advance_store(
        self, lease: LeaseGrant, result: RunResult, targets: Mapping[int, int], ends: Mapping[int, int]
    ) -> dict[int, int]:
        """Move the store up to the table's offsets for the run's partitions (fenced); never down here."""
        current = self._checkpoints.load_committed_offsets(lease.topic)
        newest = {
            o.partition: o.max_timestamp_ms for o in result.partitions if o.max_timestamp_ms is not None
        }
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
            self._checkpoints.commit_offsets(lease, updates)
        return {p: u.offset for p, u in updates.items()}

    # -- reading committed offsets -----------------------------------------------------------------

    def reconciled_offsets(
        self, topic: str, table: str, *, lease: LeaseGrant | None = None
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
        marker = self._read_state(table, topic).marker
        stored = self._checkpoints.load_committed_offsets(topic)
        reconciliation = reconcile(topic, marker, _offsets_of(stored))
        if reconciliation.store_ahead:
            logger.error(
                "checkpoint store is ahead of the table: offsets moved without an Iceberg commit; "
                "the table's offsets are used",
                extra={"topic": topic, "table": table, "ahead": dict(reconciliation.store_ahead)},
            )
        if lease is None:
            return reconciliation
        if reconciliation.store_behind:
            self._checkpoints.commit_offsets(lease, _repairs(stored, reconciliation.store_behind))
            logger.warning(
                "checkpoint store repaired up to the table's offsets",
                extra={"topic": topic, "repaired": dict(reconciliation.store_behind)},
            )
        if reconciliation.store_ahead:
            self._checkpoints.reset_offsets(lease, _repairs(stored, reconciliation.store_ahead))
            logger.error(
                "checkpoint store set back to the table's offsets",
                extra={"topic": topic, "reset": dict(reconciliation.store_ahead)},
            )
        return reconciliation

    def reset_offsets(
        self, topic: str, tables: tuple[str, ...], offsets: Mapping[int, int], lease: LeaseGrant
    ) -> dict[int, int]:
        """Set the topic's committed offsets on purpose (backwards included) and delete the rows after them.

        The explicit reset behind "re-ingest a range" (`replay --reset-offsets`): since the table
        wins, a reset of the store alone would be undone. Each table in `tables` (the table, then its
        dead-letter table) gets ONE Iceberg commit that deletes its rows of each partition whose
        `offset` is after the new one, records the new offsets and drops the quarantined ranges lying
        after them (summary `kafscale.reset`); then the store is set, fenced by `lease`. A table that
        never recorded the topic (the Go processor's) records the store's offsets for its other
        partitions, as its first commit would. A table already at the new offsets is left alone, so a
        rerun after a crash at any point finishes the job and deletes nothing more: idempotent.

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
            self._reset_table(table, topic, offsets, lease, adopted=_offsets_of(stored))
        self._checkpoints.reset_offsets(
            lease,
            {
                p: OffsetUpdate(offset=o, last_timestamp_ms=_stored_timestamp(stored, p))
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
            state = self._read_state_if_exists(table, topic)
            if state is not None:
                _refuse_cut_ranges(table, topic, state.marker.quarantined, offsets)

    def _reset_table(
        self,
        table: str,
        topic: str,
        offsets: Mapping[int, int],
        lease: LeaseGrant,
        *,
        adopted: Mapping[int, int],
    ) -> None:
        """One verified reset commit (delete + marker) to a table, unless it records `offsets` already."""
        for attempt in range(1, self._attempts + 1):
            state = self._read_state_if_exists(table, topic)
            if state is None or _records(state, offsets):
                return
            _refuse_cut_ranges(table, topic, state.marker.quarantined, offsets)
            self._checkpoints.renew_lease(lease)  # a delete may rewrite files for a while
            current = dict(state.marker.offsets) if state.marker.offsets is not None else dict(adopted)
            before = {p: current.get(p, NO_OFFSET) for p in offsets}
            dropped = set(ranges_after(state.marker.quarantined, offsets))
            commit = TableCommit(
                topic=topic,
                run_id=lease.run_id,
                file_uris=(),
                start_offsets=before,
                end_offsets=dict(offsets),
                marker_after=TableMarker(
                    offsets={**current, **offsets},
                    run_id=state.marker.run_id,
                    quarantined=tuple(r for r in state.marker.quarantined if r not in dropped),
                ),
                reset=True,
                delete_after=dict(offsets),
            )
            try:
                after = self._tables.commit(state, commit)
            except (TableChangedError, CommitOutcomeUnknownError) as exc:
                logger.warning(
                    "offset reset not confirmed; verifying before another attempt",
                    extra={"table": table, "topic": topic, "attempt": attempt, "problem": str(exc)},
                )
                if attempt < self._attempts:
                    self._sleep(self._backoff_s * attempt)
                continue
            logger.warning(
                "committed offsets reset in the table; the rows after them deleted",
                extra={
                    "table": table,
                    "topic": topic,
                    "before": before,
                    "after": dict(offsets),
                    "snapshot_id": after.snapshot_id,
                },
            )
            return
        state = self._read_state_if_exists(table, topic)
        if state is None or _records(state, offsets):
            return
        raise CommitConflictError(table, lease.run_id, self._attempts)

    def field_ids(self, tables: tuple[str, ...]) -> TopicFieldIds:
        """The field ids of those of `tables` that exist (what the launcher plans the next files with)."""
        known: list[TableFieldIds] = []
        for table in tables:
            try:
                known.append(self._tables.field_ids(table))
            except TableMissingError:
                continue
        return TopicFieldIds(tables=tuple(known))

    def count_rows_after(self, table: str, offsets: Mapping[int, int]) -> int | None:
        """How many rows of `table` a reset to `offsets` would delete; None when the table does not exist."""
        try:
            return self._tables.count_rows(table, offsets)
        except TableMissingError:
            return None

    # -- quarantined segments ----------------------------------------------------------------------

    def pending_quarantine(self, topic: str, table: str) -> tuple[QuarantinedRange, ...]:
        """Quarantined ranges of `topic` recorded in `table` and not replayed yet (oldest first)."""
        return self._read_state(table, topic).marker.quarantined

    def commit_replay(
        self, plan: RunPlan, result: RunResult, lease: LeaseGrant, policy: TablePolicy | None = None
    ) -> CommitOutcome:
        """Commit the run of repaired quarantined segments: exactly those ranges, once. Idempotent.

        The plan covers, per partition, exactly one quarantined range as `(first - 1, last]`. The
        dead-letter table, then the table, each get ONE commit adding the replay's files and removing
        the ranges from `kafscale.quarantine.<topic>`; committed offsets do not move. A table that no
        longer lists the ranges has them already (a replayed replay is a no-op). Refused, writing
        nothing: a plan mixing listed and unlisted ranges, and a result that quarantined a segment
        again (still corrupt: repair it first).
        """
        policy = policy or TablePolicy()
        _check_committable(plan, result, lease)
        again = _quarantined_ranges(result)
        if again:
            raise RunNotCommittableError(
                plan.run_id,
                f"the replay quarantined {[r.segment_key for r in again]} again: the segments are still "
                "unreadable; repair them, then replay (nothing was written)",
            )
        self._checkpoints.renew_lease(lease)
        wanted = {(p.partition, p.start_exclusive + 1, p.end_inclusive) for p in plan.partitions}
        table_committed = dead_letter_committed = False
        main = self._read_state(plan.table.identifier, plan.topic)
        if _listed(main, wanted, plan):
            self._tables.ensure_table(_table_spec(plan, policy))
            dead_letter = self._read_state_if_exists(plan.dead_letter_table.identifier, plan.topic)
            if dead_letter is None and result.dead_letter_files:
                raise RunNotCommittableError(
                    plan.run_id,
                    f"dead-letter table {plan.dead_letter_table.identifier!r} is gone: its quarantine list "
                    "cannot be checked, so its dead letters cannot be committed exactly once",
                )
            if dead_letter is not None:
                _, dead_letter_committed = self._commit_replay_to(
                    plan.dead_letter_table.identifier, plan, result.dead_letter_files, wanted
                )
            main, table_committed = self._commit_replay_to(
                plan.table.identifier, plan, result.data_files, wanted
            )
        else:
            logger.info("quarantined ranges already replayed; nothing to do", extra={"run_id": plan.run_id})
        released = self._checkpoints.release_lease(lease)
        return CommitOutcome(
            run_id=plan.run_id,
            topic=plan.topic,
            table_committed=table_committed,
            dead_letter_committed=dead_letter_committed,
            table_snapshot_id=main.snapshot_id,
            offsets={p: main.marker.offset(p) for p in plan.start_offsets()},
            lease_released=released,
        )

    def _commit_replay_to(
        self, identifier: str, plan: RunPlan, files: tuple[DataFile, ...], wanted: set[tuple[int, int, int]]
    ) -> tuple[TableState, bool]:
        """One verified replay commit to a table, unless it no longer lists the ranges (done already)."""
        for attempt in range(1, self._attempts + 1):
            state = self._tables.read_state(identifier, plan.topic)
            if not _listed(state, wanted, plan):
                return state, False
            replayed = tuple(r for r in state.marker.quarantined if r.span in wanted)
            commit = TableCommit(
                topic=plan.topic,
                run_id=plan.run_id,
                file_uris=tuple(f.uri for f in files),
                files=files,
                start_offsets=plan.start_offsets(),
                end_offsets=plan.end_offsets(),
                marker_after=TableMarker(
                    offsets=state.marker.offsets,
                    run_id=state.marker.run_id,
                    quarantined=tuple(r for r in state.marker.quarantined if r.span not in wanted),
                ),
                replayed=replayed,
            )
            try:
                return self._tables.commit(state, commit), True
            except (TableChangedError, CommitOutcomeUnknownError) as exc:
                logger.warning(
                    "replay commit not confirmed; verifying before another attempt",
                    extra={
                        "table": identifier,
                        "run_id": plan.run_id,
                        "attempt": attempt,
                        "problem": str(exc),
                    },
                )
                if attempt < self._attempts:
                    self._sleep(self._backoff_s * attempt)
        state = self._tables.read_state(identifier, plan.topic)
        if not _listed(state, wanted, plan):
            return state, True
        raise CommitConflictError(identifier, plan.run_id, self._attempts)

    # -- helpers -----------------------------------------------------------------------------------

    def _read_state(self, table: str, topic: str) -> TableState:
        """The table's state; a missing table reads as one that recorded nothing."""
        state = self._read_state_if_exists(table, topic)
        return state or TableState(
            table=table, topic=topic, snapshot_id=None, marker=TableMarker(offsets=None)
        )

    def _read_state_if_exists(self, table: str, topic: str) -> TableState | None:
        try:
            return self._tables.read_state(table, topic)
        except TableMissingError:
            return None


def _check_committable(plan: RunPlan, result: RunResult, lease: LeaseGrant) -> None:
    if lease.topic != plan.topic:
        raise RunNotCommittableError(
            plan.run_id, f"the lease given is for topic {lease.topic!r}, the run is of topic {plan.topic!r}"
        )
    if result.run_id != plan.run_id or result.topic != plan.topic:
        raise RunNotCommittableError(
            plan.run_id, f"the result is of run {result.run_id!r} (topic {result.topic!r}), not of this plan"
        )
    if result.status is not RunStatus.SUCCEEDED:
        reason = result.failure.message if result.failure else "no reason recorded"
        raise RunNotCommittableError(
            plan.run_id, f"the run {result.status.value}: {reason} (nothing of a failed run is committed)"
        )
    planned = set(plan.start_offsets())
    unplanned = sorted({o.partition for o in result.partitions} - planned)
    if unplanned:
        raise RunNotCommittableError(plan.run_id, f"the result reports partitions {unplanned} the plan lacks")
    for target, files in (
        (plan.table, result.data_files),
        (plan.dead_letter_table, result.dead_letter_files),
    ):
        prefix = target.data_uri.rstrip("/") + "/"
        foreign = [f.uri for f in files if not f.uri.startswith(prefix)]
        if foreign:
            raise RunNotCommittableError(
                plan.run_id,
                f"{len(foreign)} file(s) for {target.identifier!r} lie outside the run's prefix {prefix!r}, "
                f"e.g. {foreign[0]!r}",
            )


def _quarantined_ranges(result: RunResult) -> tuple[QuarantinedRange, ...]:
    return tuple(
        sorted(
            QuarantinedRange(outcome.partition, q.base_offset, q.last_offset, q.key, result.run_id)
            for outcome in result.partitions
            for q in outcome.quarantined
        )
    )


def _merge_ranges(
    existing: tuple[QuarantinedRange, ...], new: tuple[QuarantinedRange, ...]
) -> tuple[QuarantinedRange, ...]:
    spans = {r.span for r in existing}
    return tuple(sorted((*existing, *(r for r in new if r.span not in spans))))


def _listed(state: TableState, wanted: set[tuple[int, int, int]], plan: RunPlan) -> bool:
    """True if the table lists every wanted range, False if none; refuses a mix."""
    spans = {r.span for r in state.marker.quarantined}
    present = wanted & spans
    if present and present != wanted:
        missing = sorted(wanted - spans)
        raise RunNotCommittableError(
            plan.run_id,
            f"table {state.table!r} lists only some of the replayed ranges as quarantined; not listed: "
            f"{missing} (replay each quarantined segment with its own exact range)",
        )
    return bool(present)


def _planned_field_ids(plan: RunPlan, identifier: str) -> Mapping[str, int] | None:
    target = plan.table if identifier == plan.table.identifier else plan.dead_letter_table
    return target.field_ids


def _table_spec(plan: RunPlan, policy: TablePolicy) -> TableSpec:
    return TableSpec(
        identifier=plan.table.identifier,
        fields=table_fields(plan.conversion.table_columns),
        partition_by=plan.conversion.partition_by,
        create_if_missing=policy.create_table_if_missing,
        allow_type_widening=policy.allow_type_widening,
    )


def _committed(state: TableState, store: Mapping[int, int]) -> dict[int, int]:
    """The table's record when it has one for the topic, else the checkpoint store's (adoption)."""
    return dict(state.marker.offsets) if state.marker.offsets is not None else dict(store)


def _offsets_of(committed: CommittedOffsets) -> dict[int, int]:
    return {p: s.offset for p, s in committed.states.items()}


def _repairs(stored: CommittedOffsets, differences: Mapping[int, tuple[int, int]]) -> dict[int, OffsetUpdate]:
    """Store updates setting each differing partition to the table's offset (timestamps kept)."""
    return {
        partition: OffsetUpdate(offset=table_offset, last_timestamp_ms=_stored_timestamp(stored, partition))
        for partition, (_store_offset, table_offset) in differences.items()
    }


def _records(state: TableState, offsets: Mapping[int, int]) -> bool:
    """True when the table records exactly `offsets` for their partitions (a reset already made)."""
    recorded = state.marker.offsets
    return recorded is not None and all(recorded.get(p, NO_OFFSET) == o for p, o in offsets.items())


def _refuse_cut_ranges(
    table: str, topic: str, quarantined: tuple[QuarantinedRange, ...], offsets: Mapping[int, int]
) -> None:
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


def _stored_timestamp(stored: CommittedOffsets, partition: int) -> int:
    state = stored.state(partition)
    return 0 if state is None else state.last_timestamp_ms
