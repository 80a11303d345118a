"""Topic leases: who may run (and commit) a topic now, and the fencing token that proves it.

One lease per topic. The launcher claims it, the Step Functions loop renews it, the commit step uses
it to fence the offset write and then releases it - three processes - so the handle (`LeaseGrant`)
is a pydantic model that travels as JSON.

The fencing token is the etcd `create_revision` of the lease key (in SQLite: a counter that never
repeats). A key deleted and created again - after expiry, by another claim - gets a new, larger
token, so comparing the token in a transaction tells "still ours" from "someone else's now".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Token = Annotated[int, Field(ge=1)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LeaseGrant(_Model):
    """A claimed topic lease; serialize with `to_json()`, rebuild anywhere with `model_validate_json()`."""

    topic: str
    owner_id: str
    """Who claimed it: host name, Lambda function name, ... (free text, for people)."""
    run_id: str
    token: Token
    """Fencing token: the lease key's etcd create_revision (SQLite: a never-repeating counter)."""
    lease_id: int
    """The etcd lease the key is attached to (SQLite: equal to the token)."""
    ttl_seconds: Annotated[int, Field(ge=1)]
    """The TTL the store granted (etcd may raise a too-small request to its minimum)."""
    claimed_at_ms: int

    def to_json(self) -> str:
        """Compact JSON, for a Step Functions state or a Lambda payload."""
        return self.model_dump_json()


class LeaseHolder(_Model):
    """Who holds a topic lease now (for status, the reconciler, and a busy claim's answer)."""

    topic: str
    owner_id: str
    run_id: str | None
    """None for a KafScale Go processor's lease (it records no run)."""
    token: Token
    lease_id: int
    claimed_at_ms: int | None = None
    expires_at_ms: int | None = None
    """The holder's own estimate at its last claim or renewal; the store enforces the real TTL."""
    partition: int | None = None
    """Set when this is a KafScale Go processor's per-partition lease under the same key prefix."""

    @property
    def is_go_processor(self) -> bool:
        """True for a Go processor's per-partition lease (`{prefix}/leases/{topic}/{partition}`)."""
        return self.partition is not None

    def describe(self) -> str:
        """One line for logs and messages: owner, run and token."""
        if self.partition is not None:
            return (
                f"KafScale Go processor {self.owner_id!r} on partition {self.partition} (token {self.token})"
            )
        return f"owner {self.owner_id!r}, run {self.run_id!r} (token {self.token})"


@dataclass(frozen=True)
class LeaseBusy:
    """A claim lost: the topic's lease is held by `holder`. Not an error: try again when it is released."""

    topic: str
    holder: LeaseHolder

    def describe(self) -> str:
        """One line for logs: which topic, held by whom."""
        return f"topic {self.topic!r} is leased by {self.holder.describe()}"


class LeaseRecord(BaseModel):
    """The value stored under `{prefix}/leases/{topic}` in etcd (compact JSON).

    `owner_id` and `lease_expires_at` mean what they mean in the Go processor's lease value.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    owner_id: str
    run_id: str
    claimed_at_ms: int
    lease_expires_at: int
    ttl_seconds: int


class GoLeaseRecord(BaseModel):
    """The Go processor's per-partition lease value: `{"owner_id":…,"lease_expires_at":…,"generation":1}`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    owner_id: str = ""
    lease_expires_at: int = 0
    generation: int = 0
