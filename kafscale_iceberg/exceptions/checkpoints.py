"""The checkpoint store (etcd or SQLite): leases and offsets."""

from __future__ import annotations

from kafscale_iceberg.exceptions.base import KafscaleIcebergError, TransientError


class CheckpointError(KafscaleIcebergError):
    """A lease or offset operation on the checkpoint store (etcd or the SQLite file) failed."""


class CheckpointUnavailableError(CheckpointError, TransientError):
    """The checkpoint store could not be reached (or was busy); nothing was written. Transient.

    `problem` names every endpoint (or the SQLite file) that was tried and why each failed.
    """

    def __init__(self, operation: str, targets: tuple[str, ...], problem: str) -> None:
        self.operation = operation
        self.targets = targets
        self.problem = problem
        super().__init__(
            f"checkpoint store unavailable while trying to {operation}: {problem} (nothing was "
            "written; check that the store is up and the endpoints (etcd.endpoints) are right, then retry)"
        )


class OffsetsNotRecordedError(CheckpointUnavailableError):
    """Every table of the run is committed, but the checkpoint store could not take its offsets (an
    outage). Transient, and nothing is lost: the rows are in, and the store catches up from the table
    (its record wins) when it is back - at the next plan of the topic, or a retry of this commit."""

    def __init__(
        self, unavailable: CheckpointUnavailableError, topic: str, run_id: str, offsets: str
    ) -> None:
        super().__init__(unavailable.operation, unavailable.targets, unavailable.problem)
        self.topic = topic
        self.run_id = run_id
        self.args = (
            f"run {run_id!r} of topic {topic!r} is committed to its tables, but the checkpoint store could "
            f"not record its offsets ({offsets}): {unavailable.problem}; they catch up from the table "
            "once the store is back - nothing to do",
        )


class CheckpointAuthError(CheckpointError):
    """The checkpoint store rejected our credentials or permissions. Terminal: fix the config.

    Names the user, never the password.
    """

    def __init__(self, operation: str, targets: tuple[str, ...], username: str | None, problem: str) -> None:
        self.operation = operation
        self.targets = targets
        self.username = username
        self.problem = problem
        who = f"user {username!r}" if username else "no user (etcd.username is empty)"
        super().__init__(
            f"checkpoint store at {', '.join(targets)} refused to {operation} as {who}: {problem} "
            "(fix etcd.username / etcd.password, or grant the user read-write access to the key prefix)"
        )


class CheckpointRequestError(CheckpointError):
    """The checkpoint store answered with an error we do not expect to go away by retrying."""

    def __init__(self, operation: str, targets: tuple[str, ...], problem: str) -> None:
        self.operation = operation
        self.targets = targets
        self.problem = problem
        super().__init__(f"checkpoint store at {', '.join(targets)} failed to {operation}: {problem}")


class CheckpointDataError(CheckpointError):
    """A value stored under one of our keys is not what this product (or the Go processor) writes.

    Terminal: someone else writes under the key prefix, or the value was edited by hand. Inspect the
    key and fix or delete it; never guessed around.
    """

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"checkpoint key {key!r}: {problem} (inspect the key; fix or delete the value)")


class LeaseLostError(CheckpointError):
    """This run's topic lease expired, was released, or now belongs to another claim.

    Terminal for this run: it must stop without committing offsets (nothing was written by the call
    that raised this, except - for a commit too wide for one etcd transaction - the partitions in
    `written_partitions`). The topic is not stuck: the new holder, or the next run, carries on.
    """

    def __init__(
        self, topic: str, token: int, run_id: str, reason: str, written_partitions: tuple[int, ...] = ()
    ) -> None:
        self.topic = topic
        self.token = token
        self.run_id = run_id
        self.reason = reason
        self.written_partitions = written_partitions
        written = (
            f"the offsets of partitions {list(written_partitions)} were written before the loss (a "
            "commit wider than one etcd transaction); nothing else was written"
            if written_partitions
            else "nothing was written"
        )
        super().__init__(
            f"lease on topic {topic!r} lost by run {run_id!r} (fencing token {token}): {reason}; "
            f"{written}: stop this run, the current or next lease holder takes over"
        )


class OffsetsFencedError(LeaseLostError):
    """Every table of the run is committed (its rows are in), but its lease was lost before the
    checkpoint store took its offsets (this process stalled past the lease, or another claim took
    it). Fencing, not a failure of the run: nothing is lost or doubled, and the store catches up
    from the table (its record wins) at the next plan of the topic - whoever makes it."""

    def __init__(self, lost: LeaseLostError, offsets: str) -> None:
        super().__init__(lost.topic, lost.token, lost.run_id, lost.reason, lost.written_partitions)
        self.args = (
            f"run {lost.run_id!r} of topic {lost.topic!r} is committed to its tables (offsets {offsets}), "
            f"but its lease was lost before the checkpoint store took them: {lost.reason}; the store "
            "catches up from the table at the next plan of the topic (nothing to do)",
        )


class OffsetRegressionError(CheckpointError):
    """A commit would move a committed offset backwards. Terminal; nothing was written.

    A deliberate rewind is `reset_offsets` (the `replay --reset-offsets` command), never a commit.
    """

    def __init__(self, topic: str, partition: int, committed: int, attempted: int) -> None:
        self.topic = topic
        self.partition = partition
        self.committed = committed
        self.attempted = attempted
        super().__init__(
            f"refusing to move the committed offset of {topic}/{partition} backwards from {committed} "
            f"to {attempted} (nothing was written; to re-ingest on purpose, reset the offsets with "
            "`replay --reset-offsets`)"
        )


class ConcurrentOffsetUpdateError(CheckpointError, TransientError):
    """The offsets changed under us between read and write, every attempt, while our lease held.

    Transient: something writes offsets without holding the topic lease, most likely a KafScale Go
    processor still running against the same key prefix. Stop it before switching over.
    """

    def __init__(self, topic: str, partitions: tuple[int, ...], attempts: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.attempts = attempts
        super().__init__(
            f"offsets of topic {topic!r} partitions {list(partitions)} changed concurrently {attempts} "
            "times while this run held the lease (nothing was written; is a KafScale Go processor "
            "still running against the same offsets.key_prefix? stop it, then retry)"
        )
