"""`EtcdClient`: etcd with failover across `etcd.endpoints`, TLS and auth (the `etcd3` client).

The only module that imports `etcd3` (and `grpc`). The client is the PyPI release of etcd3 (0.12.0),
which talks to one endpoint only; `EtcdClient.call` adds what the Go client does itself: an endpoint
that cannot be reached is dropped and the next one is tried (the one that answered stays first);
only when all fail is `CheckpointUnavailableError` raised, naming each endpoint and why. An expired
auth token (etcd's simple tokens lapse after 5 idle minutes) is renewed by reconnecting once; bad
credentials or permissions are `CheckpointAuthError`, any other refusal `CheckpointRequestError`.

What is stored under which key, and the transactions that keep it exactly once, are the checkpoint
store's (`adapters/etcd_checkpoints.py`); it builds transactions from `etcd_txn`, re-exported here
so that etcd3 is loaded only after its protobuf modules are rebuilt (`adapters/etcd_protos.py`).

etcd3 0.12 as found (the PyPI release; `MultiEndpointEtcd3Client` exists only on its unreleased
master): its generated protobuf modules are for protobuf 3 and are rebuilt for the installed protobuf
before etcd3 loads (`etcd_protos.install`); it sends the auth token both as metadata and as grpc call
credentials, which grpc refuses on a plain-text channel (only the metadata is kept there); grpc shares
subchannels and their reconnect backoff (up to 120 s) across channels unless told not to
(`_GRPC_OPTIONS`); `transaction()` returns no header revision (read a key back with a `Get` in the
same transaction); revoking an unknown lease raises a raw grpc `NOT_FOUND` (`is_lease_not_found`);
refreshing an expired lease is not an error but answers TTL 0; compares with `range_end` work.

A stall is not an outage: a call in flight while this process is frozen (SIGSTOP, a paused VM, a
host swapping) outlives its deadline and grpc reports DEADLINE_EXCEEDED on resume, although etcd
answered. A call that failed as unavailable long after its deadline (`_STALL_FACTOR`: grpc would have
reported it at the deadline, had the process run) is tried once more on a fresh channel, so the
answer - a lease gone, usually - is etcd's, not a made-up outage.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar
from urllib.parse import urlsplit

from kafscale_iceberg.adapters import etcd_protos
from kafscale_iceberg.exceptions import (
    CheckpointAuthError,
    CheckpointRequestError,
    CheckpointUnavailableError,
)

etcd_protos.install()  # etcd3's protobuf-3 modules, rebuilt for this protobuf (see that module)

import etcd3  # noqa: E402 - after `install`
import etcd3.exceptions  # noqa: E402
import grpc  # noqa: E402
from etcd3 import transactions as etcd_txn  # noqa: E402

__all__ = [
    "DEFAULT_PORT",
    "EtcdClient",
    "EtcdEndpoint",
    "EtcdErrors",
    "etcd_txn",
    "is_lease_not_found",
    "parse_etcd_endpoint",
]

T = TypeVar("T")

DEFAULT_PORT = 2379
_STALL_FACTOR = 1.5
"""A call failing as unavailable this many deadlines after it started (plus 1 s) was stalled by this
process, not refused by etcd (module docstring)."""
_UNAVAILABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}

# What etcd3 and grpc raise: a call that fails with one of these is classified by `EtcdClient.call`.
EtcdErrors = (etcd3.exceptions.Etcd3Exception, grpc.RpcError)

# After an outage a reconnect must try at once: grpc shares subchannels (and their reconnect backoff,
# growing to 120 s) across channels to the same address unless each channel keeps its own pool, so a
# fresh client would wait out the old one's backoff. Capped at 2 s: the pipeline backs off itself.
_GRPC_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


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


class EtcdConnectionOptions(TypedDict, total=False):
    """How `EtcdClient` connects besides its endpoints (its `__init__` says what each does); what a
    store over it (`EtcdCheckpointStore`) takes and passes on."""

    username: str | None
    password: str | None
    ca_cert_path: str | None
    client_cert_path: str | None
    client_key_path: str | None
    timeout_seconds: float
    client: Any


class EtcdClient:
    """etcd3 clients for a list of endpoints, one connected lazily per endpoint; see the module docstring."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        username: str | None = None,
        password: str | None = None,
        ca_cert_path: str | None = None,
        client_cert_path: str | None = None,
        client_key_path: str | None = None,
        timeout_seconds: float = 5.0,
        client: Any = None,
    ) -> None:
        """Connect lazily to `endpoints` (URLs like `http://host:2379`; https means TLS).

        `username` (with `password`, empty if None) turns on etcd authentication, like the Go
        client. `ca_cert_path` verifies TLS endpoints (default: the system CA bundle);
        `client_cert_path` with `client_key_path` (PEM) present a client certificate, for an etcd
        started with `--client-cert-auth`. `client` is a pre-built `etcd3.Etcd3Client` used instead
        of connecting (for tests): failover and re-authentication are then off, and `endpoints` only
        label errors.
        """
        if not endpoints:
            raise ValueError("at least one etcd endpoint is required (etcd.endpoints)")
        if bool(client_cert_path) != bool(client_key_path):
            raise ValueError("client_cert_path and client_key_path go together (etcd.tls key_file)")
        self._endpoints = tuple(parse_etcd_endpoint(url) for url in endpoints)
        self._username = username or None
        self._password = password
        self._ca_cert_path = ca_cert_path
        self._client_cert_path = client_cert_path or None
        self._client_key_path = client_key_path or None
        self._timeout_seconds = timeout_seconds
        self._prebuilt = client is not None
        self._clients: dict[int, Any] = {0: client} if client is not None else {}
        self._active = 0
        self._lock = threading.Lock()

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The endpoint URLs, as configured."""
        return tuple(endpoint.url for endpoint in self._endpoints)

    def stalled(self, elapsed_seconds: float) -> bool:
        """Whether a call that took `elapsed_seconds` was held up by this process, not by etcd: grpc
        ends a call at its deadline, had the process run (module docstring)."""
        return elapsed_seconds > _STALL_FACTOR * self._timeout_seconds + 1.0

    def close(self) -> None:
        """Close every connection this client opened (a pre-built client is left to its owner)."""
        with self._lock:
            clients, self._clients = self._clients, {}
        if not self._prebuilt:
            for client in clients.values():
                client.close()

    def transaction(
        self, operation: str, *, compare: list[Any], success: list[Any], failure: list[Any]
    ) -> tuple[bool, list[Any]]:
        """One etcd transaction (`etcd_txn` compares and requests) through `call`: (succeeded, responses)."""

        def run(client: Any) -> tuple[bool, list[Any]]:
            succeeded, responses = client.transaction(compare=compare, success=success, failure=failure)
            return bool(succeeded), list(responses)

        return self.call(operation, run)

    def call(self, operation: str, fn: Callable[[Any], T]) -> T:
        """Run `fn(client)` on the active endpoint, failing over to the next ones when unreachable.

        An expired auth token (etcd's simple tokens lapse after 5 idle minutes) is renewed once by
        reconnecting. Raises `CheckpointUnavailableError` naming every endpoint when none answers,
        `CheckpointAuthError` for credentials or permissions, `CheckpointRequestError` otherwise;
        `operation` ("commit the offsets of topic 'orders'") names what failed.
        """
        count = 1 if self._prebuilt else len(self._endpoints)
        failures: list[str] = []
        last_error: BaseException | None = None
        start = self._active
        for step in range(count):
            index = (start + step) % count
            endpoint = self._endpoints[index]
            try:
                result = self._call_endpoint(operation, index, fn)
            except EtcdErrors as exc:
                failures.append(f"{endpoint.url}: {_status(exc)[1]}")
                last_error = exc
                self._forget(index)
                continue
            self._active = index
            return result
        raise CheckpointUnavailableError(operation, self.endpoints, "; ".join(failures)) from last_error

    def _call_endpoint(self, operation: str, index: int, fn: Callable[[Any], T]) -> T:
        """`fn(client)` on endpoint `index`: renews an expired token once, tries once more on a fresh
        channel after a stall (module docstring); raises an unavailable etcd error as it is, every
        other as `CheckpointAuthError` or `CheckpointRequestError`."""
        endpoint = self._endpoints[index]
        for tries_left in (1, 0):
            started = time.monotonic()
            try:
                try:
                    return fn(self._client(index))
                except EtcdErrors as exc:
                    if self._prebuilt or not _is_expired_token(exc):
                        raise
                    self._forget(index)
                    return fn(self._client(index))
            except EtcdErrors as exc:
                if _is_unavailable(exc):
                    if self.stalled(time.monotonic() - started) and tries_left and not self._prebuilt:
                        self._forget(index)
                        continue
                    raise
                if _is_auth_failure(exc):
                    raise CheckpointAuthError(
                        operation, self.endpoints, self._username, _status(exc)[1]
                    ) from exc
                raise CheckpointRequestError(operation, (endpoint.url,), _status(exc)[1]) from exc
        raise AssertionError("unreachable: the last try returns or raises")

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


def is_lease_not_found(exc: BaseException) -> bool:
    """Whether an etcd error says the etcd lease does not exist (expired or already revoked)."""
    code, _ = _status(exc)
    return bool(code == grpc.StatusCode.NOT_FOUND)


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
