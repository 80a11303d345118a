"""`EtcdCheckpointStore`: per-topic leases and KafScale-compatible offsets in etcd.

Keys and values: `domain/checkpoint_keys.py`, `domain/offsets.py`, `domain/leases.py`; the design is
in docs/architecture.md ("Leases and offsets"). The connection — failover across `etcd.endpoints`,
TLS, authentication and its token renewal, and the translation of etcd errors into
`CheckpointUnavailableError` / `CheckpointAuthError` / `CheckpointRequestError` — is `EtcdClient`
(`adapters/etcd_client.py`, the only module that imports `etcd3` and `grpc`).

Every operation is one etcd transaction (or a read plus one fenced transaction), so a failure never
leaves half a write behind. Every operation is safe to re-run after an ambiguous failure, on the same
or another endpoint (see `claim_lease` for the one that needs care).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

from pydantic import ValidationError

from kafscale_iceberg.adapters.checkpoint_stores import CheckpointStoreBase, wall_clock_ms
from kafscale_iceberg.adapters.etcd_client import (
    EtcdClient,
    EtcdConnectionOptions,
    EtcdErrors,
    etcd_txn,
    is_lease_not_found,
)
from kafscale_iceberg.domain.checkpoint_keys import (
    KAFSCALE_METADATA_SNAPSHOT_KEY,
    parse_partition,
    prefix_range_end,
)
from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata, parse_metadata_snapshot
from kafscale_iceberg.domain.leases import GoLeaseRecord, LeaseBusy, LeaseGrant, LeaseHolder, LeaseRecord
from kafscale_iceberg.domain.offsets import (
    CommittedOffsets,
    OffsetState,
    OffsetUpdate,
    decode_partition_states,
    encode_offset_state,
    plan_offset_write,
)
from kafscale_iceberg.exceptions import (
    CheckpointAuthError,
    CheckpointDataError,
    CheckpointRequestError,
    CheckpointUnavailableError,
    ConcurrentOffsetUpdateError,
    LeaseLostError,
)

logger = logging.getLogger(__name__)

_COMMIT_ATTEMPTS = 5


class EtcdCheckpointStore(CheckpointStoreBase):
    """`CheckpointStore` over etcd. See the module docstring; keys and values in `CheckpointKeys`."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        key_prefix: str = "processors",
        lease_ttl_seconds: int = 30,
        metadata_snapshot_key: str = KAFSCALE_METADATA_SNAPSHOT_KEY,
        max_txn_ops: int = 128,
        now_ms: Callable[[], int] = wall_clock_ms,
        **connection: Unpack[EtcdConnectionOptions],
    ) -> None:
        """Connect lazily to `endpoints` (URLs like `http://host:2379`; https means TLS).

        `connection` (credentials, TLS files, `timeout_seconds`, and `client`, a pre-built
        `etcd3.Etcd3Client` for tests) is `EtcdClient`'s. `lease_ttl_seconds` is the etcd lease of
        a topic claim; `max_txn_ops` is the server's `--max-txn-ops` (etcd's default 128).
        """
        super().__init__(key_prefix=key_prefix, lease_ttl_seconds=lease_ttl_seconds, now_ms=now_ms)
        if max_txn_ops < 3:
            raise ValueError(f"max_txn_ops must be >= 3 (one partition per transaction), got {max_txn_ops}")
        self._etcd = EtcdClient(endpoints, **connection)
        self._metadata_snapshot_key = metadata_snapshot_key
        self._max_txn_ops = max_txn_ops
        self._touched_at: dict[int, float] = {}
        """By etcd lease id: when this process last claimed it or last tried to renew it (monotonic,
        whatever the answer), to tell a lease lost because this process stalled past its TTL (it did
        not even try) from an outage (it kept trying) or another claim."""

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The endpoint URLs, as configured."""
        return self._etcd.endpoints

    def close(self) -> None:
        """Close every connection this store opened (a pre-built client is left to its owner)."""
        self._etcd.close()

    def __enter__(self) -> EtcdCheckpointStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- leases ------------------------------------------------------------------------------------

    def claim_lease(self, topic: str, *, owner_id: str, run_id: str) -> LeaseGrant | LeaseBusy:
        """Create `{prefix}/leases/{topic}` attached to a new etcd lease, if absent (one transaction).

        The same transaction also requires that no KafScale Go processor holds a partition lease of
        the topic under the same prefix. When the claim loses, the etcd lease granted for it is
        revoked and `LeaseBusy` names the holder. If the transaction's reply is lost and the call is
        retried on another endpoint, the retry recognizes its own key by the etcd lease id.
        """
        key = self._keys.lease(topic)
        go_prefix = self._keys.go_partition_leases_prefix(topic)
        go_end = prefix_range_end(go_prefix)
        operation = f"claim the lease of topic {topic!r}"
        lease = self._etcd.call(operation, lambda client: client.lease(self._ttl_seconds))
        lease_id, ttl_seconds = int(lease.id), int(lease.ttl)
        now = self._now_ms()
        record = LeaseRecord(
            owner_id=owner_id,
            run_id=run_id,
            claimed_at_ms=now,
            lease_expires_at=now + ttl_seconds * 1000,
            ttl_seconds=ttl_seconds,
        )
        try:
            succeeded, responses = self._etcd.transaction(
                operation,
                compare=[
                    etcd_txn.Create(key) == 0,
                    etcd_txn.Version(go_prefix, range_end=go_end) == 0,
                ],
                success=[
                    etcd_txn.Put(key, record.model_dump_json(), lease=lease_id),
                    etcd_txn.Get(key),
                ],
                failure=[etcd_txn.Get(key), etcd_txn.Get(go_prefix, range_end=go_end)],
            )
        except BaseException:
            self._revoke_quietly(lease_id, topic)
            raise
        ours = responses[1] if succeeded else responses[0]
        if ours and int(ours[0][1].lease_id) == lease_id:
            grant = LeaseGrant(
                topic=topic,
                owner_id=owner_id,
                run_id=run_id,
                token=int(ours[0][1].create_revision),
                lease_id=lease_id,
                ttl_seconds=ttl_seconds,
                claimed_at_ms=now,
            )
            self._touched_at[lease_id] = time.monotonic()
            logger.info(
                "lease claimed",
                extra={"topic": topic, "run_id": run_id, "token": grant.token, "ttl_s": ttl_seconds},
            )
            return grant
        self._revoke_quietly(lease_id, topic)
        if ours:
            holder = self._holder(topic, ours[0])
        elif responses[1]:
            holder = self._go_holder(topic, responses[1][0])
        else:  # pragma: no cover - the compare failed, so one of the two reads holds a key
            raise CheckpointRequestError(operation, self.endpoints, "claim refused but no holder found")
        busy = LeaseBusy(topic=topic, holder=holder)
        logger.info("lease busy", extra={"topic": topic, "run_id": run_id, "holder": holder.describe()})
        return busy

    def renew_lease(self, grant: LeaseGrant) -> None:
        """Keep the etcd lease alive and refresh the key's `lease_expires_at`, if the key is still ours.

        Idempotent. Raises `LeaseLostError` if the etcd lease expired or the key was deleted or now
        belongs to another claim (then our etcd lease is revoked: it guards nothing any more).
        """
        key = self._keys.lease(grant.topic)
        operation = f"renew the lease of topic {grant.topic!r}"
        ttl_seconds, quiet = self._keep_alive(operation, grant)
        if ttl_seconds <= 0:
            value, meta = self._etcd.call(operation, lambda client: client.get(key))
            reason = (
                f"etcd lease {grant.lease_id} is gone (expired: not renewed within {grant.ttl_seconds} s, "
                "or revoked by a release)"
            )
            if value is not None:
                reason += f"; {self._lost_reason(grant, [(value, meta)])}"
            raise LeaseLostError(grant.topic, grant.token, grant.run_id, _stalled(quiet, grant) + reason)
        now = self._now_ms()
        record = LeaseRecord(
            owner_id=grant.owner_id,
            run_id=grant.run_id,
            claimed_at_ms=grant.claimed_at_ms,
            lease_expires_at=now + ttl_seconds * 1000,
            ttl_seconds=grant.ttl_seconds,
        )
        succeeded, responses = self._etcd.transaction(
            operation,
            compare=[etcd_txn.Create(key) == grant.token],
            success=[etcd_txn.Put(key, record.model_dump_json(), lease=grant.lease_id)],
            failure=[etcd_txn.Get(key)],
        )
        if not succeeded:
            self._revoke_quietly(grant.lease_id, grant.topic)
            raise LeaseLostError(
                grant.topic,
                grant.token,
                grant.run_id,
                _stalled(quiet, grant) + self._lost_reason(grant, responses[0]),
            )

    def _keep_alive(self, operation: str, grant: LeaseGrant) -> tuple[int, float]:
        """One keep-alive of `grant`'s etcd lease: (its TTL now, 0 or less when expired; how long this
        process went without trying to renew it, when that was its own stall - before this call, or
        during it - else 0)."""
        started = time.monotonic()
        quiet = started - self._touched_at.get(grant.lease_id, started)
        try:
            ttl_seconds = self._etcd.call(operation, lambda client: _keep_alive_once(client, grant.lease_id))
        finally:
            ended = self._touched_at[grant.lease_id] = time.monotonic()
        if quiet <= grant.ttl_seconds and self._etcd.stalled(ended - started):
            quiet = ended - started
        return ttl_seconds, quiet

    def release_lease(self, grant: LeaseGrant) -> bool:
        """Delete the lease key only if its create_revision is still the grant's token; revoke the lease.

        Idempotent. Returns True if this call deleted the key. A key that another claim created since
        is never touched (the Go processor deletes unconditionally; we do not).
        """
        key = self._keys.lease(grant.topic)
        operation = f"release the lease of topic {grant.topic!r}"
        released, _ = self._etcd.transaction(
            operation,
            compare=[etcd_txn.Create(key) == grant.token],
            success=[etcd_txn.Delete(key)],
            failure=[],
        )
        self._revoke_quietly(grant.lease_id, grant.topic)
        self._touched_at.pop(grant.lease_id, None)
        if released:
            logger.info(
                "lease released", extra={"topic": grant.topic, "run_id": grant.run_id, "token": grant.token}
            )
        return bool(released)

    def read_lease_holder(self, topic: str) -> LeaseHolder | None:
        """Who holds the topic: our per-topic lease, else a Go processor's partition lease, else None."""
        key = self._keys.lease(topic)
        go_prefix = self._keys.go_partition_leases_prefix(topic)
        _, responses = self._etcd.transaction(
            f"read the lease of topic {topic!r}",
            compare=[],
            success=[etcd_txn.Get(key), etcd_txn.Get(go_prefix, range_end=prefix_range_end(go_prefix))],
            failure=[],
        )
        if responses[0]:
            return self._holder(topic, responses[0][0])
        if responses[1]:
            return self._go_holder(topic, responses[1][0])
        return None

    # -- offsets -----------------------------------------------------------------------------------

    def load_committed_offsets(self, topic: str) -> CommittedOffsets:
        """Read `{prefix}/offsets/{topic}/*` (ours or the Go processor's); missing partitions are -1."""
        prefix = self._keys.offsets_prefix(topic)
        kvs = self._etcd.call(
            f"load the committed offsets of topic {topic!r}",
            lambda client: list(client.get_prefix(prefix, sort_order="ascend")),
        )
        items = [(meta.key.decode("utf-8"), value) for value, meta in kvs]
        return CommittedOffsets(topic=topic, states=decode_partition_states(items, prefix=prefix))

    def read_cluster_metadata(self) -> ClusterMetadata | None:
        """Parse the KafScale operator's metadata snapshot; None if the key does not exist."""
        key = self._metadata_snapshot_key
        value, _ = self._etcd.call("read the KafScale metadata snapshot", lambda client: client.get(key))
        if value is None:
            return None
        return parse_metadata_snapshot(value, key=key)

    # -- internals: offsets ------------------------------------------------------------------------

    def _write_offsets(
        self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate], *, allow_rewind: bool, verb: str
    ) -> dict[int, OffsetState]:
        """Read (lease, offsets, watermarks) at one revision, plan, write fenced; re-plan on a race.

        Each write transaction compares the lease key's create_revision with the token and each
        written offsets key's mod_revision with the one read, so the never-backwards check still
        holds when the write lands. etcd caps a transaction at `max_txn_ops` operations (128 by
        default: 63 partitions, as each takes two keys); a bigger commit is written as consecutive
        fenced transactions, the topic watermark in the last. If an ambiguous failure made us retry
        a write that had in fact landed, the re-plan sees equal offsets and rewrites them.
        """
        topic = grant.topic
        operation = f"{verb} the offsets of topic {topic!r}"
        lease_key = self._keys.lease(topic)
        offsets_prefix = self._keys.offsets_prefix(topic)
        watermarks_prefix = self._keys.partition_watermarks_prefix(topic)
        written: list[int] = []
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            _, (lease_kvs, offset_kvs, watermark_kvs) = self._etcd.transaction(
                operation,
                compare=[],
                success=[
                    etcd_txn.Get(lease_key),
                    etcd_txn.Get(offsets_prefix, range_end=prefix_range_end(offsets_prefix)),
                    etcd_txn.Get(watermarks_prefix, range_end=prefix_range_end(watermarks_prefix)),
                ],
                failure=[],
            )
            self._check_lease(grant, lease_kvs, written)
            committed = decode_partition_states(_items(offset_kvs), prefix=offsets_prefix)
            mod_revisions = {
                int(meta.key.decode("utf-8")[len(offsets_prefix) :]): int(meta.mod_revision)
                for _, meta in offset_kvs
            }
            write = plan_offset_write(
                topic,
                committed=committed,
                partition_watermarks=decode_partition_states(_items(watermark_kvs), prefix=watermarks_prefix),
                updates=updates,
                now_ms=self._now_ms(),
                allow_rewind=allow_rewind,
            )
            partitions = sorted(write.states)
            per_txn = max(1, (self._max_txn_ops - 1) // 2)
            for first in range(0, len(partitions), per_txn):
                chunk = partitions[first : first + per_txn]
                compare = [etcd_txn.Create(lease_key) == grant.token]
                success = []
                for partition in chunk:
                    key = self._keys.offsets(topic, partition)
                    value = encode_offset_state(write.states[partition])
                    compare.append(etcd_txn.Mod(key) == mod_revisions.get(partition, 0))
                    success.append(etcd_txn.Put(key, value))
                    success.append(etcd_txn.Put(self._keys.partition_watermark(topic, partition), value))
                if first + per_txn >= len(partitions):
                    watermark = encode_offset_state(write.topic_watermark)
                    success.append(etcd_txn.Put(self._keys.topic_watermark(topic), watermark))
                succeeded, responses = self._etcd.transaction(
                    operation, compare=compare, success=success, failure=[etcd_txn.Get(lease_key)]
                )
                if not succeeded:
                    self._check_lease(grant, responses[0], written)
                    break
                written.extend(chunk)
            else:
                return self._written(grant, verb, write.states)
            logger.warning(
                "offsets changed concurrently; re-reading",
                extra={"topic": topic, "run_id": grant.run_id, "attempt": attempt},
            )
        raise ConcurrentOffsetUpdateError(topic, tuple(sorted(updates)), _COMMIT_ATTEMPTS)

    def _check_lease(self, grant: LeaseGrant, lease_kvs: list[Any], written: list[int]) -> None:
        if lease_kvs and int(lease_kvs[0][1].create_revision) == grant.token:
            return
        reason = self._lost_reason(grant, lease_kvs)
        raise LeaseLostError(grant.topic, grant.token, grant.run_id, reason, tuple(sorted(set(written))))

    def _lost_reason(self, grant: LeaseGrant, lease_kvs: list[Any]) -> str:
        if not lease_kvs:
            return "the lease key is gone (the etcd lease expired, or the lease was released)"
        return f"the topic is now leased by {self._holder(grant.topic, lease_kvs[0]).describe()}"

    # -- internals: lease values -------------------------------------------------------------------

    @staticmethod
    def _holder(topic: str, kv: tuple[bytes, Any]) -> LeaseHolder:
        value, meta = kv
        key = meta.key.decode("utf-8")
        try:
            record = LeaseRecord.model_validate_json(value)
        except ValidationError as exc:
            raise CheckpointDataError(key, f"not a lease value of this product: {value[:200]!r}") from exc
        return LeaseHolder(
            topic=topic,
            owner_id=record.owner_id,
            run_id=record.run_id,
            token=int(meta.create_revision),
            lease_id=int(meta.lease_id),
            claimed_at_ms=record.claimed_at_ms,
            expires_at_ms=record.lease_expires_at,
        )

    @staticmethod
    def _go_holder(topic: str, kv: tuple[bytes, Any]) -> LeaseHolder:
        value, meta = kv
        key = meta.key.decode("utf-8")
        partition = parse_partition(key.rsplit("/", 1)[-1])
        if partition is None:
            raise CheckpointDataError(
                key, "expected a Go processor lease key {prefix}/leases/{topic}/{partition}"
            )
        try:
            record = GoLeaseRecord.model_validate_json(value)
        except ValidationError as exc:
            raise CheckpointDataError(key, f"not a Go processor lease value: {value[:200]!r}") from exc
        return LeaseHolder(
            topic=topic,
            owner_id=record.owner_id,
            run_id=None,
            token=int(meta.create_revision),
            lease_id=int(meta.lease_id),
            expires_at_ms=record.lease_expires_at or None,
            partition=partition,
        )

    def _revoke_quietly(self, lease_id: int, topic: str) -> None:
        """Revoke an etcd lease we no longer need; already gone is fine, a failure is logged (TTL ends it)."""

        def revoke(client: Any) -> None:
            try:
                client.revoke_lease(lease_id)
            except EtcdErrors as exc:
                if not is_lease_not_found(exc):
                    raise

        try:
            self._etcd.call(f"revoke etcd lease {lease_id} of topic {topic!r}", revoke)
        except (CheckpointUnavailableError, CheckpointAuthError, CheckpointRequestError) as exc:
            logger.warning(
                "etcd lease not revoked; it ends with its TTL",
                extra={"topic": topic, "lease_id": lease_id, "error": str(exc)},
            )


def _stalled(quiet: float, grant: LeaseGrant) -> str:
    """The start of a lost lease's reason when this process went `quiet` seconds without renewing
    it, past its TTL: fencing after a stall (a freeze, a paused VM, an overloaded host), not an
    outage - etcd answered. Empty otherwise."""
    if quiet <= grant.ttl_seconds:
        return ""
    return (
        f"this process stalled past its lease (no renewal for {quiet:.0f} s, TTL {grant.ttl_seconds} s; "
        "etcd is up: this is fencing, not an outage; if it recurs, look for what freezes the process "
        "or raise offsets.lease_ttl_seconds): "
    )


def _keep_alive_once(client: Any, lease_id: int) -> int:
    """One LeaseKeepAlive round trip; the lease's new TTL in seconds (0 or less: it has expired)."""
    for response in client.refresh_lease(lease_id):
        return int(response.TTL)
    return 0


def _items(kvs: list[Any]) -> list[tuple[str, bytes]]:
    return [(meta.key.decode("utf-8"), value) for value, meta in kvs]
