"""The one etcd client of an AWS deployment: a `CheckpointStore` call, as JSON, run on the store.

On AWS only `functions/checkpoints.py` runs in the VPC; every other function calls AWS APIs from
outside it and reaches etcd through that function (`adapters/lambda_checkpoints.py`), so the VPC needs
no NAT gateway and no interface endpoint. The lease stays the fencing mechanism: each call is the
store's own transaction, run here unchanged, and the offsets stay in KafScale's keys
(`domain/checkpoint_keys.py`). The request carries the caller's key prefix and lease TTL
(`StoreScope`), so this function reads no config file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafscale_iceberg.domain.checkpoint_wire import (
    CheckpointAnswer,
    CheckpointRequest,
    StoreScope,
    decode_updates,
    encode_error,
    encode_value,
)
from kafscale_iceberg.exceptions import KafscaleIcebergError
from kafscale_iceberg.ports import CheckpointStore

logger = logging.getLogger(__name__)


def serve_checkpoint_request(
    stores: Callable[[StoreScope], CheckpointStore], request: CheckpointRequest
) -> CheckpointAnswer:
    """Run `request` on the store of its scope; the store's error travels back in the answer (the
    caller raises it again), never as this function's failure."""
    store = stores(request.scope)
    try:
        value = _call(store, request)
    except KafscaleIcebergError as exc:
        logger.info(
            "checkpoint call refused",
            extra={"op": request.op, "topic": request.topic, "error": type(exc).__name__},
        )
        return CheckpointAnswer(error=encode_error(exc))
    return CheckpointAnswer(value=encode_value(value))


def _call(store: CheckpointStore, request: CheckpointRequest) -> object:
    op, grant = request.op, request.grant
    if op == "claim_lease":
        return store.claim_lease(request.topic, owner_id=request.owner_id, run_id=request.run_id)
    if op == "read_lease_holder":
        return store.read_lease_holder(request.topic)
    if op == "load_committed_offsets":
        return store.load_committed_offsets(request.topic)
    if op == "read_cluster_metadata":
        return store.read_cluster_metadata()
    if grant is None:
        raise ValueError(f"checkpoint call {op!r} needs the lease grant; the request has none")
    if op == "renew_lease":
        store.renew_lease(grant)
        return None
    if op == "release_lease":
        return store.release_lease(grant)
    updates = decode_updates(request.updates)
    if op == "commit_offsets":
        return store.commit_offsets(grant, updates)
    return store.reset_offsets(grant, updates)
