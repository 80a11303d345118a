"""The checkpoint function (`functions/checkpoints.py`): the stack's one etcd client, in the VPC, which
every other function reaches through `LambdaCheckpointStore`. The store's contract through it is
`tests/test_checkpoint_store.py` (backend `function`); here: its handler on a real etcd, errors
crossing as their own class, a failed invocation as an outage, and where its etcd settings come from."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import boto3
import pytest
from botocore.stub import Stubber

from functions import checkpoints
from kafscale_iceberg.adapters.lambda_checkpoints import LambdaCheckpointStore
from kafscale_iceberg.config.deployment import etcd_from_environment
from kafscale_iceberg.domain.checkpoint_wire import StoreScope
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant
from kafscale_iceberg.exceptions import CheckpointUnavailableError, ConfigError, LeaseLostError
from tests.support.etcd import EtcdServer
from tests.support.lambdas import LambdaContext


@pytest.fixture
def through_handler(
    etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LambdaCheckpointStore]:
    """A store whose calls go through the function's handler, built from its environment as deployed."""
    monkeypatch.setenv("KAFSCALE_ICEBERG_ETCD_ENDPOINTS", etcd_server.url)
    checkpoints._stores.cache_clear()

    def invoke(payload: bytes) -> bytes:
        answer = checkpoints.handler(json.loads(payload), LambdaContext(function_name="checkpoints"))
        return json.dumps(answer).encode()

    scope = StoreScope(key_prefix=f"test-{uuid4().hex[:8]}", lease_ttl_seconds=30)
    yield LambdaCheckpointStore("checkpoints", scope, invoke=invoke)
    checkpoints._stores.cache_clear()


def test_the_handler_claims_on_the_etcd_its_environment_names(through_handler: LambdaCheckpointStore) -> None:
    grant = through_handler.claim_lease("orders", owner_id="launcher", run_id="run-1")
    assert isinstance(grant, LeaseGrant)
    busy = through_handler.claim_lease("orders", owner_id="other", run_id="run-2")
    assert isinstance(busy, LeaseBusy)
    assert (busy.topic, busy.holder.run_id) == ("orders", "run-1")
    assert through_handler.release_lease(grant)


def test_a_fencing_error_crosses_as_its_own_class_with_its_facts(
    through_handler: LambdaCheckpointStore,
) -> None:
    grant = through_handler.claim_lease("orders", owner_id="launcher", run_id="run-1")
    assert isinstance(grant, LeaseGrant)
    through_handler.release_lease(grant)
    with pytest.raises(LeaseLostError) as lost:
        through_handler.renew_lease(grant)
    assert "orders" in str(lost.value)
    assert not lost.value.transient


def test_a_failed_invocation_is_a_transient_outage_naming_the_function() -> None:
    client: Any = boto3.client("lambda", region_name="us-east-1")
    store = LambdaCheckpointStore(
        "kafscale-checkpoints", StoreScope(key_prefix="p", lease_ttl_seconds=30), client=client
    )
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            {
                "StatusCode": 200,
                "FunctionError": "Unhandled",
                "Payload": io.BytesIO(b'{"errorType": "Sandbox.Timedout"}'),
            },
        )
        stub.add_client_error("invoke", service_error_code="TooManyRequestsException", http_status_code=429)
        for _ in range(2):
            with pytest.raises(CheckpointUnavailableError) as outage:
                store.load_committed_offsets("orders")
            assert outage.value.transient
            assert "kafscale-checkpoints" in str(outage.value)


def test_its_etcd_settings_come_from_its_environment_and_the_callers_endpoints() -> None:
    passed = etcd_from_environment(
        {"KAFSCALE_ICEBERG_ETCD_USERNAME": "kafscale", "KAFSCALE_ICEBERG_ETCD_PASSWORD": "pw"},
        endpoints=("https://etcd.internal:2379",),
    )
    assert passed.endpoints == ("https://etcd.internal:2379",)
    assert (passed.username, passed.password.get_secret_value()) == ("kafscale", "pw")
    own = etcd_from_environment(
        {"KAFSCALE_ICEBERG_ETCD_ENDPOINTS": "http://a:2379,http://b:2379"}, endpoints=("x",)
    )
    assert own.endpoints == ("http://a:2379", "http://b:2379")
    with pytest.raises(ConfigError, match="KAFSCALE_ICEBERG_ETCD_ENDPOINTS"):
        etcd_from_environment({})
