"""A table partitioned by `bucket(N, col)` and `truncate(W, col)` on the AWS path (`make test-aws`):
created in Glue by the commit function, fed by EMR jobs (local Spark), compacted by the maintenance
function's EMR job and reset by the replay function; every AWS call checked against its role.

The box and its fakes are described in tests/support/aws_box.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

from tests.support.aws_box import Box, local_emr_runner, open_box
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment
from tests.test_aws_flow import TABLE, TOPIC, _assert_iam

pytestmark = [pytest.mark.slow, pytest.mark.aws]

OFFSET_BUCKET = BucketTransform(4).transform(LongType())


@pytest.fixture
def spark_runner(spark: Any, moto_server: MotoEndpoint) -> Iterator[Any]:
    runner = local_emr_runner(moto_server.url)
    yield runner
    runner.close()


@pytest.fixture
def box(
    moto_server: MotoEndpoint,
    etcd_server: EtcdServer,
    spark_runner: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Box]:
    with open_box(
        moto_url=moto_server.url,
        etcd=etcd_server,
        spark_runner=spark_runner,
        tmp_path=tmp_path,
        monkeypatch=monkeypatch,
        mappings=[
            {
                "topic": TOPIC,
                "table": TABLE,
                "create_table_if_missing": True,
                "partition_by": ["bucket(4, offset)", "truncate(3, topic)"],
            }
        ],
        maintenance={"compaction_min_small_files": 2, "orphan_grace": "1h", "compaction_wait_seconds": 120},
    ) as box:
        yield box


def _pairs(box: Box) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in box.rows(TABLE))


def _assert_each_offset_is_found_in_its_bucket_alone(box: Box, expected: list[tuple[int, int]]) -> None:
    """A scan filtered on `offset` plans only that offset's bucket and still finds every row of it: a
    row in a file of the wrong bucket would be pruned away and missing."""
    table = box.catalog().load_table(TABLE)
    for offset in sorted({o for _p, o in expected}):
        scan = table.scan(row_filter=EqualTo("offset", offset))
        assert {t.file.partition[0] for t in scan.plan_files()} == {OFFSET_BUCKET(offset)}
        found = sorted(r["partition"] for r in scan.to_arrow().to_pylist())
        assert found == sorted(p for p, o in expected if o == offset), offset


def test_a_bucket_table_lands_compacts_and_resets_on_the_aws_path_with_every_call_allowed(box: Box) -> None:
    for run in range(3):
        put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 0, run * 4, 4)
        put_segment(box.s3, box.segment_bucket, box.namespace, TOPIC, 1, run * 3, 3)
        box.pump()
    expected = sorted([(0, o) for o in range(12)] + [(1, o) for o in range(9)])
    assert _pairs(box) == expected, box.describe()
    table = box.catalog().load_table(TABLE)
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("offset_bucket", "bucket[4]"),
        ("topic_trunc", "truncate[3]"),
    ]
    assert {f.partition[1] for f in box.data_files(TABLE)} == {"ord"}
    _assert_each_offset_is_found_in_its_bucket_alone(box, expected)

    report = box.fleet.invoke("MaintenanceFunction", {})  # the rewrite runs as an EMR job

    (done,) = [t for t in report["tables"] if t["table"] == TABLE]
    assert done["compaction"]["committed"], report
    assert any("/compaction-" in f.file_path for f in box.data_files(TABLE))
    assert _pairs(box) == expected
    _assert_each_offset_is_found_in_its_bucket_alone(box, expected)

    box.fleet.invoke(
        "ReplayFunction",
        {"topic": TOPIC, "partitions": [0], "from_offset": 6, "reset_offsets": True, "confirm": TOPIC},
    )
    assert _pairs(box) == [pair for pair in expected if pair[0] == 1 or pair[1] < 6]
    box.pump()  # the reset range is read again and lands once more
    assert _pairs(box) == expected
    assert box.committed_offsets(TOPIC) == {0: 11, 1: 8}
    _assert_each_offset_is_found_in_its_bucket_alone(box, expected)
    _assert_iam(box)
