"""The checkpoint store's calls as JSON: what the stack's functions outside the VPC send the one
function inside it that talks to etcd (`functions/checkpoints.py`), and what it answers.

A request names the `CheckpointStore` method (`op`), its arguments, and the caller's store settings
(`StoreScope`: key prefix, lease TTL, the configured endpoints), so the function inside the VPC reads
no config file and needs no AWS API but its own logs. An answer carries the method's value, or the
error it raised (`WireError`: its class name, message and attributes), which the caller raises again
as the same class, so fencing (`LeaseLostError`), regressions and outages mean what they mean in
process. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kafscale_iceberg import exceptions
from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant, LeaseHolder
from kafscale_iceberg.domain.offsets import CommittedOffsets, OffsetState, OffsetUpdate
from kafscale_iceberg.exceptions import CheckpointUnavailableError, KafscaleIcebergError

Operation = Literal[
    "claim_lease",
    "renew_lease",
    "release_lease",
    "read_lease_holder",
    "load_committed_offsets",
    "commit_offsets",
    "reset_offsets",
    "read_cluster_metadata",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StoreScope(_Model):
    """The caller's store settings: `offsets.key_prefix`, `offsets.lease_ttl_seconds`, `etcd.endpoints`
    (the function inside the VPC prefers the endpoints it was deployed with)."""

    key_prefix: str
    lease_ttl_seconds: int = Field(ge=1)
    endpoints: tuple[str, ...] = ()


class CheckpointRequest(_Model):
    """One `CheckpointStore` call."""

    op: Operation
    scope: StoreScope
    topic: str = ""
    owner_id: str = ""
    run_id: str = ""
    grant: LeaseGrant | None = None
    updates: dict[int, tuple[int, int]] = Field(default_factory=dict)
    """partition -> (offset, last_timestamp_ms)"""


class WireError(_Model):
    """An error the store raised: its class (in `kafscale_iceberg.exceptions`), message, attributes."""

    type: str
    message: str
    transient: bool
    attributes: dict[str, Any] = Field(default_factory=dict)


class CheckpointAnswer(_Model):
    """The call's value (`value`, JSON as `encode_value` made it), or its error."""

    value: Any = None
    error: WireError | None = None


def encode_updates(updates: Mapping[int, OffsetUpdate]) -> dict[int, tuple[int, int]]:
    """Offset updates as the request carries them."""
    return {p: (u.offset, u.last_timestamp_ms) for p, u in updates.items()}


def decode_updates(updates: Mapping[int, tuple[int, int]]) -> dict[int, OffsetUpdate]:
    """The request's offset updates."""
    return {int(p): OffsetUpdate(offset, ts) for p, (offset, ts) in updates.items()}


def encode_states(states: Mapping[int, OffsetState]) -> dict[str, list[int]]:
    """Offset states as JSON: partition -> [offset, last_timestamp_ms, updated_at_ms]."""
    return {str(p): [s.offset, s.last_timestamp_ms, s.updated_at_ms] for p, s in states.items()}


def decode_states(value: Mapping[str, list[int]]) -> dict[int, OffsetState]:
    """The offset states `encode_states` wrote."""
    return {int(p): OffsetState(*triple) for p, triple in value.items()}


def encode_value(value: object) -> Any:
    """A `CheckpointStore` method's value as JSON (see `decode_value` for each method's)."""
    if isinstance(value, LeaseBusy):
        return {"busy": value.holder.model_dump(mode="json"), "topic": value.topic}
    if isinstance(value, LeaseGrant | LeaseHolder):
        return value.model_dump(mode="json")
    if isinstance(value, CommittedOffsets):
        return {"topic": value.topic, "states": encode_states(value.states)}
    if isinstance(value, ClusterMetadata):
        return {t: sorted(p) for t, p in value.partitions_by_topic.items()}
    if isinstance(value, dict):
        return encode_states(value)
    return value  # bool, None


def decode_value(op: Operation, value: Any) -> object:
    """What method `op` returns, from the JSON `encode_value` made of it."""
    if op == "claim_lease":
        if "busy" in value:
            holder = LeaseHolder.model_validate(value["busy"])
            return LeaseBusy(str(value["topic"]), holder)
        return LeaseGrant.model_validate(value)
    if op == "read_lease_holder":
        return None if value is None else LeaseHolder.model_validate(value)
    if op == "load_committed_offsets":
        return CommittedOffsets(value["topic"], decode_states(value["states"]))
    if op in ("commit_offsets", "reset_offsets"):
        return decode_states(value)
    if op == "read_cluster_metadata":
        return None if value is None else ClusterMetadata({t: frozenset(p) for t, p in value.items()})
    return value


def encode_error(error: KafscaleIcebergError) -> WireError:
    """An error of the store as the answer carries it (attributes that are not JSON are left out)."""
    attributes = {
        k: v for k, v in vars(error).items() if v is None or isinstance(v, str | int | float | list | tuple)
    }
    return WireError(
        type=type(error).__name__, message=str(error), transient=error.transient, attributes=attributes
    )


def decode_error(error: WireError, *, function: str, op: Operation) -> KafscaleIcebergError:
    """The error to raise for an answer's: the same class with the same message and attributes (its
    constructor is not run again: the message is already made); a class this package does not have
    (a newer function) is a `CheckpointUnavailableError` naming it."""
    cls = getattr(exceptions, error.type, None)
    if not (isinstance(cls, type) and issubclass(cls, KafscaleIcebergError)):
        return CheckpointUnavailableError(
            op, (function,), f"the checkpoint function raised {error.type}: {error.message}"
        )
    raised = cls.__new__(cls)
    Exception.__init__(raised, error.message)
    vars(raised).update(error.attributes)
    return raised
