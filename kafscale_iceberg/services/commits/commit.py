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
   another attempt - never a blind retry (`services.commits.verified_commit`, shared with the offset
   reset).
4. Advance the checkpoint store's offsets to what the table records (fenced by the lease), then
   release the lease.

Any step may crash; running `commit_run` again with the same plan, result and lease finishes the
job and duplicates nothing. See docs/architecture.md, "The commit step".

What each table's write is, read from the plan and result: `services.commits.run_writes`; the checkpoint
store kept in step with the tables: `services.commits.checkpoint_sync`; a run stranded between its tables'
commits finished: `services.commits.stranded_runs`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Unpack

from kafscale_iceberg.domain.anomalies import offset_anomalies
from kafscale_iceberg.domain.column_fill import (
    FIELD_SAMPLE_RECORDS,
    ColumnFill,
    column_fill,
    describe_unfilled,
    refuse_unfilled,
    samples_fields,
)
from kafscale_iceberg.domain.commits import QuarantinedRange, Reconciliation, Standing, TableState
from kafscale_iceberg.domain.field_ids import (
    TableFieldIds,
    TopicFieldIds,
    field_id_mismatches,
    planned_field_ids,
)
from kafscale_iceberg.domain.finished_runs import FinishedRun, describe_offsets
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import (
    NO_OFFSET,
    RunPlan,
    RunResult,
    TableOutput,
    TableRole,
    plan_as_written,
    table_outputs,
)
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.domain.schema_evolution import merged_column
from kafscale_iceberg.exceptions import (
    CheckpointUnavailableError,
    DataFileMissingError,
    DeadLetterAheadError,
    FieldIdMismatchError,
    InferredColumnChangedError,
    LeaseLostError,
    OffsetMismatchError,
    OffsetsFencedError,
    OffsetsNotRecordedError,
    RunSupersededError,
    TableLocationUnknownError,
    TableMissingError,
)
from kafscale_iceberg.ports import CheckpointStore, RecordFieldSampler, TableCommitter
from kafscale_iceberg.services.commits.checkpoint_sync import (
    advance_store,
    offsets_of,
    reconciled_offsets,
    repair_store,
)
from kafscale_iceberg.services.commits.outcome import CommitOutcome
from kafscale_iceberg.services.commits.run_writes import (
    DataTableWrite,
    DeadLetterTableWrite,
    LaggingTableWrite,
    RunFilesWrite,
    TablePolicy,
    check_committable,
    committed_offsets,
    inferred_columns,
    output_spec,
    plan_target,
    quarantined_ranges,
)
from kafscale_iceberg.services.commits.stranded_runs import StrandedRunLoader, finish_stranded, rewind_lagging
from kafscale_iceberg.services.commits.upsert_commit import UpsertTableWrite, check_upsert_committable
from kafscale_iceberg.services.commits.verified_commit import (
    CommitRetryOptions,
    TableWriter,
    commit_verified,
    read_state_if_exists,
    read_state_or_empty,
)

