"""One table of commit failures (`domain/commit_failures.py`), held for both loops: the one-machine loop
asks with the exception, the AWS abort step with the error name the state machine passes it (every
transient error named `TransientError` by `functions/runtime.step_errors`, and retried already)."""

from __future__ import annotations

import pytest

from functions.runtime import step_errors
from kafscale_iceberg.domain.commit_failures import (
    CommitAction,
    CommitDecision,
    CommitFailure,
    decide_commit_failure,
)
from kafscale_iceberg.domain.finished_runs import FinishedRun
from kafscale_iceberg.exceptions import (
    CatalogUnavailableError,
    CheckpointUnavailableError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    ConcurrentOffsetUpdateError,
    DataFileMissingError,
    DataFileRejectedError,
    DeadLetterAheadError,
    FieldIdMismatchError,
    InferredColumnChangedError,
    KafscaleIcebergError,
    LeaseLostError,
    OffsetMismatchError,
    OffsetsFencedError,
    OffsetsNotRecordedError,
    PartitionSpecMismatchError,
    RunNotCommittableError,
    RunSupersededError,
    SchemaChangeError,
    TableChangedError,
    UpsertLocateStaleError,
)

F, A = CommitFailure, CommitAction
_STALE = OffsetMismatchError("t", "orders", "r2", [(0, 4, 9)], repaired={0: 9})
_FINISHED = FinishedRun(
    run_id="r1", topic="orders", tables=("t__dlq", "t"), records=3, dead_letters=1, offsets={0: 9}
)

CASES: list[tuple[Exception, CommitFailure, CommitAction]] = [
    (_STALE, F.STALE_PLAN, A.REPLAN_NOW),
    (FieldIdMismatchError("t", "r2", {"a": (3, 4)}), F.STALE_PLAN, A.REPLAN_NOW),
    (InferredColumnChangedError("t", "r2", {"a": ("long", "string")}), F.STALE_PLAN, A.REPLAN_NOW),
    (UpsertLocateStaleError("t", "r2", 7, "snapshot 8 landed after it"), F.STALE_PLAN, A.REPLAN_NOW),
    (DataFileMissingError("r2", ["t"], ["s3://b/t/r2/f.parquet"]), F.STALE_PLAN, A.REPLAN_NOW),
    (RunSupersededError(_STALE, _FINISHED), F.SUPERSEDED, A.REPLAN_NOW),
    (LeaseLostError("orders", 7, "r2", "the lease expired"), F.FENCED, A.REPLAN_NOW),
    (OffsetsFencedError(LeaseLostError("orders", 7, "r2", "stalled"), "p0=9"), F.FENCED, A.REPLAN_NOW),
    (CommitConflictError("t", "r2", 3), F.CONFLICT, A.RETRY),
    (TableChangedError("t", "snapshot moved"), F.CONFLICT, A.RETRY),
    (CommitOutcomeUnknownError("t", "r2", "timeout"), F.CONFLICT, A.RETRY),
    (ConcurrentOffsetUpdateError("orders", (0,), 3), F.CONFLICT, A.RETRY),
    (CheckpointUnavailableError("put", ("etcd:2379",), "connection refused"), F.OUTAGE, A.BACK_OFF),
    (CatalogUnavailableError("sql", "load t", "database is locked"), F.OUTAGE, A.BACK_OFF),
    (
        OffsetsNotRecordedError(
            CheckpointUnavailableError("put", ("etcd:2379",), "down"), "orders", "r2", "0: 9"
        ),
        F.OUTAGE,
        A.BACK_OFF,
    ),
    (DeadLetterAheadError("t__dlq", "orders", "r2", "r1", [0]), F.STRANDED, A.FINISH_OR_REPLAN),
    (DataFileRejectedError("t", "r2", "INT96 timestamps"), F.DATA_REJECTED, A.ABORT_WITH_FIX),
    (RunNotCommittableError("r2", "the run failed"), F.DATA_REJECTED, A.ABORT_WITH_FIX),
    (SchemaChangeError("t", "a", "long", "string", "widen it by hand"), F.DATA_REJECTED, A.ABORT_WITH_FIX),
    (PartitionSpecMismatchError("t", "day(ts)", "hour(ts)"), F.DATA_REJECTED, A.ABORT_WITH_FIX),
    (AttributeError("'NoneType' object has no attribute 'offsets'"), F.DEFECT, A.STOP),
]


def _ids() -> list[str]:
    return [type(error).__name__ for error, _f, _a in CASES]


@pytest.mark.parametrize(("error", "failure", "action"), CASES, ids=_ids())
def test_the_one_machine_loop_reads_each_failure_as_the_table_says(
    error: Exception, failure: CommitFailure, action: CommitAction
) -> None:
    assert decide_commit_failure(error) == CommitDecision(failure, action)


def _as_the_abort_step_sees_it(error: Exception) -> str:
    """The error name a commit Lambda's failure reaches the abort step under (`$.error.Error`)."""

    @step_errors
    def commit() -> None:
        raise error

    try:
        commit()
    except Exception as raised:
        return type(raised).__name__
    raise AssertionError("the step did not fail")


@pytest.mark.parametrize(("error", "failure", "action"), CASES, ids=_ids())
def test_the_aws_abort_step_reads_the_same_meaning_from_the_error_name(
    error: Exception, failure: CommitFailure, action: CommitAction
) -> None:
    decision = decide_commit_failure(_as_the_abort_step_sees_it(error))
    if not isinstance(error, KafscaleIcebergError):
        assert decision is None  # not one of ours: the abort step backs off as for any failed run
        return
    assert decision is not None
    if error.transient:  # the state machine retried it already: what is left is to back off
        assert decision.action is A.BACK_OFF
    else:
        assert decision == CommitDecision(failure, action)
    local = decide_commit_failure(error)
    assert local is not None
    assert decision.topic_failed == local.topic_failed  # both loops count it against the topic alike


def test_a_cause_of_ours_under_a_foreign_error_is_what_decides() -> None:
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = UpsertLocateStaleError("t", "r2", 7, "gone")
    assert decide_commit_failure(wrapped) == CommitDecision(F.STALE_PLAN, A.REPLAN_NOW)


@pytest.mark.parametrize("name", ["LeaseLost", "States.Timeout", "Sandbox.Timedout", "JobFailed", ""])
def test_a_name_that_is_not_ours_is_not_a_commit_failure(name: str) -> None:
    assert decide_commit_failure(name) is None


@pytest.mark.parametrize(
    ("error", "refresh"),
    [
        (_STALE, True),
        (RunSupersededError(_STALE, _FINISHED), True),
        (LeaseLostError("o", 7, "r2", "x"), False),
    ],
    ids=["stale", "superseded", "fenced"],
)
def test_the_tables_are_recorded_again_after_a_stale_or_superseded_commit_on_both_loops(
    error: Exception, refresh: bool
) -> None:
    """`field-ids.json` (an upsert table's version) is written again when the tables moved past the
    plan: the same answer from the exception and from the error name the abort step sees."""
    local = decide_commit_failure(error)
    aws = decide_commit_failure(_as_the_abort_step_sees_it(error))
    assert local is not None
    assert aws is not None
    assert local.refresh_recorded_tables is aws.refresh_recorded_tables is refresh
