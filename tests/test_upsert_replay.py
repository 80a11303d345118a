"""`replay --reset-offsets` on an upsert table: a rewind to anything but the partitions' start is refused
naming what to do (the earlier values of the keys cannot be recomputed from the table's rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import load_config_from
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.replay import ReplayRequest
from kafscale_iceberg.exceptions import OffsetResetRefusedError
from tests.support.config_documents import local_document
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

TOPIC, TABLE, NS = "customers", "crm.customers", "ns"


@pytest.fixture
def assembly(moto_server: MotoEndpoint, tmp_path: Path) -> Assembly:
    s3: Any = moto_server.client("s3")
    bucket = moto_server.new_bucket()
    data = local_document(
        tmp_path,
        moto_server,
        bucket=bucket,
        namespace=NS,
        mappings=[
            {
                "topic": TOPIC,
                "table": TABLE,
                "mode": "upsert",
                "upsert": {"key": ["id"]},
                "schema": {"columns": [{"name": "id", "type": "long", "required": True}]},
            }
        ],
    )
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(data))
    assembly = Assembly(load_config_from(str(path)), owner_id="replay-test")
    for base in (0, 10):
        put_segment(s3, bucket, NS, TOPIC, 0, base, 10)
    store = assembly.checkpoints
    grant = store.claim_lease(TOPIC, owner_id="test", run_id="committed")
    assert isinstance(grant, LeaseGrant)
    store.commit_offsets(grant, {0: OffsetUpdate(offset=19, last_timestamp_ms=0)})
    store.release_lease(grant)
    return assembly


def test_a_rewind_of_an_upsert_table_is_refused_naming_what_to_do(assembly: Assembly) -> None:
    request = ReplayRequest(topic=TOPIC, from_offset=10, reset_offsets=True)
    with pytest.raises(OffsetResetRefusedError) as refused:
        assembly.replay.replay(request)
    message = str(refused.value)
    assert f"{TABLE!r} is an upsert table (mode: upsert)" in message
    assert "after offsets {0: 9}" in message
    assert "--from-offset 0 rebuilds their keys" in message
    assert "nothing was written" in message
    assert assembly.checkpoints.load_committed_offsets(TOPIC).state(0).offset == 19  # type: ignore[union-attr]


def test_a_rebuild_of_an_upsert_table_from_the_start_is_accepted(assembly: Assembly) -> None:
    plan = assembly.replay.plan(ReplayRequest(topic=TOPIC, from_offset=0, reset_offsets=True))
    assert plan.reset_offsets == {0: -1}


def test_a_rebuild_of_an_upsert_partition_whose_start_expired_is_refused_with_a_way_out(
    assembly: Assembly, moto_server: MotoEndpoint
) -> None:
    """The S3 check's usual advice (a later --from-offset) would only meet the upsert refusal: the
    message says no reset can rebuild the partition, and what can."""
    s3: Any = moto_server.client("s3")
    bucket = assembly.segments.bucket
    for suffix in ("kfs", "index"):  # offsets 0-9 expired by retention
        s3.delete_object(Bucket=bucket, Key=f"{NS}/{TOPIC}/0/segment-{0:020d}.{suffix}")
    with pytest.raises(OffsetResetRefusedError) as refused:
        assembly.replay.replay(ReplayRequest(topic=TOPIC, from_offset=0, reset_offsets=True))
    message = str(refused.value)
    assert "offsets 0-9 are not in S3" in message
    assert "--from-offset 10" not in message
    assert "no reset can rebuild it from S3: roll the table back to its snapshot before the range" in message
