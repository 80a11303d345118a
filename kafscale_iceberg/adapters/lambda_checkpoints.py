"""A `CheckpointStore` in another Lambda function: the stack's one function in the VPC, the only etcd
client (`functions/checkpoints.py`, `services/checkpoint_gateway.py`).

Each method is one synchronous `Invoke` carrying the call as JSON (`domain/checkpoint_wire.py`); the
store's answer, or the error it raised, comes back and is returned or raised as the same class, so
fencing (`LeaseLostError`), offset regressions and outages mean what they mean with the store in
process. A failed invocation (the function could not reach etcd in its timeout, was throttled, or
failed) is a `CheckpointUnavailableError` naming the function: transient, nothing written that the
caller could not find by retrying (every store call is one transaction, idempotent or refused).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.domain.checkpoint_wire import (
    CheckpointAnswer,
    CheckpointRequest,
    Operation,
    StoreScope,
    decode_error,
    decode_value,
    encode_updates,
)
from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant, LeaseHolder
from kafscale_iceberg.domain.offsets import CommittedOffsets, OffsetState, OffsetUpdate
from kafscale_iceberg.exceptions import CheckpointUnavailableError

Invoke = Callable[[bytes], bytes]
"""One synchronous invocation: request payload in, response payload out (raises on a failed one)."""


class LambdaCheckpointStore:
    """The checkpoint store of `function_name` (see the module docstring); `scope`: this process's
    key prefix, lease TTL and configured etcd endpoints; `invoke` replaces the boto3 call (tests)."""

    def __init__(
        self, function_name: str, scope: StoreScope, *, client: Any = None, invoke: Invoke | None = None
    ) -> None:
        self._function = function_name
        self._scope = scope
        self._client = client
        self._invoke = invoke or self._invoke_lambda

    def claim_lease(self, topic: str, *, owner_id: str, run_id: str) -> LeaseGrant | LeaseBusy:
        """Create the topic's lease if nobody holds it (the store's create-if-absent)."""
        value = self._call("claim_lease", topic=topic, owner_id=owner_id, run_id=run_id)
        assert isinstance(value, LeaseGrant | LeaseBusy)
        return value

    def renew_lease(self, grant: LeaseGrant) -> None:
        """Extend the lease; `LeaseLostError` when it is no longer this grant's. Idempotent."""
        self._call("renew_lease", topic=grant.topic, grant=grant)

    def release_lease(self, grant: LeaseGrant) -> bool:
        """Delete the lease if it is still this grant's. Idempotent."""
        return bool(self._call("release_lease", topic=grant.topic, grant=grant))

    def read_lease_holder(self, topic: str) -> LeaseHolder | None:
        """Who holds the topic's lease now, or None."""
        value = self._call("read_lease_holder", topic=topic)
        assert value is None or isinstance(value, LeaseHolder)
        return value

    def load_committed_offsets(self, topic: str) -> CommittedOffsets:
        """The topic's committed offsets (KafScale's keys)."""
        value = self._call("load_committed_offsets", topic=topic)
        assert isinstance(value, CommittedOffsets)
        return value

    def commit_offsets(
        self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]
    ) -> dict[int, OffsetState]:
        """Advance offsets in one transaction fenced by the lease (the store's)."""
        return self._states("commit_offsets", grant, updates)

    def reset_offsets(self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]) -> dict[int, OffsetState]:
        """Set offsets to any value, fenced like a commit (the store's)."""
        return self._states("reset_offsets", grant, updates)

    def read_cluster_metadata(self) -> ClusterMetadata | None:
        """The KafScale cluster's topic/partition snapshot, or None."""
        value = self._call("read_cluster_metadata")
        assert value is None or isinstance(value, ClusterMetadata)
        return value

    def _states(
        self, op: Operation, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]
    ) -> dict[int, OffsetState]:
        value = self._call(op, topic=grant.topic, grant=grant, updates=encode_updates(updates))
        assert isinstance(value, dict)
        return value

    def _call(self, op: Operation, **arguments: Any) -> object:
        request = CheckpointRequest(op=op, scope=self._scope, **arguments)
        try:
            answer = CheckpointAnswer.model_validate_json(self._invoke(request.model_dump_json().encode()))
        except CheckpointUnavailableError:
            raise
        except ValueError as exc:
            raise CheckpointUnavailableError(
                op,
                (self._function,),
                f"the checkpoint function {self._function} gave no checkpoint answer: {exc}",
            ) from exc
        if answer.error is not None:
            raise decode_error(answer.error, function=self._function, op=op)
        return decode_value(op, answer.value)

    def _invoke_lambda(self, payload: bytes) -> bytes:
        """One `RequestResponse` invocation; a function error or an API error is an outage."""
        if self._client is None:
            # Lambda's own retries cover throttling; a slow etcd is bounded by the function's timeout.
            self._client = boto3.client(
                "lambda", config=Config(retries={"mode": "standard"}, read_timeout=70)
            )
        operation = json.loads(payload)["op"]
        try:
            response = self._client.invoke(FunctionName=self._function, Payload=payload)
        except (ClientError, BotoCoreError) as exc:
            raise CheckpointUnavailableError(
                operation,
                (self._function,),
                f"invoking the checkpoint function {self._function} failed: {exc}",
            ) from exc
        body: bytes = response["Payload"].read()
        if response.get("FunctionError"):
            raise CheckpointUnavailableError(
                operation,
                (self._function,),
                f"the checkpoint function {self._function} failed ({response['FunctionError']}): "
                f"{body[:500]!r} (a timeout: it could not reach etcd; see its log group)",
            )
        return body
