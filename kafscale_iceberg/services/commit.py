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
   another attempt - never a blind retry (`services.verified_commit`, shared with the offset
   reset).
4. Advance the checkpoint store's offsets to what the table records (fenced by the lease), then
   release the lease.

Any step may crash; running `commit_run` again with the same plan, result and lease finishes the
job and duplicates nothing. See docs/architecture.md, "The commit step".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

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
    reconcile,
    stand_dead_letters,
    stand_run,
)
from kafscale_iceberg.domain.field_ids import TableFieldIds, TopicFieldIds
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import CommittedOffsets, OffsetUpdate
from kafscale_iceberg.domain.routing import matches_template
from kafscale_iceberg.domain.runs import (
    NO_OFFSET,
    ColumnSpec,
    DataFile,
    RunPlan,
    RunResult,
    RunStatus,
    TableOutput,
    TableRole,
    TableTarget,
    plan_as_written,
    table_outputs,
)
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, table_fields
from kafscale_iceberg.exceptions import (
    DeadLetterAheadError,
    KafscaleIcebergError,
    OffsetMismatchError,
    RunNotCommittableError,
    TableMissingError,
)
from kafscale_iceberg.ports import CheckpointStore, TableCommitter
from kafscale_iceberg.services.verified_commit import (
    DEFAULT_COMMIT_ATTEMPTS,
    TableWrite,
    TableWriter,
    commit_verified,
    read_state_if_exists,
    read_state_or_empty,
)

if TYPE_CHECKING:
    from kafscale_iceberg.config import MappingConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TablePolicy:
    """What the commit step may do to a mapping's table (`create_table_if_missing`, widening).

    The dead-letter table is created when missing whatever this says: it is this product's own table.
    """

    create_table_if_missing: bool = False
    allow_type_widening: bool = False
    more: tuple[TablePolicy, ...] = ()
    """The policies of the topic's later mappings, in config order."""

    @classmethod
    def from_mapping(cls, mapping: MappingConfig, *more: MappingConfig) -> TablePolicy:
        """The policy a config mapping sets (`create_table_if_missing`, `schema.allow_type_widening`);
        `more`: the topic's later mappings."""
        return cls(
            create_table_if_missing=mapping.create_table_if_missing,
            allow_type_widening=mapping.schema_.allow_type_widening,
            more=tuple(cls.from_mapping(m) for m in more),
        )

    def for_mapping(self, index: int) -> TablePolicy:
        """The policy of the topic's mapping `index` (a mapping the config no longer has: the first's)."""
        return self.more[index - 1] if 0 < index <= len(self.more) else self


@dataclass(frozen=True)
class CommitOutcome:
    """What `commit_run` did."""

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
    states: Mapping[str, TableState] = field(default_factory=dict)
    """The states this call read or committed last, by table (what `field_ids` may use)."""


@dataclass(frozen=True)
class RunFilesWrite(TableWrite):
    """A run's files (data files or dead letters) to one of its tables, with the marker moved to the
    run's ends (`DataTableWrite`, `DeadLetterTableWrite`)."""

    starts: Mapping[int, int]
    ends: Mapping[int, int]
    files: tuple[DataFile, ...]
    quarantined: tuple[QuarantinedRange, ...]
    field_ids: Mapping[str, int] | None
    conversion_failures: Mapping[str, int] = field(default_factory=dict)
    anomalies: OffsetAnomalies = field(default_factory=OffsetAnomalies)
    """The run's offset gaps and overlapped records (the data table's summary, for `status`)."""
    columns: tuple[ColumnSpec, ...] | None = None
    """An inferred table's columns the files were written with (added in the same commit when new)."""

    def baseline(self, state: TableState) -> Mapping[int, int]:
        """The topic's committed offsets in this table before the run."""
        return state.marker.offsets or {}

    def build(self, state: TableState) -> TableCommit:
        return TableCommit(
            topic=self.topic,
            run_id=self.run_id,
            file_uris=tuple(f.uri for f in self.files),
            files=self.files,
            start_offsets=self.starts,
            end_offsets=self.ends,
            marker_after=TableMarker(
                offsets=advance_offsets(self.baseline(state), self.ends),
                run_id=self.run_id,
                quarantined=merge_ranges(state.marker.quarantined, self.quarantined),
            ),
            quarantined=self.quarantined,
            field_ids=self.field_ids,
            conversion_failures=dict(self.conversion_failures),
            anomalies=self.anomalies,
            columns=self.columns,
        )

    @classmethod
    def for_run(
        cls,
        plan: RunPlan,
        target: TableTarget,
        files: tuple[DataFile, ...],
        quarantined: tuple[QuarantinedRange, ...],
        **more: Any,
    ) -> Self:
        """The write of `plan`'s `files` to `target` (`more`: the subclass's own fields)."""
        return cls(
            table=target.identifier,
            topic=plan.topic,
            run_id=plan.run_id,
            starts=plan.start_offsets(),
            ends=plan.end_offsets(),
            files=files,
            quarantined=quarantined,
            field_ids=target.field_ids,
            **more,
        )


