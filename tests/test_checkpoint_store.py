"""The `CheckpointStore` contract, run against every backend: a real etcd server, the same etcd
through the checkpoint function (AWS: the one etcd client in the VPC; each call a JSON request and
answer, as Lambda's `Invoke` carries them), and a SQLite file.

Each test gets a fresh key prefix (and SQLite file). Leases use a 60 s TTL, which no pause of a loaded
machine outlasts; a test that needs a lease to run out drives it: on etcd the lease is revoked (what etcd
does when the TTL passes: the attached key is deleted), on SQLite the injected clock jumps past the TTL.
No verdict depends on how fast the machine is (issue 35 §5).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore
from kafscale_iceberg.adapters.lambda_checkpoints import LambdaCheckpointStore
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.checkpoint_wire import CheckpointRequest, StoreScope
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant
from kafscale_iceberg.domain.offsets import NO_OFFSET, OffsetState, OffsetUpdate
from kafscale_iceberg.exceptions import LeaseLostError, OffsetRegressionError
from kafscale_iceberg.ports import CheckpointStore
from kafscale_iceberg.services.checkpoint_gateway import serve_checkpoint_request
from tests.support.etcd import EtcdServer

TOPIC = "orders"
T0_MS = 1_700_000_000_456
TTL_S = 60


class FakeClock:
    """Wall-clock milliseconds that only move when a test says so."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += int(seconds * 1000)


@dataclass
class Backend:
    """One store backend under test, with raw key access and a way to let time pass."""

    name: str
    prefix: str
    clock: FakeClock
    new_store: Callable[..., CheckpointStore]
    """A store on the backend; `ttl_seconds` (`TTL_S` by default) its lease TTL."""
    raw_get: Callable[[str], bytes | None]
    raw_put: Callable[[str, bytes], None]
    pass_time: Callable[[float], None]
    expire: Callable[[LeaseGrant], None]
    """Make the grant's TTL run out now (etcd: revoke its lease; SQLite: the clock jumps past it)."""
    remaining_ttl_s: Callable[[LeaseGrant], float]
    """What the store itself counts as left of the grant's TTL."""

    def wait_until_expired(self, store: CheckpointStore, grant: LeaseGrant) -> None:
        """Run the grant's TTL out, then poll until the store no longer reports it as the holder."""
        self.expire(grant)
        deadline = time.monotonic() + 120  # bounds a failing test only: etcd deletes the key at once
        while True:
            holder = store.read_lease_holder(grant.topic)
            if holder is None or holder.token != grant.token:
                return
            assert time.monotonic() < deadline, f"lease {grant.token} did not expire"
            time.sleep(0.05)


def _etcd_backend(server: EtcdServer, prefix: str, clock: FakeClock) -> Backend:
    raw = server.raw_client()

    def raw_get(key: str) -> bytes | None:
        value: bytes | None = raw.get(key)[0]
        return value

    def new_store(ttl_seconds: int = TTL_S) -> CheckpointStore:
        return EtcdCheckpointStore(
            [server.url], key_prefix=prefix, lease_ttl_seconds=ttl_seconds, now_ms=clock
        )

    def pass_time(seconds: float) -> None:
        time.sleep(seconds)
        clock.advance(seconds)

    def expire(grant: LeaseGrant) -> None:
        raw.revoke_lease(grant.lease_id)

    def remaining_ttl_s(grant: LeaseGrant) -> float:
        return float(raw.get_lease_info(grant.lease_id).TTL)

    return Backend("etcd", prefix, clock, new_store, raw_get, raw.put, pass_time, expire, remaining_ttl_s)


def _function_backend(server: EtcdServer, prefix: str, clock: FakeClock) -> Backend:
    """etcd through the checkpoint function's service: every call crosses as JSON bytes."""
    etcd = _etcd_backend(server, prefix, clock)

    def store_of(scope: StoreScope) -> CheckpointStore:
        return EtcdCheckpointStore(
            [server.url], key_prefix=scope.key_prefix, lease_ttl_seconds=scope.lease_ttl_seconds, now_ms=clock
        )

    def invoke(payload: bytes) -> bytes:
        answer = serve_checkpoint_request(store_of, CheckpointRequest.model_validate_json(payload))
        return answer.model_dump_json().encode()

    def new_store(ttl_seconds: int = TTL_S) -> CheckpointStore:
        scope = StoreScope(key_prefix=prefix, lease_ttl_seconds=ttl_seconds)
        return LambdaCheckpointStore("checkpoints", scope, invoke=invoke)

    return Backend(
        "function",
        prefix,
        clock,
        new_store,
        etcd.raw_get,
        etcd.raw_put,
        etcd.pass_time,
        etcd.expire,
        etcd.remaining_ttl_s,
    )


