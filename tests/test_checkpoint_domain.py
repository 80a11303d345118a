"""Pure rules behind the checkpoint stores: keys, the offsets JSON, watermarks, commit planning,
lease handles and the metadata snapshot filter."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from kafscale_iceberg.domain.checkpoint_keys import CheckpointKeys, parse_partition, prefix_range_end
from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata, parse_metadata_snapshot
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import (
    CommittedOffsets,
    OffsetState,
    OffsetUpdate,
    decode_offset_state,
    decode_partition_states,
    encode_offset_state,
    plan_offset_write,
    topic_watermark,
)
from kafscale_iceberg.exceptions import CheckpointDataError, OffsetRegressionError


def test_keys_are_the_go_processors_with_a_per_topic_lease() -> None:
    keys = CheckpointKeys("processors")

    assert keys.offsets("orders", 3) == "processors/offsets/orders/3"
    assert keys.partition_watermark("orders", 3) == "processors/watermarks/orders/3"
    assert keys.topic_watermark("orders") == "processors/watermarks/orders"
    assert keys.lease("orders") == "processors/leases/orders"
    assert keys.go_partition_leases_prefix("orders") == "processors/leases/orders/"


@pytest.mark.parametrize("topic", ["", "a/b", "..", "orders\n", "x" * 250])
def test_a_topic_that_could_escape_its_key_is_refused(topic: str) -> None:
    with pytest.raises(ValueError, match="invalid topic"):
        CheckpointKeys("processors").offsets(topic, 0)


@pytest.mark.parametrize("partition", [-1, 2**31, True])
def test_an_invalid_partition_is_refused(partition: int) -> None:
    with pytest.raises(ValueError, match="invalid partition"):
        CheckpointKeys("processors").offsets("orders", partition)


def test_partition_suffixes_parse_only_as_plain_decimals() -> None:
    assert [parse_partition(s) for s in ["0", "17", "007", "-1", "1a", "", "2147483648"]] == [
        0,
        17,
        None,
        None,
        None,
        None,
        None,
    ]


def test_prefix_range_end_covers_exactly_the_prefix() -> None:
    assert prefix_range_end("p/offsets/orders/") == "p/offsets/orders0"


def test_offset_state_encodes_as_compact_go_json_in_field_order() -> None:
    state = OffsetState(offset=41, last_timestamp_ms=1700000000123, updated_at_ms=1700000000456)

    assert (
        encode_offset_state(state)
        == b'{"offset":41,"last_timestamp_ms":1700000000123,"updated_at":1700000000456}'
    )
    assert decode_offset_state(encode_offset_state(state), key="k") == state


def test_decoding_ignores_unknown_fields_like_go_does() -> None:
    raw = b'{"updated_at":3,"offset":1,"extra":"x","last_timestamp_ms":2}'

    assert decode_offset_state(raw, key="k") == OffsetState(1, 2, 3)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b"not json",
        b'{"offset":1,"last_timestamp_ms":2}',
        b'{"offset":1.5,"last_timestamp_ms":2,"updated_at":3}',
        b'{"offset":true,"last_timestamp_ms":2,"updated_at":3}',
        b'{"offset":-2,"last_timestamp_ms":2,"updated_at":3}',
    ],
)
def test_a_value_that_is_not_an_offset_state_is_a_data_error_naming_the_key(raw: bytes) -> None:
    with pytest.raises(CheckpointDataError, match="p/offsets/orders/0"):
        decode_offset_state(raw, key="p/offsets/orders/0")


def test_a_stray_key_under_the_offsets_prefix_is_a_data_error() -> None:
    value = encode_offset_state(OffsetState(1, 2, 3))

    with pytest.raises(CheckpointDataError, match="p/offsets/orders/x"):
        decode_partition_states([("p/offsets/orders/x", value)], prefix="p/offsets/orders/")


def test_committed_offsets_default_to_minus_one() -> None:
    offsets = CommittedOffsets("orders", {2: OffsetState(9, 0, 0)})

    assert offsets.offset(2) == 9
    assert offsets.offset(0) == -1


def test_topic_watermark_ties_go_to_the_first_partition_in_etcd_key_order() -> None:
    states = {2: OffsetState(5, 2, 0), 10: OffsetState(5, 10, 0), 3: OffsetState(8, 3, 0)}

    watermark = topic_watermark(states)

    assert watermark is not None
    assert watermark.last_timestamp_ms == 10  # "10" sorts before "2" in etcd


def test_planning_refuses_a_backwards_move_and_names_the_partition() -> None:
    committed = {0: OffsetState(10, 0, 0), 1: OffsetState(10, 0, 0)}

    with pytest.raises(OffsetRegressionError) as caught:
        plan_offset_write(
            "orders",
            committed=committed,
            partition_watermarks=committed,
            updates={0: OffsetUpdate(12, 1), 1: OffsetUpdate(8, 1)},
            now_ms=5,
            allow_rewind=False,
        )

    assert (caught.value.partition, caught.value.committed, caught.value.attempted) == (1, 10, 8)


def test_planning_a_rewind_is_allowed_only_when_asked() -> None:
    committed = {0: OffsetState(10, 0, 0)}

    write = plan_offset_write(
        "orders",
        committed=committed,
        partition_watermarks=committed,
        updates={0: OffsetUpdate(-1, 0)},
        now_ms=5,
        allow_rewind=True,
    )

    assert write.states == {0: OffsetState(-1, 0, 5)}
    assert write.topic_watermark == OffsetState(-1, 0, 5)


def test_planning_computes_the_topic_watermark_over_untouched_partitions_too() -> None:
    stored = {0: OffsetState(3, 30, 1), 1: OffsetState(9, 90, 1)}

    write = plan_offset_write(
        "orders",
        committed=stored,
        partition_watermarks=stored,
        updates={0: OffsetUpdate(20, 200)},
        now_ms=7,
        allow_rewind=False,
    )

    assert write.topic_watermark == OffsetState(9, 90, 1)


def test_an_empty_commit_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no partitions"):
        plan_offset_write(
            "orders", committed={}, partition_watermarks={}, updates={}, now_ms=0, allow_rewind=False
        )


def test_a_grant_round_trips_through_json_and_rejects_foreign_json() -> None:
    grant = LeaseGrant(
        topic="orders", owner_id="fn", run_id="r1", token=42, lease_id=7, ttl_seconds=30, claimed_at_ms=1
    )

    assert LeaseGrant.model_validate_json(grant.to_json()) == grant
    with pytest.raises(ValidationError):
        LeaseGrant.model_validate_json('{"topic":"orders"}')


def test_old_kafscale_snapshot_field_names_are_accepted() -> None:
    raw = json.dumps({"Topics": [{"ErrorCode": 0, "Name": "legacy", "Partitions": [{"PartitionIndex": 2}]}]})

    assert parse_metadata_snapshot(raw.encode(), key="k") == ClusterMetadata({"legacy": frozenset({2})})


@pytest.mark.parametrize("raw", [b"[]", b'{"Topics":{}}', b'{"Topics":[{"Topic":7}]}', b"{"])
def test_a_snapshot_of_the_wrong_shape_is_a_data_error(raw: bytes) -> None:
    with pytest.raises(CheckpointDataError):
        parse_metadata_snapshot(raw, key="/kafscale/metadata/snapshot")


def test_an_empty_snapshot_allows_nothing() -> None:
    metadata = parse_metadata_snapshot(b'{"Brokers":null,"Topics":null}', key="k")

    assert metadata == ClusterMetadata()
    assert 0 not in metadata.partitions("orders")