@dataclass(frozen=True)
class DataTableWrite(RunFilesWrite):
    """The run's data files to the mapping's table. A table that never recorded the topic (new, or
    written by the Go processor) adopts the checkpoint store's offsets (`adopted`)."""

    adopted: Mapping[int, int] = field(default_factory=dict)

    def baseline(self, state: TableState) -> Mapping[int, int]:
        return committed_offsets(state, self.adopted)

    def verify(self, state: TableState) -> Standing:
        """COMMITTED or READY; `OffsetMismatchError` when the table is not at the run's start."""
        verdict = stand_run(self.baseline(state), self.starts, self.ends)
        if verdict.standing is Standing.MISMATCH:
            raise OffsetMismatchError(self.table, self.topic, self.run_id, verdict.mismatches)
        return verdict.standing


@dataclass(frozen=True)
class DeadLetterTableWrite(RunFilesWrite):
    """The run's dead letters (and quarantined ranges) to the dead-letter table, whose offsets lag:
    they move only when a run has dead letters, so nothing is adopted."""

    action: ClassVar[str] = "dead-letter commit"
    kind: ClassVar[str] = "dead-letter table"

    def verify(self, state: TableState) -> Standing:
        """COMMITTED or READY; `DeadLetterAheadError` when it holds part of the run from another run."""
        verdict = stand_dead_letters(dict(self.baseline(state)), self.starts, self.ends)
        if verdict.standing is Standing.MISMATCH:
            raise DeadLetterAheadError(
                self.table, self.topic, self.run_id, state.marker.run_id, verdict.partitions, self.kind
            )
        return verdict.standing


@dataclass(frozen=True)
class LaggingTableWrite(DeadLetterTableWrite):
    """The run's rows to a data table that is not the topic's anchor (a routed table, another mapping's
    table): committed before the anchor, only when the run has rows for it, so its offsets lag like
    a dead-letter table's (same verification)."""

    action: ClassVar[str] = "table commit (before the anchor)"
    kind: ClassVar[str] = "table (committed before the topic's anchor)"


