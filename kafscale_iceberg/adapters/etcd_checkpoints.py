"""`EtcdCheckpointStore`: per-topic leases and KafScale-compatible offsets in etcd (the `etcd3` client).

The only module that imports `etcd3` (and `grpc`). Keys and values: `domain/checkpoint_keys.py`,
`domain/offsets.py`, `domain/leases.py`; the design is in docs/architecture.md ("Leases and offsets").

Every operation is one etcd transaction (or a read plus one fenced transaction), so a failure never
leaves half a write behind. The client is the PyPI release of etcd3 (0.12.0), which talks to one
endpoint only; failover across `etcd.endpoints` is done here: an endpoint that cannot be reached is
dropped and the next one is tried; only when all fail is `CheckpointUnavailableError` raised, naming
each endpoint and why. Every operation is safe to re-run after an ambiguous failure (see `claim_lease`
for the one that needs care).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pydantic import ValidationError

from kafscale_iceberg.domain.checkpoint_keys import (
    KAFSCALE_METADATA_SNAPSHOT_KEY,
    CheckpointKeys,
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

# etcd3 0.12 ships protobuf modules generated for protobuf 3; protobuf >= 4 refuses to load them
# ("Descriptors cannot be created directly") unless the pure-Python implementation is chosen before
# protobuf is first imported. This is the one place that chooses it; an explicit setting wins.
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

with warnings.catch_warnings():
    # Loading those modules emits ~100 of these; a module-based filter does not catch them.
    warnings.filterwarnings(
        "ignore", message="Call to deprecated create function", category=DeprecationWarning
    )
    try:
        import etcd3
        import etcd3.exceptions
        import grpc
        from etcd3 import transactions as etcd_txn
    except TypeError as exc:  # protobuf's "Descriptors cannot be created directly"
        raise ImportError(
            "etcd3 cannot load its protobuf modules: protobuf was imported before "
            "kafscale_iceberg.adapters.etcd_checkpoints could select its pure-Python implementation; "
            "set PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in the environment"
        ) from exc

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_PORT = 2379
_COMMIT_ATTEMPTS = 5
_UNAVAILABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class EtcdEndpoint:
    """One etcd client URL, parsed: `http://host:2379` (plain), `https://host:2379` (TLS), or `host:port`."""

    url: str
    host: str
    port: int
    secure: bool


def parse_etcd_endpoint(url: str) -> EtcdEndpoint:
    """Parse an `etcd.endpoints` entry as the Go client accepts it; ValueError naming the entry if invalid."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    if parts.scheme not in {"http", "https"}:
        raise ValueError(f"etcd endpoint {url!r}: scheme must be http or https, got {parts.scheme!r}")
    if parts.path not in {"", "/"} or parts.query or parts.fragment:
        raise ValueError(f"etcd endpoint {url!r}: expected scheme://host:port with no path")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"etcd endpoint {url!r}: invalid port") from exc
    if not parts.hostname:
        raise ValueError(f"etcd endpoint {url!r}: no host")
    return EtcdEndpoint(
        url=text, host=parts.hostname, port=port or DEFAULT_PORT, secure=parts.scheme == "https"
    )


def _system_ca_bundle() -> str | None:
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def _grpc_error(exc: BaseException) -> BaseException:
    """The grpc error behind an etcd3 exception (etcd3 re-raises a bare class inside `except`)."""
    error: BaseException = exc
    if not isinstance(exc, grpc.RpcError) and isinstance(exc.__context__, grpc.RpcError):
        error = exc.__context__
    return error


def _status(exc: BaseException) -> tuple[Any, str]:
    """(grpc status code or None, human-readable details) of an etcd3 / grpc error."""
    error = _grpc_error(exc)
    code_of = getattr(error, "code", None)
    details_of = getattr(error, "details", None)
    code = code_of() if callable(code_of) else None
    details = details_of() if callable(details_of) else None
    text = str(details) if details else (str(error) or type(error).__name__)
    return code, (f"{code.name}: {text}" if code is not None else text)


def _is_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, etcd3.exceptions.ConnectionFailedError | etcd3.exceptions.ConnectionTimeoutError):
        return True
    code, _ = _status(exc)
    return code in _UNAVAILABLE_CODES


def _is_expired_token(exc: BaseException) -> bool:
    code, details = _status(exc)
    return bool(code == grpc.StatusCode.UNAUTHENTICATED) and "invalid auth token" in details