def _sqlite_backend(path: Path, prefix: str, clock: FakeClock) -> Backend:
    def new_store(ttl_seconds: int = TTL_S) -> CheckpointStore:
        return SqliteCheckpointStore(path, key_prefix=prefix, lease_ttl_seconds=ttl_seconds, now_ms=clock)

    def raw_get(key: str) -> bytes | None:
        with sqlite3.connect(path) as db:
            row = db.execute("SELECT value FROM checkpoint_kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def raw_put(key: str, value: bytes) -> None:
        new_store().load_committed_offsets(TOPIC)  # creates the schema
        with sqlite3.connect(path) as db:
            db.execute("INSERT OR REPLACE INTO checkpoint_kv (key, value) VALUES (?, ?)", (key, value))

    def expire(grant: LeaseGrant) -> None:
        clock.advance(grant.ttl_seconds + 1)

    def remaining_ttl_s(grant: LeaseGrant) -> float:
        holder = new_store().read_lease_holder(grant.topic)
        assert holder is not None
        assert holder.expires_at_ms is not None
        return (holder.expires_at_ms - clock()) / 1000

    return Backend(
        "sqlite", prefix, clock, new_store, raw_get, raw_put, clock.advance, expire, remaining_ttl_s
    )


@pytest.fixture(params=["etcd", "function", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    prefix = f"test-{uuid4().hex[:10]}"
    clock = FakeClock(T0_MS)
    if request.param == "etcd":
        yield _etcd_backend(request.getfixturevalue("etcd_server"), prefix, clock)
    elif request.param == "function":
        yield _function_backend(request.getfixturevalue("etcd_server"), prefix, clock)
    else:
        yield _sqlite_backend(tmp_path / "checkpoints.sqlite", prefix, clock)


def _claim(
    store: CheckpointStore, owner: str = "host-a", run: str = "run-a", topic: str = TOPIC
) -> LeaseGrant:
    result = store.claim_lease(topic, owner_id=owner, run_id=run)
    assert isinstance(result, LeaseGrant), result
    return result


def _lose_to_other(backend: Backend, store: CheckpointStore, grant: LeaseGrant) -> LeaseGrant:
    """Let `grant` expire and have another owner claim the topic."""
    backend.wait_until_expired(store, grant)
    return _claim(backend.new_store(), owner="host-b", run="run-b", topic=grant.topic)


# -- leases ----------------------------------------------------------------------------------------


def test_claim_grants_the_topic_lease_to_owner_and_run(backend: Backend) -> None:
    store = backend.new_store()

    grant = _claim(store, owner="launcher-fn", run="run-1")

    assert (grant.topic, grant.owner_id, grant.run_id) == (TOPIC, "launcher-fn", "run-1")
    assert grant.token >= 1
    assert grant.ttl_seconds >= 1
    holder = store.read_lease_holder(TOPIC)
    assert holder is not None
    assert (holder.owner_id, holder.run_id, holder.token) == ("launcher-fn", "run-1", grant.token)


def test_claim_of_a_held_topic_is_busy_and_names_the_holder(backend: Backend) -> None:
    first = _claim(backend.new_store(), owner="host-a", run="run-a")

    result = backend.new_store().claim_lease(TOPIC, owner_id="host-b", run_id="run-b")

    assert isinstance(result, LeaseBusy)
    assert (result.holder.owner_id, result.holder.run_id) == ("host-a", "run-a")
    assert result.holder.token == first.token
    assert "host-a" in result.describe()


def test_leases_of_different_topics_are_independent(backend: Backend) -> None:
    store = backend.new_store()

    a = _claim(store, topic="orders")
    b = _claim(store, topic="payments")

    assert a.token != b.token
    holders = [store.read_lease_holder(topic) for topic in ("orders", "payments")]
    assert [(h.topic, h.token) for h in holders if h is not None] == [
        ("orders", a.token),
        ("payments", b.token),
    ]


def test_claim_after_expiry_succeeds_with_a_larger_token(backend: Backend) -> None:
    store = backend.new_store()
    first = _claim(store)
    backend.wait_until_expired(store, first)

    second = _claim(backend.new_store(), owner="host-b", run="run-b")

    assert second.token > first.token
    holder = store.read_lease_holder(TOPIC)
    assert holder is not None
    assert holder.run_id == "run-b"


def test_renewing_restarts_the_lease_s_ttl(backend: Backend) -> None:
    """A renewal gives the lease its whole TTL again, as the store counts it: measured against the
    store's own count (etcd's lease TTL, SQLite's expiry), so no pause of the machine can decide it."""
    store = backend.new_store()
    grant = _claim(store)
    backend.pass_time(2.5)
    before = backend.remaining_ttl_s(grant)
    assert before <= TTL_S - 2

    renewed_at = time.monotonic()
    store.renew_lease(grant)
    after = backend.remaining_ttl_s(grant)

    since = time.monotonic() - renewed_at if backend.name != "sqlite" else 0.0
    assert after >= TTL_S - since - 1  # etcd counts whole seconds; without the renewal: before - since
    holder = store.read_lease_holder(TOPIC)
    assert holder is not None
    assert holder.token == grant.token
    assert isinstance(backend.new_store().claim_lease(TOPIC, owner_id="b", run_id="b"), LeaseBusy)


def test_renewing_an_expired_lease_raises_lease_lost(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)
    backend.wait_until_expired(store, grant)

    with pytest.raises(LeaseLostError) as caught:
        store.renew_lease(grant)

    assert caught.value.topic == TOPIC
    assert caught.value.token == grant.token
    assert not caught.value.transient


def test_renewing_a_lease_reclaimed_by_another_raises_lease_lost_naming_the_holder(backend: Backend) -> None:
    store = backend.new_store()
    stale = _claim(store)
    _lose_to_other(backend, store, stale)

    with pytest.raises(LeaseLostError, match="run-b"):
        store.renew_lease(stale)

    holder = store.read_lease_holder(TOPIC)
    assert holder is not None
    assert holder.run_id == "run-b"


def test_release_deletes_our_lease_and_is_idempotent(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)

    assert store.release_lease(grant) is True
    assert store.release_lease(grant) is False
    assert store.read_lease_holder(TOPIC) is None
    assert isinstance(store.claim_lease(TOPIC, owner_id="b", run_id="b"), LeaseGrant)


def test_a_stale_release_leaves_the_new_holders_lease_alone(backend: Backend) -> None:
    store = backend.new_store()
    stale = _claim(store)
    current = _lose_to_other(backend, store, stale)

    assert store.release_lease(stale) is False

    holder = store.read_lease_holder(TOPIC)
    assert holder is not None
    assert holder.token == current.token


def test_concurrent_claims_grant_exactly_one(backend: Backend) -> None:
    contenders = 6
    barrier = threading.Barrier(contenders)
    results: list[Any] = []
    stores = [backend.new_store() for _ in range(contenders)]

    def claim(index: int) -> None:
        barrier.wait()
        results.append(stores[index].claim_lease(TOPIC, owner_id=f"host-{index}", run_id=f"run-{index}"))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    grants = [r for r in results if isinstance(r, LeaseGrant)]
    assert len(results) == contenders
    assert len(grants) == 1
    assert all(r.holder.token == grants[0].token for r in results if isinstance(r, LeaseBusy))


def test_a_new_sqlite_file_being_created_by_another_connection_is_waited_for(tmp_path: Path) -> None:
    """Root cause of `test_concurrent_claims_grant_exactly_one[sqlite]` failing about once in 100:
    while another connection creates the schema of a new file (a rollback-journal write), SQLite
    answers the switch to WAL `database is locked` at once, without waiting its busy timeout."""
    path = tmp_path / "new.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE made_by_another_process (a)")
    threading.Timer(0.3, other.execute, args=("COMMIT",)).start()
    started = time.monotonic()

    grant = SqliteCheckpointStore(path).claim_lease(TOPIC, owner_id="host", run_id="run-1")

    assert isinstance(grant, LeaseGrant)
    assert time.monotonic() - started >= 0.25  # it waited for the other connection's commit
    other.close()


def test_grant_survives_a_json_round_trip_into_other_processes(backend: Backend) -> None:
    launcher = backend.new_store()
    payload = _claim(launcher, owner="launcher", run="run-7").to_json()

    heartbeat = backend.new_store()
    heartbeat.renew_lease(LeaseGrant.model_validate_json(payload))
    committer = backend.new_store()
    grant = LeaseGrant.model_validate_json(json.loads(json.dumps(payload)))
    committer.commit_offsets(grant, {0: OffsetUpdate(offset=9, last_timestamp_ms=5)})

    assert committer.release_lease(grant) is True
    assert launcher.load_committed_offsets(TOPIC).offset(0) == 9
    assert launcher.read_lease_holder(TOPIC) is None


# -- offsets ---------------------------------------------------------------------------------------


def test_partitions_without_committed_offsets_read_as_minus_one(backend: Backend) -> None:
    offsets = backend.new_store().load_committed_offsets(TOPIC)

    assert offsets.offset(0) == NO_OFFSET == -1
    assert offsets.state(0) is None
    assert dict(offsets.states) == {}


def test_commit_writes_several_partitions_in_one_call(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)

    written = store.commit_offsets(
        grant,
        {
            0: OffsetUpdate(offset=41, last_timestamp_ms=1000),
            3: OffsetUpdate(offset=7, last_timestamp_ms=2000),
        },
    )

    offsets = backend.new_store().load_committed_offsets(TOPIC)
    assert offsets.offset(0) == 41
    assert offsets.offset(3) == 7
    assert offsets.offset(1) == -1
    assert offsets.state(3) == OffsetState(offset=7, last_timestamp_ms=2000, updated_at_ms=T0_MS)
    assert written == dict(offsets.states)


def test_offsets_values_are_byte_identical_to_the_go_processor(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)

    store.commit_offsets(grant, {2: OffsetUpdate(offset=41, last_timestamp_ms=1700000000123)})

    expected = b'{"offset":41,"last_timestamp_ms":1700000000123,"updated_at":1700000000456}'
    go_marshal = json.dumps(
        {"offset": 41, "last_timestamp_ms": 1700000000123, "updated_at": T0_MS}, separators=(",", ":")
    ).encode()
    assert expected == go_marshal
    assert backend.raw_get(f"{backend.prefix}/offsets/{TOPIC}/2") == expected
    assert backend.raw_get(f"{backend.prefix}/watermarks/{TOPIC}/2") == expected
    assert backend.raw_get(f"{backend.prefix}/watermarks/{TOPIC}") == expected


def test_offsets_written_by_the_go_processor_read_back(backend: Backend) -> None:
    backend.raw_put(
        f"{backend.prefix}/offsets/{TOPIC}/0",
        b'{"offset":1234,"last_timestamp_ms":1700000000000,"updated_at":17}',
    )
    backend.raw_put(
        f"{backend.prefix}/offsets/{TOPIC}/11", b'{"offset":0,"last_timestamp_ms":0,"updated_at":0}'
    )

    offsets = backend.new_store().load_committed_offsets(TOPIC)

    assert offsets.state(0) == OffsetState(offset=1234, last_timestamp_ms=1700000000000, updated_at_ms=17)
    assert offsets.offset(11) == 0
    assert sorted(offsets.states) == [0, 11]


def test_a_commit_continues_from_go_processor_offsets(backend: Backend) -> None:
    backend.raw_put(
        f"{backend.prefix}/offsets/{TOPIC}/0", b'{"offset":100,"last_timestamp_ms":5,"updated_at":6}'
    )
    store = backend.new_store()
    grant = _claim(store)

    with pytest.raises(OffsetRegressionError):
        store.commit_offsets(grant, {0: OffsetUpdate(offset=99, last_timestamp_ms=7)})
    store.commit_offsets(grant, {0: OffsetUpdate(offset=150, last_timestamp_ms=7)})

    assert store.load_committed_offsets(TOPIC).offset(0) == 150


def test_topic_watermark_is_the_smallest_offset_across_all_partitions(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)
    store.commit_offsets(
        grant,
        {
            0: OffsetUpdate(offset=10, last_timestamp_ms=100),
            1: OffsetUpdate(offset=5, last_timestamp_ms=50),
            2: OffsetUpdate(offset=7, last_timestamp_ms=70),
        },
    )

    store.commit_offsets(grant, {0: OffsetUpdate(offset=12, last_timestamp_ms=120)})  # 1 and 2 not in it
    watermark_after_first = backend.raw_get(f"{backend.prefix}/watermarks/{TOPIC}")
    store.commit_offsets(grant, {1: OffsetUpdate(offset=20, last_timestamp_ms=200)})

    assert watermark_after_first == b'{"offset":5,"last_timestamp_ms":50,"updated_at":1700000000456}'
    assert backend.raw_get(f"{backend.prefix}/watermarks/{TOPIC}") == (
        b'{"offset":7,"last_timestamp_ms":70,"updated_at":1700000000456}'
    )
    assert backend.raw_get(f"{backend.prefix}/watermarks/{TOPIC}/0") == backend.raw_get(
        f"{backend.prefix}/offsets/{TOPIC}/0"
    )


def test_offsets_never_move_backwards_and_a_refused_commit_writes_nothing(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)
    store.commit_offsets(grant, {0: OffsetUpdate(10, 1), 1: OffsetUpdate(10, 1)})
    before = {k: backend.raw_get(k) for k in _all_keys(backend, partitions=(0, 1))}

    with pytest.raises(OffsetRegressionError) as caught:
        store.commit_offsets(grant, {0: OffsetUpdate(11, 2), 1: OffsetUpdate(9, 2)})

    error = caught.value
    assert (error.topic, error.partition, error.committed, error.attempted) == (TOPIC, 1, 10, 9)
    assert not error.transient
    assert "reset-offsets" in str(error)
    assert {k: backend.raw_get(k) for k in before} == before


def test_committing_the_same_offsets_again_is_accepted(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)
    store.commit_offsets(grant, {0: OffsetUpdate(10, 1)})

    store.commit_offsets(grant, {0: OffsetUpdate(10, 1)})

    assert store.load_committed_offsets(TOPIC).offset(0) == 10


def test_commit_with_a_stale_grant_raises_lease_lost_and_writes_nothing(backend: Backend) -> None:
    store = backend.new_store()
    stale = _claim(store)
    store.commit_offsets(stale, {0: OffsetUpdate(10, 1)})
    current = _lose_to_other(backend, store, stale)
    before = {k: backend.raw_get(k) for k in _all_keys(backend, partitions=(0, 1))}

    with pytest.raises(LeaseLostError) as caught:
        store.commit_offsets(stale, {0: OffsetUpdate(20, 2), 1: OffsetUpdate(5, 2)})

    assert caught.value.run_id == "run-a"
    assert f"token {current.token}" in str(caught.value)
    assert {k: backend.raw_get(k) for k in before} == before


def test_commit_after_release_raises_lease_lost(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)
    store.release_lease(grant)

    with pytest.raises(LeaseLostError):
        store.commit_offsets(grant, {0: OffsetUpdate(1, 1)})

    assert backend.raw_get(f"{backend.prefix}/offsets/{TOPIC}/0") is None


def test_reset_rewinds_offsets_and_watermarks_while_the_lease_is_held(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)
    store.commit_offsets(grant, {0: OffsetUpdate(50, 1), 1: OffsetUpdate(60, 1)})

    store.reset_offsets(
        grant, {0: OffsetUpdate(offset=NO_OFFSET, last_timestamp_ms=0), 1: OffsetUpdate(30, 1)}
    )

    offsets = store.load_committed_offsets(TOPIC)
    assert (offsets.offset(0), offsets.offset(1)) == (-1, 30)
    assert backend.raw_get(f"{backend.prefix}/watermarks/{TOPIC}") == (
        b'{"offset":-1,"last_timestamp_ms":0,"updated_at":1700000000456}'
    )


def test_reset_with_a_stale_grant_raises_lease_lost_and_writes_nothing(backend: Backend) -> None:
    store = backend.new_store()
    stale = _claim(store)
    store.commit_offsets(stale, {0: OffsetUpdate(50, 1)})
    _lose_to_other(backend, store, stale)

    with pytest.raises(LeaseLostError):
        store.reset_offsets(stale, {0: OffsetUpdate(0, 0)})

    assert store.load_committed_offsets(TOPIC).offset(0) == 50


def test_one_commit_can_cover_hundreds_of_partitions(backend: Backend) -> None:
    store = backend.new_store()
    grant = _claim(store)

    store.commit_offsets(grant, {p: OffsetUpdate(offset=1000 + p, last_timestamp_ms=p) for p in range(300)})

    offsets = store.load_committed_offsets(TOPIC)
    assert len(offsets.states) == 300
    assert offsets.offset(299) == 1299
    assert backend.raw_get(f"{backend.prefix}/watermarks/{TOPIC}") == (
        b'{"offset":1000,"last_timestamp_ms":0,"updated_at":1700000000456}'
    )


def _all_keys(backend: Backend, partitions: tuple[int, ...]) -> list[str]:
    keys = [f"{backend.prefix}/watermarks/{TOPIC}"]
    for p in partitions:
        keys += [f"{backend.prefix}/offsets/{TOPIC}/{p}", f"{backend.prefix}/watermarks/{TOPIC}/{p}"]
    return keys