class CommitService(TableWriter):
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
        super().__init__(tables, checkpoints, attempts=attempts, backoff_s=backoff_s, sleep=sleep)
        self._stranded_runs = stranded_runs

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
        check_committable(plan, result, lease)
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
            check_committable(plan, result, lease)
            self._commit_run(plan, result, lease, policy, release=False)
        except (DeadLetterAheadError, OffsetMismatchError, RunNotCommittableError) as exc:
            logger.warning(
                "could not finish the run stranded between its dead-letter and table commits",
                extra={"topic": refusal.topic, "stranded_run_id": refusal.other_run_id, "problem": str(exc)},
            )
            return False  # it may not be committed: the refusal stands
        except KafscaleIcebergError as exc:
            # Anything else (the catalog unavailable, a table that may not be created) says what to do,
            # and whether a retry can help, better than the refusal: raised in its place.
            logger.warning(
                "finishing the run stranded between its tables' commits failed",
                extra={"topic": refusal.topic, "stranded_run_id": refusal.other_run_id, "problem": str(exc)},
            )
            raise exc from refusal
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
            reconciliation = self.reconciled_offsets(plan.topic, plan.anchor.identifier, lease=lease)
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
        plan = plan_as_written(plan, result)  # an inferred table: the columns and ids the job decided
        topic, run_id = plan.topic, plan.run_id
        starts = plan.start_offsets()
        quarantined = quarantined_ranges(result)
        store = offsets_of(self._checkpoints.load_committed_offsets(topic))
        outputs = table_outputs(plan, result)
        anchor = outputs[-1]
        data = DataTableWrite.for_run(
            plan,
            plan_target(plan, anchor),
            anchor.files,
            quarantined,
            conversion_failures=anchor.conversion_failures,
            anomalies=offset_anomalies(result),
            adopted=store,
            columns=inferred_columns(plan, anchor),
        )
        main = read_state_or_empty(self._tables, data.table, topic)
        standing = data.verify(main)

        table_committed = dead_letter_committed = False
        states: dict[str, TableState] = {}
        if standing is Standing.READY:
            lagging = self._check_lagging(plan, outputs[:-1], quarantined)  # before any write
            # Every table is created or evolved before any commit: a table that may not be created
            # (`create_table_if_missing: false`) stops the run before anything of it is written.
            self._tables.ensure_table(output_spec(plan, anchor, policy), current=main)
            for _write, state, output in lagging:
                self._tables.ensure_table(output_spec(plan, output, policy), current=state)
            # Tables before the anchor, in the plan's fixed order; each verified COMMITTED is skipped.
            # Quarantined ranges go to the dead-letter table's marker even without files, so both
            # tables list them (an offset reset to before a range drops it from both).
            for write, state, output in lagging:
                done = commit_verified(self._tables, write, self._retry, known=state)
                states[done.state.table] = done.state
                dead_letter_committed = dead_letter_committed or (
                    done.committed and output.role is TableRole.DEAD_LETTER
                )
            written = commit_verified(self._tables, data, self._retry, known=main)
            main, table_committed = written.state, written.committed
        else:
            logger.info("run already in the table; commit skipped", extra={"run_id": run_id, "topic": topic})

        offsets = {p: committed_offsets(main, store).get(p, NO_OFFSET) for p in starts}
        written_offsets = self._advance_store(lease, result, offsets, plan.end_offsets())
        released = self._checkpoints.release_lease(lease) if release else False
        logger.info(
            "run committed",
            extra={
                "run_id": run_id,
                "topic": topic,
                "table": data.table,
                "tables": len(outputs),
                "table_committed": table_committed,
                "dead_letter_committed": dead_letter_committed,
                "snapshot_id": main.snapshot_id,
                "data_files": len(result.data_files),
                "dead_letter_files": len(result.dead_letter_files),
                "offsets_written": written_offsets,
            },
        )
        return CommitOutcome(
            run_id=run_id,
            topic=topic,
            table_committed=table_committed,
            dead_letter_committed=dead_letter_committed,
            table_snapshot_id=main.snapshot_id,
            offsets=offsets,
            offsets_written=written_offsets,
            lease_released=released,
            states={**states, main.table: main},
        )

    def _check_lagging(
        self, plan: RunPlan, outputs: Sequence[TableOutput], quarantined: tuple[QuarantinedRange, ...]
    ) -> list[tuple[DeadLetterTableWrite, TableState | None, TableOutput]]:
        """The writes of the tables committed before the anchor (those the run has files for, and the
        dead-letter table when it quarantined), each verified against its table as it is."""
        writes = []
        for output in outputs:
            ranges = quarantined if output.identifier == plan.dead_letter_table.identifier else ()
            if not output.files and not ranges:
                continue
            kind = DeadLetterTableWrite if output.role is TableRole.DEAD_LETTER else LaggingTableWrite
            write = kind.for_run(
                plan,
                plan_target(plan, output),
                output.files,
                ranges,
                conversion_failures=output.conversion_failures,
            )
            state = read_state_if_exists(self._tables, write.table, plan.topic)
            if state is not None:
                write.verify(state)
            writes.append((write, state, output))
        return writes

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
        marker = read_state_or_empty(self._tables, table, topic).marker
        stored = self._checkpoints.load_committed_offsets(topic)
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
            self._checkpoints.commit_offsets(lease, repairs(stored, reconciliation.store_behind))
            logger.warning(
                "checkpoint store repaired up to the table's offsets",
                extra={"topic": topic, "repaired": dict(reconciliation.store_behind)},
            )
        if reconciliation.store_ahead:
            self._checkpoints.reset_offsets(lease, repairs(stored, reconciliation.store_ahead))
            logger.error(
                "checkpoint store set back to the table's offsets",
                extra={"topic": topic, "reset": dict(reconciliation.store_ahead)},
            )
        return reconciliation

    def field_ids(
        self, tables: tuple[str, ...], states: Mapping[str, TableState] | None = None
    ) -> TopicFieldIds:
        """The field ids of those of `tables` that exist (what the launcher plans the next files with);
        `states` (a `CommitOutcome`'s) spare loading the tables they were read or committed as."""
        known: list[TableFieldIds] = []
        for table in tables:
            try:
                known.append(self._tables.field_ids(table, (states or {}).get(table)))
            except TableMissingError:
                continue
        return TopicFieldIds(tables=tuple(known))


def check_committable(plan: RunPlan, result: RunResult, lease: LeaseGrant) -> None:
    """Refuse (`RunNotCommittableError`) a result that can never be committed under `lease`: another
    topic's lease, another run's result, a failed run, partitions the plan lacks, files outside the
    run's prefixes."""
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
    if not plan.multi_table and result.tables:
        raise RunNotCommittableError(plan.run_id, "the result lists tables a plan of one table has not")
    if plan.multi_table and (result.data_files or result.dead_letter_files):
        raise RunNotCommittableError(
            plan.run_id, "a plan of several tables lists its files per table (`tables`), not in data_files"
        )
    names = {t.identifier for m in plan.mappings for t, _ in m.static_targets()}
    for output in result.tables:
        if output.identifier not in names and not _templated(plan, output):
            raise RunNotCommittableError(
                plan.run_id,
                f"the result lists table {output.identifier!r}, which no mapping of the plan names",
            )
    for output in table_outputs(plan, result):
        target, files = plan_target(plan, output), output.files
        prefix = target.data_uri.rstrip("/") + "/"
        foreign = [f.uri for f in files if not f.uri.startswith(prefix)]
        if foreign:
            raise RunNotCommittableError(
                plan.run_id,
                f"{len(foreign)} file(s) for {target.identifier!r} lie outside the run's prefix {prefix!r}, "
                f"e.g. {foreign[0]!r}",
            )