def _is_auth_failure(exc: BaseException) -> bool:
    code, details = _status(exc)
    if code in {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}:
        return True
    return bool(code == grpc.StatusCode.INVALID_ARGUMENT) and (
        "authentication failed" in details or "user name is empty" in details
    )


def _is_lease_not_found(exc: BaseException) -> bool:
    code, _ = _status(exc)
    return bool(code == grpc.StatusCode.NOT_FOUND)


_EtcdErrors = (etcd3.exceptions.Etcd3Exception, grpc.RpcError)


class EtcdCheckpointStore:
    """`CheckpointStore` over etcd. See the module docstring; keys and values in `CheckpointKeys`."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        key_prefix: str = "processors",
        lease_ttl_seconds: int = 30,
        username: str | None = None,
        password: str | None = None,
        ca_cert_path: str | None = None,
        client_cert_path: str | None = None,
        client_key_path: str | None = None,
        timeout_seconds: float = 5.0,
        metadata_snapshot_key: str = KAFSCALE_METADATA_SNAPSHOT_KEY,
        max_txn_ops: int = 128,
        now_ms: Callable[[], int] = _wall_clock_ms,
        client: Any = None,
    ) -> None:
        """Connect lazily to `endpoints` (URLs like `http://host:2379`; https means TLS).

        `username` (with `password`, empty if None) turns on etcd authentication, like the Go
        client. `ca_cert_path` verifies TLS endpoints (default: the system CA bundle);
        `client_cert_path` with `client_key_path` (PEM) present a client certificate, for an etcd
        started with `--client-cert-auth`. `max_txn_ops`
        is the server's `--max-txn-ops` (etcd's default 128). `client` is a pre-built
        `etcd3.Etcd3Client` used instead of connecting (for tests): failover and re-authentication
        are then off, and `endpoints` only label errors.
        """
        if not endpoints:
            raise ValueError("at least one etcd endpoint is required (etcd.endpoints)")
        if lease_ttl_seconds < 1:
            raise ValueError(f"lease_ttl_seconds must be >= 1, got {lease_ttl_seconds}")
        if bool(client_cert_path) != bool(client_key_path):
            raise ValueError("client_cert_path and client_key_path go together (etcd.tls key_file)")
        if max_txn_ops < 3:
            raise ValueError(f"max_txn_ops must be >= 3 (one partition per transaction), got {max_txn_ops}")
        self._endpoints = tuple(parse_etcd_endpoint(url) for url in endpoints)
        self._keys = CheckpointKeys(key_prefix)
        self._ttl_seconds = lease_ttl_seconds
        self._username = username or None
        self._password = password
        self._ca_cert_path = ca_cert_path
        self._client_cert_path = client_cert_path or None
        self._client_key_path = client_key_path or None
        self._timeout_seconds = timeout_seconds
        self._metadata_snapshot_key = metadata_snapshot_key
        self._max_txn_ops = max_txn_ops
        self._now_ms = now_ms
        self._prebuilt = client is not None
        self._clients: dict[int, Any] = {0: client} if client is not None else {}
        self._active = 0
        self._lock = threading.Lock()

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The endpoint URLs, as configured."""
        return tuple(endpoint.url for endpoint in self._endpoints)

    def close(self) -> None:
        """Close every connection this store opened (a pre-built client is left to its owner)."""
        with self._lock:
            clients, self._clients = self._clients, {}
        if not self._prebuilt:
            for client in clients.values():
                client.close()

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
        lease = self._call(operation, lambda client: client.lease(self._ttl_seconds))
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
            succeeded, responses = self._transaction(
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
        ttl_seconds = self._call(operation, lambda client: _keep_alive_once(client, grant.lease_id))
        if ttl_seconds <= 0:
            value, meta = self._call(operation, lambda client: client.get(key))
            reason = (
                f"etcd lease {grant.lease_id} is gone (expired: not renewed within {grant.ttl_seconds} s, "
                "or revoked by a release)"
            )
            if value is not None:
                reason += f"; {self._lost_reason(grant, [(value, meta)])}"
            raise LeaseLostError(grant.topic, grant.token, grant.run_id, reason)
        now = self._now_ms()
        record = LeaseRecord(
            owner_id=grant.owner_id,
            run_id=grant.run_id,
            claimed_at_ms=grant.claimed_at_ms,
            lease_expires_at=now + ttl_seconds * 1000,
            ttl_seconds=grant.ttl_seconds,
        )
        succeeded, responses = self._transaction(
            operation,
            compare=[etcd_txn.Create(key) == grant.token],
            success=[etcd_txn.Put(key, record.model_dump_json(), lease=grant.lease_id)],
            failure=[etcd_txn.Get(key)],
        )
        if not succeeded:
            self._revoke_quietly(grant.lease_id, grant.topic)
            raise LeaseLostError(
                grant.topic, grant.token, grant.run_id, self._lost_reason(grant, responses[0])
            )

    def release_lease(self, grant: LeaseGrant) -> bool:
        """Delete the lease key only if its create_revision is still the grant's token; revoke the lease.

        Idempotent. Returns True if this call deleted the key. A key that another claim created since
        is never touched (the Go processor deletes unconditionally; we do not).
        """
        key = self._keys.lease(grant.topic)
        operation = f"release the lease of topic {grant.topic!r}"
        released, _ = self._transaction(
            operation,
            compare=[etcd_txn.Create(key) == grant.token],
            success=[etcd_txn.Delete(key)],
            failure=[],
        )
        self._revoke_quietly(grant.lease_id, grant.topic)
        if released:
            logger.info(
                "lease released", extra={"topic": grant.topic, "run_id": grant.run_id, "token": grant.token}
            )
        return bool(released)

    def read_lease_holder(self, topic: str) -> LeaseHolder | None:
        """Who holds the topic: our per-topic lease, else a Go processor's partition lease, else None."""
        key = self._keys.lease(topic)
        go_prefix = self._keys.go_partition_leases_prefix(topic)
        _, responses = self._transaction(
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

    def list_lease_holders(self) -> list[LeaseHolder]:
        """Every lease under `{prefix}/leases/`: ours (per topic) and the Go processor's (per partition)."""
        prefix = self._keys.leases_prefix
        kvs = self._call(
            "list the leases", lambda client: list(client.get_prefix(prefix, sort_order="ascend"))
        )
        holders: list[LeaseHolder] = []
        for kv in kvs:
            rest = kv[1].key.decode("utf-8")[len(prefix) :]
            topic, _, partition = rest.partition("/")
            holders.append(self._go_holder(topic, kv) if partition else self._holder(topic, kv))
        return sorted(holders, key=lambda h: (h.topic, -1 if h.partition is None else h.partition))

    # -- offsets -----------------------------------------------------------------------------------

    def load_committed_offsets(self, topic: str) -> CommittedOffsets:
        """Read `{prefix}/offsets/{topic}/*` (ours or the Go processor's); missing partitions are -1."""
        prefix = self._keys.offsets_prefix(topic)
        kvs = self._call(
            f"load the committed offsets of topic {topic!r}",
            lambda client: list(client.get_prefix(prefix, sort_order="ascend")),
        )
        items = [(meta.key.decode("utf-8"), value) for value, meta in kvs]
        return CommittedOffsets(topic=topic, states=decode_partition_states(items, prefix=prefix))

    def commit_offsets(
        self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]
    ) -> dict[int, OffsetState]:
        """Advance offsets + watermarks in one transaction fenced by the lease. See `CheckpointStore`."""
        return self._write_offsets(grant, updates, allow_rewind=False, verb="commit")

    def reset_offsets(self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]) -> dict[int, OffsetState]:
        """Set offsets to any value (backwards included), fenced by the lease. See `CheckpointStore`."""
        return self._write_offsets(grant, updates, allow_rewind=True, verb="reset")

    def read_cluster_metadata(self) -> ClusterMetadata | None:
        """Parse the KafScale operator's metadata snapshot; None if the key does not exist."""
        key = self._metadata_snapshot_key
        value, _ = self._call("read the KafScale metadata snapshot", lambda client: client.get(key))
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
            _, (lease_kvs, offset_kvs, watermark_kvs) = self._transaction(
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
                succeeded, responses = self._transaction(
                    operation, compare=compare, success=success, failure=[etcd_txn.Get(lease_key)]
                )
                if not succeeded:
                    self._check_lease(grant, responses[0], written)
                    break
                written.extend(chunk)
            else:
                logger.info(
                    "offsets committed" if verb == "commit" else "offsets reset",
                    extra={
                        "topic": topic,
                        "run_id": grant.run_id,
                        "token": grant.token,
                        "offsets": {p: s.offset for p, s in write.states.items()},
                    },
                )
                return dict(write.states)
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
            except _EtcdErrors as exc:
                if not _is_lease_not_found(exc):
                    raise

        try:
            self._call(f"revoke etcd lease {lease_id} of topic {topic!r}", revoke)
        except (CheckpointUnavailableError, CheckpointAuthError, CheckpointRequestError) as exc:
            logger.warning(
                "etcd lease not revoked; it ends with its TTL",
                extra={"topic": topic, "lease_id": lease_id, "error": str(exc)},
            )

    # -- internals: transport ----------------------------------------------------------------------

    def _transaction(
        self, operation: str, *, compare: list[Any], success: list[Any], failure: list[Any]
    ) -> tuple[bool, list[Any]]:
        def run(client: Any) -> tuple[bool, list[Any]]:
            succeeded, responses = client.transaction(compare=compare, success=success, failure=failure)
            return bool(succeeded), list(responses)

        return self._call(operation, run)

    def _call(self, operation: str, fn: Callable[[Any], T]) -> T:
        """Run `fn(client)` on the active endpoint, failing over to the next ones when unreachable.

        An expired auth token (etcd's simple tokens lapse after 5 idle minutes) is renewed once by
        reconnecting. Raises `CheckpointUnavailableError` naming every endpoint when none answers,
        `CheckpointAuthError` for credentials or permissions, `CheckpointRequestError` otherwise.
        """
        count = 1 if self._prebuilt else len(self._endpoints)
        failures: list[str] = []
        last_error: BaseException | None = None
        start = self._active
        for step in range(count):
            index = (start + step) % count
            endpoint = self._endpoints[index]
            try:
                try:
                    result = fn(self._client(index))
                except _EtcdErrors as exc:
                    if self._prebuilt or not _is_expired_token(exc):
                        raise
                    self._forget(index)
                    result = fn(self._client(index))
            except _EtcdErrors as exc:
                if _is_unavailable(exc):
                    failures.append(f"{endpoint.url}: {_status(exc)[1]}")
                    last_error = exc
                    self._forget(index)
                    continue
                if _is_auth_failure(exc):
                    raise CheckpointAuthError(
                        operation, self.endpoints, self._username, _status(exc)[1]
                    ) from exc
                raise CheckpointRequestError(operation, (endpoint.url,), _status(exc)[1]) from exc
            self._active = index
            return result
        raise CheckpointUnavailableError(operation, self.endpoints, "; ".join(failures)) from last_error

    def _client(self, index: int) -> Any:
        with self._lock:
            client = self._clients.get(index)
            if client is None:
                client = self._connect(self._endpoints[index])
                self._clients[index] = client
            return client

    def _forget(self, index: int) -> None:
        """Drop an endpoint's client so the next call reconnects (and re-authenticates) from scratch."""
        if self._prebuilt:
            return
        with self._lock:
            self._clients.pop(index, None)

    def _connect(self, endpoint: EtcdEndpoint) -> Any:
        ca_cert = None
        if endpoint.secure:
            ca_cert = self._ca_cert_path or _system_ca_bundle()
            if ca_cert is None:
                raise CheckpointRequestError(
                    f"connect to {endpoint.url}",
                    (endpoint.url,),
                    "TLS endpoint but no CA bundle: pass ca_cert_path or install the system CA certificates",
                )
        client = etcd3.client(
            host=endpoint.host,
            port=endpoint.port,
            ca_cert=ca_cert,
            cert_cert=self._client_cert_path if endpoint.secure else None,
            cert_key=self._client_key_path if endpoint.secure else None,
            timeout=self._timeout_seconds,
            user=self._username,
            password=(self._password or "") if self._username else None,
            grpc_options=_GRPC_OPTIONS,
        )
        if not endpoint.secure:
            # etcd3 0.12 sends the auth token twice: as metadata and as grpc call credentials; grpc
            # refuses call credentials on a plain-text channel ("Established channel does not have a
            # sufficient security level"), so keep only the metadata there.
            client.call_credentials = None
        return client


# After an outage a reconnect must try at once: grpc shares subchannels (and their reconnect backoff,
# growing to 120 s) across channels to the same address unless each channel keeps its own pool, so a
# fresh client would wait out the old one's backoff. Capped at 2 s: the pipeline backs off itself.
_GRPC_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def _keep_alive_once(client: Any, lease_id: int) -> int:
    """One LeaseKeepAlive round trip; the lease's new TTL in seconds (0 or less: it has expired)."""
    for response in client.refresh_lease(lease_id):
        return int(response.TTL)
    return 0


def _items(kvs: list[Any]) -> list[tuple[str, bytes]]:
    return [(meta.key.decode("utf-8"), value) for value, meta in kvs]
