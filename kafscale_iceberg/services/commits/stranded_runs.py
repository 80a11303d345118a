"""Recovery of a run stranded between its tables' commits (a crash after a table committed before the
topic's anchor - the dead-letter table, a routed or another mapping's table - and before the anchor).

The next plan's commit runs into that table's marker (`DeadLetterAheadError` naming the stranded run)
and `finish_stranded` commits the stranded run from its own plan and result, under the new run's lease,
so the new plan's commit can go on; without the stranded run's documents the refusal stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafscale_iceberg.domain.finished_runs import FinishedRun
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import RunPlan, RunResult
from kafscale_iceberg.exceptions import (
    DeadLetterAheadError,
    KafscaleIcebergError,
    OffsetMismatchError,
    RunNotCommittableError,
)
from kafscale_iceberg.services.commits.outcome import CommitOutcome
from kafscale_iceberg.services.commits.run_writes import check_committable

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

    None when it cannot be committed (no loader, its documents gone, its result not committable, a
    table not where it starts): the refusal stands. Any other product error (the catalog unavailable,
    a table that may not be created) is raised in the refusal's place: it says better what to do.
    """
    if load is None or refusal.other_run_id is None:
        return None
    try:
        loaded = load(refusal.topic, refusal.other_run_id)
        if loaded is None:
            return None
        plan, result = loaded
        check_committable(plan, result, lease)
        outcome = commit(plan, result)
    except (DeadLetterAheadError, OffsetMismatchError, RunNotCommittableError) as exc:
        logger.warning(
            "could not finish the run stranded between its tables' commits",
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
