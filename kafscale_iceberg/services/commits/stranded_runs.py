"""Recovery of a run stranded between its tables' commits (a crash after a table committed before the
topic's anchor - the dead-letter table, a routed or another mapping's table - and before the anchor).

The next plan's commit runs into that table's marker (`DeadLetterAheadError` naming the stranded run)
and `finish_stranded` commits the stranded run from its own plan and result, under the new run's lease,
so the new plan's commit can go on. A stranded run that cannot be finished as it was - its documents
gone, the table version its upsert located in replaced, a file of it deleted - is never committed: its
lagging tables are set back to the anchor's offsets (`rewind_lagging`) and the new run, which starts
there, writes the range again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafscale_iceberg.domain.finished_runs import FinishedRun
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import RunPlan, RunResult
from kafscale_iceberg.exceptions import (
    DataFileMissingError,
    DeadLetterAheadError,
    FieldIdMismatchError,
    KafscaleIcebergError,
    OffsetMismatchError,
    RunNotCommittableError,
    UpsertLocateStaleError,
)
from kafscale_iceberg.ports import CheckpointStore, TableCommitter
from kafscale_iceberg.services.commits.checkpoint_sync import offsets_of
from kafscale_iceberg.services.commits.outcome import CommitOutcome
from kafscale_iceberg.services.commits.run_writes import check_committable
from kafscale_iceberg.services.commits.verified_commit import CommitRetry, commit_verified
from kafscale_iceberg.services.offset_reset import ResetWrite

logger = logging.getLogger(__name__)

StrandedRunLoader = Callable[[str, str], tuple[RunPlan, RunResult] | None]
"""`(topic, run_id)` → the run's plan and result, None when they are gone."""


def finish_stranded(
    refusal: DeadLetterAheadError,
    lease: LeaseGrant,
    load: StrandedRunLoader | None,
    commit: Callable[[RunPlan, RunResult], CommitOutcome],
) -> FinishedRun | None:
    """Commit (with `commit`, keeping `lease`) the run `refusal` names as stranded; what it committed
    when it is in now (logged: which run, which tables, how many records, the offsets).

    None when it cannot be committed as it was (no loader, its documents gone, its result not
    committable, a table not where it starts, its located version gone, a file of it deleted): then
    `rewind_lagging` sets its tables back and the new run writes its range again. Any other product
    error (the catalog unavailable, a table that may not be created) is raised in the refusal's
    place: it says better what to do.
    """
    if load is None or refusal.other_run_id is None:
        return None
    # An unreadable document (S3 down) is an outage: raised, the commit is tried again later.
    try:
        loaded = load(refusal.topic, refusal.other_run_id)
        if loaded is None:
            return None
        plan, result = loaded
        check_committable(plan, result, lease)
        outcome = commit(plan, result)
    except (
        DataFileMissingError,
        DeadLetterAheadError,
        FieldIdMismatchError,
        OffsetMismatchError,
        RunNotCommittableError,
        UpsertLocateStaleError,
    ) as exc:
        logger.info(
            "the run stranded between its tables' commits cannot be finished as it was; its range is "
            "written again by the run that met it",
            extra={"topic": refusal.topic, "stranded_run_id": refusal.other_run_id, "problem": str(exc)},
        )
        return None  # it may not be committed: the refusal stands
    except KafscaleIcebergError as exc:
        logger.warning(
            "finishing the run stranded between its tables' commits failed",
            extra={"topic": refusal.topic, "stranded_run_id": refusal.other_run_id, "problem": str(exc)},
        )
        raise exc from refusal
    finished = FinishedRun(
        run_id=plan.run_id,
        topic=plan.topic,
        tables=outcome.tables_committed,
        records=result.counts.written,
        dead_letters=result.counts.dead_lettered,
        offsets=dict(outcome.offsets),
        plan=plan,
        result=result,
        upsert=outcome.upsert,
        upsert_table=outcome.upsert_table,
    )
    logger.warning(
        "topic %s: finished %s, left between its tables' commits by an earlier crash",
        plan.topic,
        finished.describe(),
        extra={
            "topic": plan.topic,
            "stranded_run_id": plan.run_id,
            "run_id": refusal.run_id,
            "tables": list(finished.tables),
            "records": finished.records,
            "dead_letters": finished.dead_letters,
            "offsets": dict(finished.offsets),
        },
    )
    return finished


def rewind_lagging(
    tables: TableCommitter,
    checkpoints: CheckpointStore,
    refusal: DeadLetterAheadError,
    plan: RunPlan,
    lease: LeaseGrant,
    retry: CommitRetry,
) -> None:
    """Set the lagging table `refusal` names back to `plan`'s starts on the partitions it is ahead on:
    its rows after them are deleted, its marker moved back (ONE verified commit, as an offset reset).

    Safe only where `plan` is READY on the anchor: a lagging table commits before its anchor in
    every run, so rows past the anchor there are only a stranded run's, and `plan` writes them again.
    Idempotent (a table already there verifies COMMITTED)."""
    starts = plan.start_offsets()
    offsets = {p: starts[p] for p in refusal.partitions if p in starts}
    write = ResetWrite(
        table=refusal.table,
        topic=plan.topic,
        run_id=plan.run_id,
        offsets=offsets,
        adopted=offsets_of(checkpoints.load_committed_offsets(plan.topic)),
        lease=lease,
        checkpoints=checkpoints,
    )
    commit_verified(tables, write, retry)
    logger.warning(
        "topic %s: run %s, stranded between its tables' commits, could not be finished; table %s set "
        "back to offsets %s, where the topic's anchor is, and run %s writes the range again",
        plan.topic,
        refusal.other_run_id,
        refusal.table,
        offsets,
        plan.run_id,
        extra={
            "topic": plan.topic,
            "stranded_run_id": refusal.other_run_id,
            "run_id": plan.run_id,
            "table": refusal.table,
            "offsets": offsets,
        },
    )
