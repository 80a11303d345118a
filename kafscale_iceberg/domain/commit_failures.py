"""What a commit failure means, decided once: the one-machine loop (`local/pipeline.py`) and the AWS
abort step (`services/run_steps.py`) both ask `decide_commit_failure`, so they cannot disagree.

- stale plan (`OffsetMismatchError`, `FieldIdMismatchError` and `InferredColumnChangedError`,
  `UpsertLocateStaleError`, `DataFileMissingError`): re-plan now - not the topic's failure, no
  backoff, no ERROR;
- superseded (`RunSupersededError`): re-plan now - a recovery finished an earlier stranded run;
- fenced (`LeaseLostError`): re-plan now - this run lost its lease (it stalled past it, or another
  claim took it); the holder or the next plan carries on;
- conflict (`CommitConflictError`, `TableChangedError`, `CommitOutcomeUnknownError`,
  `ConcurrentOffsetUpdateError`): retry (each attempt re-verifies); still failing after the attempts:
  back off;
- outage (every other transient error: `CheckpointUnavailableError`, `CatalogUnavailableError`,
  `OffsetsNotRecordedError`, ...): back off and try again;
- stranded run that could not be finished (`DeadLetterAheadError`): finish or re-plan - counted as
  the topic's failure (backoff; `status` shows it);
- data rejected (every other error of ours: `DataFileRejectedError`, `RunNotCommittableError`, a
  schema or partition refusal, ...): abort; its message says what to fix;
- defect (anything else): stop.

On AWS the abort step only has the failed task's error name (`$.error.Error`): a class name of
`kafscale_iceberg.exceptions`, or `TransientError` for every transient one (`functions/runtime.
step_errors`; the state machine has retried it already, so it means: back off). A name that is not
ours (`LeaseLost`, `States.Timeout`, a job's failure) is not a commit failure: `None`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kafscale_iceberg import exceptions
from kafscale_iceberg.exceptions import KafscaleIcebergError


class CommitFailure(StrEnum):
    """What went wrong, in the terms an operator acts on."""

    STALE_PLAN = "stale_plan"
    SUPERSEDED = "superseded"
    FENCED = "fenced"
    CONFLICT = "conflict"
    OUTAGE = "outage"
    STRANDED = "stranded"
    DATA_REJECTED = "data_rejected"
    DEFECT = "defect"


class CommitAction(StrEnum):
    """What the caller does about it."""

    REPLAN_NOW = "re-plan now"
    RETRY = "retry"
    BACK_OFF = "back off"
    FINISH_OR_REPLAN = "finish or re-plan"
    ABORT_WITH_FIX = "abort with the fix"
    STOP = "stop"


@dataclass(frozen=True)
class CommitDecision:
    """A commit failure's meaning and what to do about it."""

    failure: CommitFailure
    action: CommitAction

    @property
    def topic_failed(self) -> bool:
        """Whether it counts against the topic (its backoff streak, an ERROR line, `errors_total`):
        False for a plan that only has to be made again."""
        return self.action is not CommitAction.REPLAN_NOW

    @property
    def refresh_recorded_tables(self) -> bool:
        """Whether the tables moved past what the plan was made from (a stale plan, a stranded run
        finished first): the commit step records their ids and upsert versions again
        (`field-ids.json`), so the next plan - on either loop - locates in the current version."""
        return self.failure in (CommitFailure.STALE_PLAN, CommitFailure.SUPERSEDED)


_BY_CLASS: tuple[tuple[type[KafscaleIcebergError], CommitFailure, CommitAction], ...] = (
    (exceptions.RunSupersededError, CommitFailure.SUPERSEDED, CommitAction.REPLAN_NOW),
    (exceptions.OffsetMismatchError, CommitFailure.STALE_PLAN, CommitAction.REPLAN_NOW),
    (exceptions.FieldIdMismatchError, CommitFailure.STALE_PLAN, CommitAction.REPLAN_NOW),
    (exceptions.UpsertLocateStaleError, CommitFailure.STALE_PLAN, CommitAction.REPLAN_NOW),
    (exceptions.DataFileMissingError, CommitFailure.STALE_PLAN, CommitAction.REPLAN_NOW),
    (exceptions.LeaseLostError, CommitFailure.FENCED, CommitAction.REPLAN_NOW),
    (exceptions.CommitConflictError, CommitFailure.CONFLICT, CommitAction.RETRY),
    (exceptions.TableChangedError, CommitFailure.CONFLICT, CommitAction.RETRY),
    (exceptions.CommitOutcomeUnknownError, CommitFailure.CONFLICT, CommitAction.RETRY),
    (exceptions.ConcurrentOffsetUpdateError, CommitFailure.CONFLICT, CommitAction.RETRY),
    (exceptions.DeadLetterAheadError, CommitFailure.STRANDED, CommitAction.FINISH_OR_REPLAN),
)


def decide_commit_failure(error: BaseException | str) -> CommitDecision | None:
    """What the commit failure `error` means (an exception, or its error name as Step Functions passes
    it); None for a name that is not one of ours (not a commit failure). Pure, never raises."""
    if isinstance(error, str):
        if error == exceptions.TransientError.__name__:  # retried by the state machine already
            return CommitDecision(CommitFailure.OUTAGE, CommitAction.BACK_OFF)
        named = getattr(exceptions, error, None)
        if not (isinstance(named, type) and issubclass(named, KafscaleIcebergError)):
            return None
        return _decide_class(named)
    ours = _ours(error)
    if ours is None:
        return CommitDecision(CommitFailure.DEFECT, CommitAction.STOP)
    return _decide_class(type(ours))


def _decide_class(kind: type[KafscaleIcebergError]) -> CommitDecision:
    for known, failure, action in _BY_CLASS:
        if issubclass(kind, known):
            return CommitDecision(failure, action)
    if kind.transient:
        return CommitDecision(CommitFailure.OUTAGE, CommitAction.BACK_OFF)
    return CommitDecision(CommitFailure.DATA_REJECTED, CommitAction.ABORT_WITH_FIX)


def _ours(error: BaseException) -> KafscaleIcebergError | None:
    """The first error of ours in `error`'s chain of causes (a foreign error raised from one)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KafscaleIcebergError):
            return seen
        seen = seen.__cause__
    return None
