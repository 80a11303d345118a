"""The exactly-once core: one change to one table, verified before every attempt, never retried blindly.

Every table write of the product - a run's files (`services.commits.run_writes`), an explicit offset reset
(`services.offset_reset`) - is a `TableWrite` handed to `commit_verified`:

1. read the table's state (or take the one the caller just read);
2. `verify` it: the change is in already (`Standing.COMMITTED`: done, nothing written), it may be
   made (`Standing.READY`), or it must not be (the write raises, nothing written);
3. `build` the ONE Iceberg commit from that state and commit it built on exactly that state;
4. when the table changed meanwhile (`TableChangedError`: nothing written) or the outcome is unknown
   (`CommitOutcomeUnknownError`: it may have landed), back off and go to 1 - the state is read and
   verified again, so a change that landed is never made twice. After the last attempt one more
   verification decides: in, or `CommitConflictError` (transient).

`Written.committed` says whether the change landed through this call: True when a commit was
confirmed, or when the change is found in on re-verification after an attempt whose outcome was
unknown (that attempt landed: the lease fences every other writer of the run); False when the change
was in before this call, or got in while every attempt of this call was refused (someone else's).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, TypedDict, Unpack

from kafscale_iceberg.domain.commits import Standing, TableCommit, TableMarker, TableState
from kafscale_iceberg.exceptions import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    TableChangedError,
    TableMissingError,
)
from kafscale_iceberg.ports import CheckpointStore, TableCommitter

logger = logging.getLogger(__name__)

DEFAULT_COMMIT_ATTEMPTS = 5


@dataclass(frozen=True)
class CommitRetry:
    """How often one table change is tried while the table keeps changing under it, and the backoff
    before each retry (`backoff_s * attempt`, slept with `sleep`)."""

    attempts: int = DEFAULT_COMMIT_ATTEMPTS
    backoff_s: float = 0.2
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")


class CommitRetryOptions(TypedDict, total=False):
    """The keyword arguments of a `TableWriter` that make its `CommitRetry` (its defaults when left out)."""

    attempts: int
    backoff_s: float
    sleep: Callable[[float], None]


class TableWriter:
    """What every use case writing tables holds: the tables, the checkpoint store, and its `CommitRetry`
    (`attempts`, `backoff_s` and `sleep` bound the retries of each table's commit)."""

    def __init__(
        self, tables: TableCommitter, checkpoints: CheckpointStore, **retry: Unpack[CommitRetryOptions]
    ) -> None:
        self._tables = tables
        self._checkpoints = checkpoints
        self._retry = CommitRetry(**retry)


@dataclass(frozen=True)
class TableWrite(ABC):
    """One change to one table for one topic: how to verify the table's state, and the commit to make."""

    table: str
    topic: str
    run_id: str
    action: ClassVar[str] = "commit"
    """What the change is, for logs: `commit`, `offset reset`, `replay commit`."""

    @abstractmethod
    def verify(self, state: TableState) -> Standing:
        """`COMMITTED` (the change is in) or `READY`; raises when the change must not be made."""

    @abstractmethod
    def build(self, state: TableState) -> TableCommit:
        """The ONE commit making the change on `state`."""

    def landed(self, commit: TableCommit, after: TableState) -> None:
        """Called once the commit is confirmed (a log line naming what changed)."""
        logger.info(
            f"{self.action} landed",
            extra={
                "table": self.table,
                "topic": self.topic,
                "run_id": self.run_id,
                "files": len(commit.file_uris),
                "snapshot_id": after.snapshot_id,
            },
        )


@dataclass(frozen=True)
class Written:
    """Where a table stands after `commit_verified`, and whether this call's commit landed."""

    state: TableState
    committed: bool


def commit_verified(
    tables: TableCommitter, write: TableWrite, retry: CommitRetry, *, known: TableState | None = None
) -> Written:
    """Make `write`'s change to its table exactly once (see the module docstring). Idempotent.

    `known` is the table's state as just read by the caller: the first attempt verifies and builds on
    it instead of reading the table again (the catalog's commit still refuses it if the table moved).
    Raises what `write.verify` raises, `CommitConflictError` (transient: the table kept changing),
    and the adapter's errors.
    """
    unknown = False  # an attempt whose outcome is unknown may have landed
    for attempt in range(1, retry.attempts + 1):
        state = known if known is not None and attempt == 1 else tables.read_state(write.table, write.topic)
        if write.verify(state) is Standing.COMMITTED:
            if attempt > 1:
                logger.info(
                    f"{write.action} found in the table on verification", extra={"table": write.table}
                )
            return Written(state, committed=unknown)
        commit = write.build(state)
        try:
            after = tables.commit(state, commit)
        except (TableChangedError, CommitOutcomeUnknownError) as exc:
            unknown = unknown or isinstance(exc, CommitOutcomeUnknownError)
            logger.warning(
                f"{write.action} not confirmed; verifying before another attempt",
                extra={"table": write.table, "run_id": write.run_id, "attempt": attempt, "problem": str(exc)},
            )
            if attempt < retry.attempts:
                retry.sleep(retry.backoff_s * attempt)
            continue
        write.landed(commit, after)
        return Written(after, committed=True)
    # The last attempt's outcome may be unknown: one more verification decides.
    state = tables.read_state(write.table, write.topic)
    if write.verify(state) is Standing.COMMITTED:
        return Written(state, committed=unknown)
    raise CommitConflictError(write.table, write.run_id, retry.attempts)


def read_state_if_exists(tables: TableCommitter, table: str, topic: str) -> TableState | None:
    """The table's state for `topic`, None when the table does not exist."""
    try:
        return tables.read_state(table, topic)
    except TableMissingError:
        return None


def read_state_or_empty(tables: TableCommitter, table: str, topic: str) -> TableState:
    """The table's state; a missing table reads as one that recorded nothing."""
    state = read_state_if_exists(tables, table, topic)
    return state or TableState(table=table, topic=topic, snapshot_id=None, marker=TableMarker(offsets=None))
