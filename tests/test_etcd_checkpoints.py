"""etcd-only behaviour of `EtcdCheckpointStore`: endpoints, failover, auth, the raw lease value,
the Go processor's partition leases, and the KafScale metadata snapshot. Real etcd servers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from uuid import uuid4

import etcd3
import etcd3.etcdrpc
import grpc
import pytest

from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore
from kafscale_iceberg.adapters.etcd_client import EtcdEndpoint, parse_etcd_endpoint
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.exceptions import (
    CheckpointAuthError,
    CheckpointDataError,
    CheckpointUnavailableError,
    ConcurrentOffsetUpdateError,
    LeaseLostError,
    OffsetRegressionError,
)
from tests.support.etcd import (
    AUTH_PASSWORD,
    AUTH_TOKEN_TTL_SECONDS,
    AUTH_USER,
    LIMITED_PASSWORD,
    LIMITED_USER,
    EtcdServer,
)
from tests.support.moto import free_port

TOPIC = "orders"


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid4().hex[:10]}"


def _claim(store: EtcdCheckpointStore, topic: str = TOPIC) -> LeaseGrant:
    result = store.claim_lease(topic, owner_id="host-a", run_id="run-a")
    assert isinstance(result, LeaseGrant), result
    return result


# -- endpoints -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://etcd-0.etcd:2379", EtcdEndpoint("http://etcd-0.etcd:2379", "etcd-0.etcd", 2379, False)),
        (
            "https://etcd.example.com:12379",
            EtcdEndpoint("https://etcd.example.com:12379", "etcd.example.com", 12379, True),
        ),
        (
            "https://etcd.example.com",
            EtcdEndpoint("https://etcd.example.com", "etcd.example.com", 2379, True),
        ),
        ("127.0.0.1:23790", EtcdEndpoint("127.0.0.1:23790", "127.0.0.1", 23790, False)),
        ("http://[::1]:2379/", EtcdEndpoint("http://[::1]:2379/", "::1", 2379, False)),
    ],
)
def test_endpoint_urls_parse_like_the_go_client_takes_them(url: str, expected: EtcdEndpoint) -> None:
    assert parse_etcd_endpoint(url) == expected


@pytest.mark.parametrize(
    "url", ["unix:///var/run/etcd.sock", "http://host:2379/v3", "http://:2379", "http://h:99999"]
)
def test_an_invalid_endpoint_is_refused_naming_it(url: str) -> None:
    with pytest.raises(ValueError, match="etcd endpoint"):
        parse_etcd_endpoint(url)


def test_unreachable_etcd_is_a_transient_error_naming_every_endpoint(prefix: str) -> None:
    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    store = EtcdCheckpointStore(dead, key_prefix=prefix, timeout_seconds=2)

    started = time.monotonic()
    with pytest.raises(CheckpointUnavailableError) as caught:
        store.claim_lease(TOPIC, owner_id="a", run_id="r")

    error = caught.value
    assert error.transient
    assert error.targets == tuple(dead)
    assert all(url in str(error) for url in dead)
    assert "claim the lease of topic 'orders'" in str(error)
    assert isinstance(error.__cause__, etcd3.exceptions.Etcd3Exception | grpc.RpcError)
    assert time.monotonic() - started < 5


def test_a_dead_first_endpoint_fails_over_to_a_live_one(etcd_server: EtcdServer, prefix: str) -> None:
    store = EtcdCheckpointStore([f"http://127.0.0.1:{free_port()}", etcd_server.url], key_prefix=prefix)

    grant = _claim(store)
    store.commit_offsets(grant, {0: OffsetUpdate(5, 1)})

    assert store.load_committed_offsets(TOPIC).offset(0) == 5
    assert store.release_lease(grant) is True


def test_a_prebuilt_client_is_used_and_left_open(etcd_server: EtcdServer, prefix: str) -> None:
    client = etcd_server.raw_client()
    store = EtcdCheckpointStore(["http://prebuilt:2379"], key_prefix=prefix, client=client)

    grant = _claim(store)
    store.close()

    value, _ = client.get(f"{prefix}/leases/{TOPIC}")
    assert value is not None
    assert grant.token >= 1


# -- lease values ----------------------------------------------------------------------------------


def test_the_lease_key_is_attached_to_the_etcd_lease_and_names_owner_and_run(
    etcd_server: EtcdServer, prefix: str
) -> None:
    store = EtcdCheckpointStore(
        [etcd_server.url], key_prefix=prefix, lease_ttl_seconds=7, now_ms=lambda: 1000
    )

    grant = store.claim_lease(TOPIC, owner_id="launcher-fn", run_id="run-9")

    assert isinstance(grant, LeaseGrant)
    value, meta = etcd_server.raw_client().get(f"{prefix}/leases/{TOPIC}")
    assert json.loads(value) == {
        "owner_id": "launcher-fn",
        "run_id": "run-9",
        "claimed_at_ms": 1000,
        "lease_expires_at": 8000,
        "ttl_seconds": 7,
    }
    assert meta.lease_id == grant.lease_id
    assert meta.create_revision == grant.token
    assert grant.ttl_seconds == 7


def test_a_losing_claim_revokes_the_etcd_lease_it_was_granted(etcd_server: EtcdServer, prefix: str) -> None:
    raw = etcd_server.raw_client()
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix, lease_ttl_seconds=60)
    _claim(store)

    def live_leases() -> set[int]:
        response = raw.leasestub.LeaseLeases(etcd3.etcdrpc.LeaseLeasesRequest(), 5)
        return {lease.ID for lease in response.leases}

    before = live_leases()
    busy = store.claim_lease(TOPIC, owner_id="host-b", run_id="run-b")

    assert isinstance(busy, LeaseBusy)
    assert live_leases() - before == set()


def test_a_go_processor_partition_lease_blocks_the_topic_claim(etcd_server: EtcdServer, prefix: str) -> None:
    raw = etcd_server.raw_client()
    go_lease = raw.lease(60)
    raw.put(
        f"{prefix}/leases/{TOPIC}/3",
        b'{"owner_id":"iceberg-processor-0","lease_expires_at":1700000030000,"generation":1}',
        lease=go_lease,
    )
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix)

    result = store.claim_lease(TOPIC, owner_id="host-a", run_id="run-a")

    assert isinstance(result, LeaseBusy)
    assert result.holder.is_go_processor
    assert (result.holder.partition, result.holder.owner_id, result.holder.run_id) == (
        3,
        "iceberg-processor-0",
        None,
    )
    assert "Go processor" in result.describe()
    assert store.read_lease_holder(TOPIC) == result.holder
    assert isinstance(store.claim_lease("payments", owner_id="host-a", run_id="run-p"), LeaseGrant)
    payments = store.read_lease_holder("payments")
    assert payments is not None
    assert (payments.topic, payments.partition) == ("payments", None)


def test_a_foreign_value_under_our_lease_key_is_a_data_error(etcd_server: EtcdServer, prefix: str) -> None:
    etcd_server.raw_client().put(f"{prefix}/leases/{TOPIC}", b"not json")
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix)

    with pytest.raises(CheckpointDataError, match=f"{prefix}/leases/{TOPIC}"):
        store.read_lease_holder(TOPIC)


def test_a_corrupt_offsets_value_is_a_data_error_naming_the_key(etcd_server: EtcdServer, prefix: str) -> None:
    etcd_server.raw_client().put(f"{prefix}/offsets/{TOPIC}/0", b'{"offset":"12"}')
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix)

    with pytest.raises(CheckpointDataError, match=f"{prefix}/offsets/{TOPIC}/0") as caught:
        store.load_committed_offsets(TOPIC)

    assert not caught.value.transient


# -- races between the read and the fenced write (the store asks the clock in between) -------------


class RacingClock:
    """A clock that runs `action` the next time the store asks for the time, once or every time."""

    def __init__(self) -> None:
        self.action: Callable[[], None] | None = None
        self.repeat = False

    def __call__(self) -> int:
        action = self.action
        if action is not None:
            if not self.repeat:
                self.action = None
            action()
        return 1_700_000_000_000


def test_a_lease_lost_between_read_and_write_fences_the_commit(etcd_server: EtcdServer, prefix: str) -> None:
    clock = RacingClock()
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix, now_ms=clock)
    grant = _claim(store)
    other = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix)

    def steal() -> None:
        etcd_server.raw_client().revoke_lease(grant.lease_id)
        assert isinstance(other.claim_lease(TOPIC, owner_id="host-b", run_id="run-b"), LeaseGrant)

    clock.action = steal
    with pytest.raises(LeaseLostError, match="run-b"):
        store.commit_offsets(grant, {0: OffsetUpdate(10, 1)})

    assert etcd_server.raw_client().get(f"{prefix}/offsets/{TOPIC}/0") == (None, None)


def test_an_unfenced_writer_racing_a_commit_cannot_make_it_move_offsets_backwards(
    etcd_server: EtcdServer, prefix: str
) -> None:
    clock = RacingClock()
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix, now_ms=clock)
    grant = _claim(store)
    store.commit_offsets(grant, {0: OffsetUpdate(10, 1)})
    go_value = b'{"offset":50,"last_timestamp_ms":5,"updated_at":6}'
    clock.action = lambda: etcd_server.raw_client().put(f"{prefix}/offsets/{TOPIC}/0", go_value)

    with pytest.raises(OffsetRegressionError) as caught:
        store.commit_offsets(grant, {0: OffsetUpdate(20, 2)})

    assert (caught.value.committed, caught.value.attempted) == (50, 20)
    assert etcd_server.raw_client().get(f"{prefix}/offsets/{TOPIC}/0")[0] == go_value


def test_offsets_changing_under_every_attempt_give_up_with_a_transient_error(
    etcd_server: EtcdServer, prefix: str
) -> None:
    clock = RacingClock()
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix, now_ms=clock)
    grant = _claim(store)
    writes = iter(range(1, 100))
    clock.action = lambda: etcd_server.raw_client().put(
        f"{prefix}/offsets/{TOPIC}/0", f'{{"offset":{next(writes)},"last_timestamp_ms":0,"updated_at":0}}'
    )
    clock.repeat = True

    with pytest.raises(ConcurrentOffsetUpdateError) as caught:
        store.commit_offsets(grant, {0: OffsetUpdate(1000, 2)})

    assert caught.value.transient
    assert "Go processor" in str(caught.value)
    assert json.loads(etcd_server.raw_client().get(f"{prefix}/offsets/{TOPIC}/0")[0])["offset"] < 1000


def test_a_commit_wider_than_one_etcd_transaction_is_written_in_fenced_chunks(
    etcd_server: EtcdServer, prefix: str
) -> None:
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix, max_txn_ops=8)  # 3 partitions per txn
    grant = _claim(store)

    store.commit_offsets(grant, {p: OffsetUpdate(100 - p, p) for p in range(10)})

    offsets = store.load_committed_offsets(TOPIC)
    assert [offsets.offset(p) for p in range(10)] == [100 - p for p in range(10)]
    assert json.loads(etcd_server.raw_client().get(f"{prefix}/watermarks/{TOPIC}")[0])["offset"] == 91


# -- auth ------------------------------------------------------------------------------------------


def test_username_and_password_authenticate(etcd_auth_server: EtcdServer, prefix: str) -> None:
    store = EtcdCheckpointStore(
        [etcd_auth_server.url], key_prefix=prefix, username=AUTH_USER, password=AUTH_PASSWORD
    )

    grant = _claim(store)
    store.commit_offsets(grant, {0: OffsetUpdate(3, 1)})

    assert store.load_committed_offsets(TOPIC).offset(0) == 3
    assert store.release_lease(grant) is True


def test_a_wrong_password_is_a_terminal_auth_error_naming_the_user_not_the_password(
    etcd_auth_server: EtcdServer, prefix: str
) -> None:
    store = EtcdCheckpointStore(
        [etcd_auth_server.url], key_prefix=prefix, username=AUTH_USER, password="wrong-horse-battery"
    )

    with pytest.raises(CheckpointAuthError) as caught:
        store.load_committed_offsets(TOPIC)

    assert not caught.value.transient
    assert AUTH_USER in str(caught.value)
    assert "wrong-horse-battery" not in str(caught.value)
    assert etcd_auth_server.url in str(caught.value)


def test_no_credentials_against_an_auth_server_is_an_auth_error(
    etcd_auth_server: EtcdServer, prefix: str
) -> None:
    store = EtcdCheckpointStore([etcd_auth_server.url], key_prefix=prefix)

    with pytest.raises(CheckpointAuthError, match=r"etcd\.username is empty"):
        store.load_committed_offsets(TOPIC)


def test_a_user_without_permission_is_an_auth_error(etcd_auth_server: EtcdServer, prefix: str) -> None:
    store = EtcdCheckpointStore(
        [etcd_auth_server.url], key_prefix=prefix, username=LIMITED_USER, password=LIMITED_PASSWORD
    )

    with pytest.raises(CheckpointAuthError, match="permission denied"):
        store.claim_lease(TOPIC, owner_id="a", run_id="r")


def test_an_expired_auth_token_is_renewed_transparently(etcd_auth_server: EtcdServer, prefix: str) -> None:
    store = EtcdCheckpointStore(
        [etcd_auth_server.url], key_prefix=prefix, username=AUTH_USER, password=AUTH_PASSWORD
    )
    grant = _claim(store)

    time.sleep(AUTH_TOKEN_TTL_SECONDS + 1.5)  # etcd drops idle simple tokens after their TTL
    store.commit_offsets(grant, {0: OffsetUpdate(1, 1)})

    assert store.load_committed_offsets(TOPIC).offset(0) == 1


# -- KafScale cluster metadata ---------------------------------------------------------------------

SNAPSHOT = {
    "Brokers": [{"NodeID": 0, "Host": "broker-0", "Port": 9092, "Rack": None, "UnknownTags": {}}],
    "ControllerID": 0,
    "topics": [  # Go's decoder matches field names case-insensitively: so must we
        {
            "ErrorCode": 0,
            "Topic": "orders",
            "TopicID": [0] * 16,
            "IsInternal": False,
            "Partitions": [
                {"ErrorCode": 0, "Partition": 0, "Leader": 0, "Replicas": [0], "ISR": [0]},
                {"errorcode": 0, "PARTITION": 1},
                {"ErrorCode": 9, "Partition": 2},
            ],
        },
        {"ErrorCode": 3, "Topic": "deleted-topic", "Partitions": [{"ErrorCode": 0, "Partition": 0}]},
        {"errorCode": 0, "topic": "payments", "partitions": [{"partition": 4}]},
        {"ErrorCode": 0, "Topic": "all-partitions-offline", "Partitions": [{"ErrorCode": 5, "Partition": 0}]},
        {"ErrorCode": 0, "Topic": None, "Partitions": [{"ErrorCode": 0, "Partition": 0}]},
    ],
    "ClusterName": "kafscale",
    "ClusterID": "3f1c",
}


def test_the_metadata_snapshot_becomes_a_topic_partition_filter(etcd_server: EtcdServer, prefix: str) -> None:
    key = f"/{prefix}/kafscale/metadata/snapshot"
    etcd_server.raw_client().put(key, json.dumps(SNAPSHOT).encode())
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix, metadata_snapshot_key=key)

    metadata = store.read_cluster_metadata()

    assert metadata == ClusterMetadata({"orders": frozenset({0, 1}), "payments": frozenset({4})})
    assert 1 in metadata.partitions("orders")
    assert 2 not in metadata.partitions("orders")
    assert 0 not in metadata.partitions("deleted-topic")


def test_a_missing_metadata_snapshot_reads_as_none(etcd_server: EtcdServer, prefix: str) -> None:
    store = EtcdCheckpointStore(
        [etcd_server.url], key_prefix=prefix, metadata_snapshot_key=f"/{prefix}/no/snapshot"
    )

    assert store.read_cluster_metadata() is None


def test_a_malformed_metadata_snapshot_is_a_data_error_naming_the_path(
    etcd_server: EtcdServer, prefix: str
) -> None:
    key = f"/{prefix}/kafscale/metadata/snapshot"
    etcd_server.raw_client().put(key, b'{"Topics":[{"Topic":"orders","Partitions":[{"Partition":"0"}]}]}')
    store = EtcdCheckpointStore([etcd_server.url], key_prefix=prefix, metadata_snapshot_key=key)

    with pytest.raises(CheckpointDataError, match=r"Topics\[0\]\.Partitions\[0\]\.Partition"):
        store.read_cluster_metadata()


def test_the_sqlite_store_has_no_cluster_metadata(tmp_path: Path) -> None:
    store = SqliteCheckpointStore(tmp_path / "checkpoints.sqlite")

    assert store.read_cluster_metadata() is None
