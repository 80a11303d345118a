"""Ports: the Protocols services depend on, one per role; `kafscale_iceberg.adapters` implement them.

Values crossing a process boundary are pydantic models; in-process values are frozen dataclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata
from kafscale_iceberg.domain.commits import TableCommit, TableSpec, TableState
from kafscale_iceberg.domain.field_ids import TableFieldIds
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant, LeaseHolder
from kafscale_iceberg.domain.offsets import CommittedOffsets, OffsetState, OffsetUpdate


class CheckpointStore(Protocol):
    """Per-topic leases and committed offsets (etcd, or a SQLite file on one machine).

    Every method either completes or changes nothing: one transaction each (an etcd commit wider
    than one transaction - 63 partitions by default - is one fenced transaction per slice).
    Errors: store down or busy -> `CheckpointUnavailableError` (transient); credentials ->
    `CheckpointAuthError`; a value we cannot read -> `CheckpointDataError`; fencing ->
    `LeaseLostError`.
    """

    def claim_lease(self, topic: str, *, owner_id: str, run_id: str) -> LeaseGrant | LeaseBusy:
        """Create the topic's lease if nobody holds it (create-if-absent, one transaction).

        Returns the grant, or `LeaseBusy` naming the current holder (nothing is left behind: the etcd
        lease granted for the attempt is revoked). Not idempotent: a second claim by the same owner
        while the first holds is busy too.
        """
        ...

    def renew_lease(self, grant: LeaseGrant) -> None:
        """Extend the lease by its TTL, from any process holding the grant. Idempotent.

        Raises `LeaseLostError` if the lease expired, was released, or the key now belongs to
        another claim.
        """
        ...

    def release_lease(self, grant: LeaseGrant) -> bool:
        """Delete the lease if (and only if) it is still this grant's. Idempotent.

        Returns True if this call released it, False if it was already gone or belongs to another
        claim (which is left alone).
        """
        ...

    def read_lease_holder(self, topic: str) -> LeaseHolder | None:
        """Who holds the topic's lease now, or None (a Go processor's partition lease counts)."""
        ...

    def list_lease_holders(self) -> list[LeaseHolder]:
        """Every live lease under the key prefix, ours and the Go processor's, sorted by topic."""
        ...

    def load_committed_offsets(self, topic: str) -> CommittedOffsets:
        """The topic's committed offsets; partitions without a stored value read as -1."""
        ...

    def commit_offsets(
        self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]
    ) -> dict[int, OffsetState]:
        """Advance offsets (and the watermarks beside them) in one transaction fenced by the lease.

        Idempotent: committing the same offsets again rewrites them unchanged (new `updated_at`).
        Raises `LeaseLostError` if the lease is not this grant's, `OffsetRegressionError` if any
        partition would move backwards; in both cases nothing is written. Returns what was written.
        """
        ...

    def reset_offsets(self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]) -> dict[int, OffsetState]:
        """Set offsets to any value, backwards included (replay --reset-offsets); fenced like a commit.

        Idempotent. Offset -1 means "nothing committed" (the partition is re-ingested from the start).
        """
        ...

    def read_cluster_metadata(self) -> ClusterMetadata | None:
        """The KafScale cluster's topic/partition snapshot, or None if this store has none."""
        ...


class TableCommitter(Protocol):
    """Iceberg tables as the commit step needs them (adapter: `IcebergTableCommitter`).

    Errors: `TableMissingError`, `SchemaChangeError`, `PartitionSpecMismatchError`,
    `DataFileRejectedError`, `TableMarkerError` (terminal); `CatalogUnavailableError`,
    `TableChangedError`, `CommitOutcomeUnknownError` (transient).
    """

    def ensure_table(self, spec: TableSpec, current: TableState | None = None) -> object:
        """Create the table (and namespace) if missing and allowed, then evolve its schema. Idempotent.

        `current`: the table's state as just read, checked without loading the table again.
        """
        ...

    def read_state(self, table: str, topic: str) -> TableState:
        """The table's current snapshot id and what it records for `topic` (`kafscale.*` properties)."""
        ...

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        """ONE Iceberg commit (files + marker + summary) built on exactly `expected`; the state after it.

        Built on the table version `expected` was read from when the adapter still holds it (no
        second load); the catalog refuses the commit if the table moved since.

        `TableChangedError` when the table is no longer `expected` (nothing written);
        `CommitOutcomeUnknownError` when it may or may not have landed: re-read and verify.
        `commit.delete_after` deletes rows in that same commit (an offset reset).
        """
        ...

    def count_rows(self, table: str, after: Mapping[int, int]) -> int:
        """Rows of `table` whose `offset` is greater than `after[partition]` (what a reset would delete)."""
        ...

    def field_ids(self, table: str) -> TableFieldIds:
        """The table's top-level column ids and its last assigned column id (`TableMissingError`)."""
        ...