def quarantined_ranges(result: RunResult) -> tuple[QuarantinedRange, ...]:
    """The ranges the run quarantined, sorted."""
    return tuple(
        sorted(
            QuarantinedRange(outcome.partition, q.base_offset, q.last_offset, q.key, result.run_id)
            for outcome in result.partitions
            for q in outcome.quarantined
        )
    )


def merge_ranges(
    existing: tuple[QuarantinedRange, ...], new: tuple[QuarantinedRange, ...]
) -> tuple[QuarantinedRange, ...]:
    """`existing` and those of `new` not already listed, sorted."""
    spans = {r.span for r in existing}
    return tuple(sorted((*existing, *(r for r in new if r.span not in spans))))


def _templated(plan: RunPlan, output: TableOutput) -> bool:
    """Whether `output` is a table its mapping's route template names (a valid value's table)."""
    if output.role is not TableRole.DATA or output.mapping >= len(plan.mappings):
        return False
    route = plan.mappings[output.mapping].route
    return (
        route is not None
        and route.table_template is not None
        and matches_template(route.table_template, output.identifier)
        and output.identifier not in route.reserved
    )


def plan_target(plan: RunPlan, output: TableOutput) -> TableTarget:
    """The plan's target of a table of the run (a template's table: its target from the route)."""
    for mapping in plan.mappings:
        for target, _role in mapping.static_targets():
            if target.identifier == output.identifier:
                return target
    route = plan.mappings[output.mapping].route if output.mapping < len(plan.mappings) else None
    if route is None or route.table_template is None:
        raise RunNotCommittableError(plan.run_id, f"table {output.identifier!r} is not a table of the plan")
    return route.template_target(output.identifier)


def inferred_columns(plan: RunPlan, output: TableOutput) -> tuple[ColumnSpec, ...] | None:
    """The columns an inferred table's files were written with (the commit adds those it lacks);
    None for every other table (its schema is not touched by the commit)."""
    mapping = plan.mappings[output.mapping]
    inferred = output.role is TableRole.DATA and mapping.conversion.infer_columns
    if inferred and mapping.table is not None and output.identifier == mapping.table.identifier:
        return mapping.conversion.table_columns
    return None


def output_spec(plan: RunPlan, output: TableOutput, policy: TablePolicy) -> TableSpec:
    """How a table of the run is created or evolved: a dead-letter table (always created when
    missing), or a mapping's table under its mapping's policy (a template's tables are created as
    values appear). An inferred table (give the plan as written, `plan_as_written`) is created from
    the columns its files were written with and never evolved here: the commit of its files adds
    the new columns, in the same Iceberg commit."""
    if output.role is TableRole.DEAD_LETTER:
        return TableSpec(identifier=output.identifier, fields=DEAD_LETTER_FIELDS, create_if_missing=True)
    mapping = plan.mappings[output.mapping]
    chosen = policy.for_mapping(output.mapping)
    static = {t.identifier for t, _ in mapping.static_targets()}
    return TableSpec(
        identifier=output.identifier,
        fields=table_fields(mapping.conversion.table_columns),
        partition_by=mapping.conversion.partition_by,
        create_if_missing=chosen.create_table_if_missing or output.identifier not in static,
        allow_type_widening=chosen.allow_type_widening,
        evolve=not mapping.conversion.infer_columns,
    )


def table_spec(plan: RunPlan, policy: TablePolicy) -> TableSpec:
    """The mapping's table as the run writes it, and what `policy` allows to change on it."""
    assert plan.table is not None
    return TableSpec(
        identifier=plan.table.identifier,
        fields=table_fields(plan.conversion.table_columns),
        partition_by=plan.conversion.partition_by,
        create_if_missing=policy.create_table_if_missing,
        allow_type_widening=policy.allow_type_widening,
    )


def committed_offsets(state: TableState, store: Mapping[int, int]) -> dict[int, int]:
    """The table's record when it has one for the topic, else the checkpoint store's (adoption)."""
    return dict(state.marker.offsets) if state.marker.offsets is not None else dict(store)


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