logger = logging.getLogger(__name__)


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
        stranded_runs: StrandedRunLoader | None = None,
        **retry: Unpack[CommitRetryOptions],
    ) -> None:
        """`stranded_runs(topic, run_id)` loads a run's plan and result (None when they are gone): with
        it, a run whose dead-letter commit landed and whose table commit never did is finished from
        its result when a later plan runs into it, instead of refusing that plan forever."""
        super().__init__(tables, checkpoints, **retry)
        self._stranded_runs = stranded_runs

    # -- the commit step ---------------------------------------------------------------------------

    def commit_run(
        self, plan: RunPlan, result: RunResult, lease: LeaseGrant, policy: TablePolicy | None = None
    ) -> CommitOutcome:
        """Commit a succeeded run exactly once, advance the offsets, release the lease. Idempotent.

        A run stranded between its tables' commits that this plan runs into is finished first, from
        its own plan and result (`CommitOutcome.finished`; `RunSupersededError` when that moved the
        table past this plan's start: this run is planned again).

        Raises `RunNotCommittableError` (a failed result, or one of another plan), `LeaseLostError`
        (nothing written), `OffsetMismatchError` / `DeadLetterAheadError` (the table is not where
        the run starts; nothing written), `CommitConflictError` (transient: the table kept changing),
        `OffsetsNotRecordedError` (transient: every table committed, the store's offsets not written),
        `UnfilledColumnError` (`schema.mode: strict` and a mapping column no record carried; nothing
        written), and the adapters' catalog and checkpoint errors. After any error, calling again is safe.
        """
        policy = policy or TablePolicy()
        check_committable(plan, result, lease)
        check_upsert_committable(plan, result)
        fill, unfilled = self._column_fill(plan, result)
        self._checkpoints.renew_lease(lease)
        noted = dict(zip(fill.unfilled, unfilled, strict=True)) if fill is not None else {}
        outcome = self._commit_recovering(plan, result, lease, policy, noted)
        return replace(outcome, fill=fill, unfilled=unfilled)

    def _column_fill(self, plan: RunPlan, result: RunResult) -> tuple[ColumnFill | None, tuple[str, ...]]:
        """Per mapping column the records that carried it, and one line per column none carried
        (with the nearest fields the records carry, read from one data file only then); under
        `schema.mode: strict` such a column refuses the run here, before any commit."""
        fill = column_fill(plan, result)
        if fill is None or not fill.unfilled:
            return fill, ()
        table = plan.anchor.identifier
        fields = None
        if samples_fields(plan) and isinstance(self._tables, RecordFieldSampler):
            fields = self._tables.record_fields(table, result.data_files[0].uri, FIELD_SAMPLE_RECORDS)
        refuse_unfilled(plan, fill, fields, table=table)
        return fill, tuple(describe_unfilled(c, fill.records, fields) for c in fill.unfilled)

    def _commit_recovering(
        self,
        plan: RunPlan,
        result: RunResult,
        lease: LeaseGrant,
        policy: TablePolicy,
        unfilled: Mapping[str, str],
    ) -> CommitOutcome:
        """`commit_run` after its checks: a stranded run it runs into finished first (or its tables
        rewound), a stale plan's store repaired. `unfilled`: per column no record carried, its line
        (the table's snapshot summary keeps it, for `status`)."""
        finished: FinishedRun | None = None
        try:
            try:
                return self._commit_run(plan, result, lease, policy, unfilled=unfilled)
            except DeadLetterAheadError as exc:
                finished = finish_stranded(
                    exc,
                    lease,
                    self._stranded_runs,
                    lambda stranded, its_result: self._commit_run(
                        stranded, its_result, lease, policy, release=False
                    ),
                )
                if finished is None:
                    # It cannot be finished as it was (its located version gone, its files deleted,
                    # its documents gone): its lagging tables are set back to the anchor, and this
                    # run, starting where the anchor is, writes the range again.
                    return self._commit_after_rewinding(exc, plan, result, lease, policy, unfilled)
                # Refused again when the stranded run moved the table past this plan's start.
                outcome = self._commit_run(plan, result, lease, policy, unfilled=unfilled)
                return replace(outcome, finished=finished)
        except OffsetMismatchError as exc:
            if exc.repaired:
                raise
            repaired = repair_store(self._tables, self._checkpoints, plan, lease)
            refusal = OffsetMismatchError(exc.table, exc.topic, exc.run_id, exc.mismatches, repaired=repaired)
            if finished is not None:
                raise RunSupersededError(refusal, finished) from None
            raise refusal from None

    def _commit_run(
        self,
        plan: RunPlan,
        result: RunResult,
        lease: LeaseGrant,
        policy: TablePolicy,
        *,
        release: bool = True,
        unfilled: Mapping[str, str] | None = None,
    ) -> CommitOutcome:
        plan = plan_as_written(plan, result)  # an inferred table: the columns and ids the job decided
        topic, run_id = plan.topic, plan.run_id
        starts = plan.start_offsets()
        quarantined = quarantined_ranges(result)
        store = offsets_of(self._checkpoints.load_committed_offsets(topic))
        outputs = table_outputs(plan, result)
        anchor = outputs[-1]
        target = plan_target(plan, anchor)
        upsert = {} if result.upsert is None else {"outcome": result.upsert}
        data = (DataTableWrite if not upsert else UpsertTableWrite).for_run(
            plan,
            target,
            anchor.files,
            quarantined,
            conversion_failures=anchor.conversion_failures,
            anomalies=offset_anomalies(result),
            dead_letters=result.counts.dead_letter_reasons,
            adopted=store,
            columns=inferred_columns(plan, anchor),
            unfilled_columns=unfilled or {},
            **upsert,
        )
        main = read_state_or_empty(self._tables, data.table, topic)
        standing = data.verify(main)

        table_committed = dead_letter_committed = False
        states: dict[str, TableState] = {}
        committed_tables: list[str] = []
        if standing is Standing.READY:
            lagging = self._check_lagging(plan, outputs[:-1], quarantined)  # before any write
            # Every table is created or evolved before any commit: a table that may not be created
            # (`create_table_if_missing: false`) stops the run before anything of it is written.
            self._tables.ensure_table(output_spec(plan, anchor, policy), current=main)
            for _write, state, output in lagging:
                self._tables.ensure_table(output_spec(plan, output, policy), current=state)
            # A table that moved since the plan (a race adding columns), or one created just now whose
            # catalog chose its location, is refused here, before the first table's commit.
            for write, state in [(w, s) for w, s, _o in lagging] + [(data, main)]:
                self._check_inferred_ids(write, state)
            self._check_before_commits(data, main, [w for w, _s, _o in lagging])
            self._check_placed(plan, [o for _w, _s, o in lagging] + [anchor])
            # Tables before the anchor, in the plan's fixed order; each verified COMMITTED is skipped.
            # Quarantined ranges go to the dead-letter table's marker even without files, so both
            # tables list them (an offset reset to before a range drops it from both).
            for write, state, output in lagging:
                done = commit_verified(self._tables, write, self._retry, known=state)
                states[done.state.table] = done.state
                if done.committed:
                    committed_tables.append(write.table)
                dead_letter_committed = dead_letter_committed or (
                    done.committed and output.role is TableRole.DEAD_LETTER
                )
            written = commit_verified(self._tables, data, self._retry, known=main)
            main, table_committed = written.state, written.committed
            if table_committed:
                committed_tables.append(data.table)
        else:
            logger.info("run already in the table; commit skipped", extra={"run_id": run_id, "topic": topic})

        offsets = {p: committed_offsets(main, store).get(p, NO_OFFSET) for p in starts}
        try:
            written_offsets = advance_store(self._checkpoints, lease, result, offsets, plan.end_offsets())
        except CheckpointUnavailableError as exc:
            raise OffsetsNotRecordedError(exc, topic, run_id, describe_offsets(offsets)) from exc
        except LeaseLostError as exc:
            raise OffsetsFencedError(exc, describe_offsets(offsets)) from exc
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
            tables_committed=tuple(committed_tables),
            upsert=data.landed_counts() if isinstance(data, UpsertTableWrite) and table_committed else None,
            upsert_table=data.table if isinstance(data, UpsertTableWrite) else "",
        )

    def _check_before_commits(
        self, data: RunFilesWrite, main: TableState, lagging: Sequence[RunFilesWrite]
    ) -> None:
        """Refuse the run, before its first table commit, for what a later one of its commits would be
        refused for: a file it references that does not exist (`DataFileMissingError`: one HEAD per
        file) or, for an upsert, a located version that no longer stands (`UpsertLocateStaleError`).
        A refusal between two tables' commits would strand the run (issue 29)."""
        writes = [*lagging, data]
        missing = {w.table: self._tables.missing_files(w.table, [f.uri for f in w.files]) for w in writes}
        if any(missing.values()):
            tables = [table for table, files in missing.items() if files]
            raise DataFileMissingError(
                data.run_id, tables, sorted(f for files in missing.values() for f in files)
            )
        if isinstance(data, UpsertTableWrite) and main.snapshot_id is not None:
            self._tables.check_commit(main, data.build(main))

    def _commit_after_rewinding(
        self,
        refusal: DeadLetterAheadError,
        plan: RunPlan,
        result: RunResult,
        lease: LeaseGrant,
        policy: TablePolicy,
        unfilled: Mapping[str, str],
    ) -> CommitOutcome:
        """Set back each lagging table holding a stranded run that cannot be finished to this plan's
        starts (where the anchor is: rows after it are only a stranded run's), then commit this run."""
        rewound: set[str] = set()
        while True:
            if refusal.table in rewound:
                raise refusal
            rewind_lagging(self._tables, self._checkpoints, refusal, plan, lease, self._retry)
            rewound.add(refusal.table)
            try:
                return self._commit_run(plan, result, lease, policy, unfilled=unfilled)
            except DeadLetterAheadError as again:
                refusal = again

    def _check_inferred_ids(self, write: RunFilesWrite, state: TableState | None) -> None:
        """Refuse (`FieldIdMismatchError`, `InferredColumnChangedError`) an inferred table's write whose
        files' field ids are not those its commit would give the columns, or whose column is of
        another type in the table that is not a promotion the commit makes (`domain/schema_evolution`):
        the table gained columns from another run since the plan."""
        if write.columns is None or write.field_ids is None or not write.files or state is None:
            return
        try:
            table = self._tables.field_ids(write.table, state)
        except TableMissingError:
            return
        written = {c.name: c for c in write.columns}
        # A record schema's promotion of a column (int -> long, ...) is the commit's to stage, not a conflict.
        conflicts = {
            c.name: (written[c.name].type_name, c.type_name)
            for c in table.columns or ()
            if c.name in written
            and written[c.name].type is not c.type
            and merged_column(c, written[c.name]).type_name != written[c.name].type_name
        }
        if conflicts:
            raise InferredColumnChangedError(write.table, write.run_id, conflicts)
        expected = planned_field_ids(table_fields(write.columns), table, new_parts=True)
        if expected is None:
            return
        mismatches = field_id_mismatches(dict(write.field_ids), expected)
        if mismatches:
            raise FieldIdMismatchError(write.table, write.run_id, mismatches)

    def _check_placed(self, plan: RunPlan, outputs: Sequence[TableOutput]) -> None:
        """Refuse (`TableLocationUnknownError`) a run whose files for a table went beside its documents
        because the launcher did not know the table's location (`TableTarget.location_unknown`)."""
        for output in outputs:
            target = plan_target(plan, output)
            if target.location_unknown and output.files:
                known = self._tables.field_ids(target.identifier)
                raise TableLocationUnknownError(target.identifier, plan.run_id, known.data_location or "")

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
                columns=inferred_columns(plan, output),
            )
            state = read_state_if_exists(self._tables, write.table, plan.topic)
            if state is not None:
                write.verify(state)
            writes.append((write, state, output))
        return writes

    # -- reading committed offsets -----------------------------------------------------------------

    def reconciled_offsets(
        self, topic: str, table: str, *, lease: LeaseGrant | None = None
    ) -> Reconciliation:
        """The topic's committed offsets for planning, the table's record winning over the store;
        with `lease` the store is repaired (`checkpoint_sync.reconciled_offsets`)."""
        return reconciled_offsets(self._tables, self._checkpoints, topic, table, lease=lease)

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
