"""`make test-fast` (`pytest -m "not slow"`): the tests that need no JVM, linter or subprocess.

`slow` marks a test that starts a JVM (local Spark), a linter, or any other process (the CLI, `make`,
a fresh interpreter). The real servers the session fixtures start (etcd) do not count. Tests using a
JVM fixture are marked here, at collection; the others carry the mark themselves, and in the fast
loop a test whose body starts a process unmarked fails, naming the process, so the marks stay exact.
A test body that connects or resolves a name anywhere but loopback fails there too (tests talk to
local servers only; an off-machine request would also wait out its retries).
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
from collections.abc import Generator
from typing import Any

import pytest

# Fixtures that start a JVM (local Spark): a test using one, directly or through another fixture,
# is `slow`.
JVM_FIXTURES = frozenset({"spark"})
FAST_LOOP_MARKEXPR = "not slow"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests using a JVM fixture `slow`, before `-m` selects (tryfirst)."""
    for item in items:
        if JVM_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """In the fast loop, fail a test not marked slow whose body starts a process or reaches off the
    machine, naming what it started or reached."""
    if item.config.getoption("markexpr") != FAST_LOOP_MARKEXPR or item.get_closest_marker("slow"):
        return (yield)
    started: list[str] = []
    off_machine: list[str] = []
    original_popen = subprocess.Popen.__init__
    original_connect = socket.socket.connect
    original_getaddrinfo = socket.getaddrinfo

    def recording(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        argv = args if isinstance(args, list | tuple) else [args]
        started.append(" ".join(str(part) for part in argv)[:200])
        original_popen(self, args, *rest, **options)

    def loopback_only(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            off_machine.append(f"{address[0]}:{address[1]}")
            raise ConnectionRefusedError(f"the fast loop connects to loopback only, not {address[0]}")
        original_connect(self, address)

    def resolve_loopback_only(host: Any, *rest: Any, **options: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode()
        if host is not None and not _is_loopback(str(host)):
            off_machine.append(str(host))
            raise socket.gaierror(socket.EAI_NONAME, f"the fast loop resolves loopback names only: {host}")
        return original_getaddrinfo(host, *rest, **options)

    subprocess.Popen.__init__ = recording  # type: ignore[method-assign]
    socket.socket.connect = loopback_only  # type: ignore[method-assign]
    socket.getaddrinfo = resolve_loopback_only
    try:
        result = yield
    finally:
        subprocess.Popen.__init__ = original_popen  # type: ignore[method-assign]
        socket.socket.connect = original_connect  # type: ignore[method-assign]
        socket.getaddrinfo = original_getaddrinfo
    if started:
        pytest.fail(
            f"this test starts a process ({started[0]}) but is not marked slow: `make test-fast` runs no "
            "JVM, linter or subprocess; mark it @pytest.mark.slow",
            pytrace=False,
        )
    if off_machine:
        pytest.fail(
            f"this test connects to {off_machine[0]}, off this machine: tests talk to loopback servers only "
            "(point the client at the moto server or a local path)",
            pytrace=False,
        )
    return result


def _is_loopback(host: str) -> bool:
    """Loopback, or the wildcard a server binds to (`""`, `0.0.0.0`, `::`): nothing leaves the machine."""
    if host in {"", "localhost"}:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified
