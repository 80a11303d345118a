"""bucket[N] and truncate[W] partition values, as the data plane computes them, against Iceberg's spec.

Two independent references: the spec's own test vectors (Appendix B, "32-bit Hash Requirements",
and the truncate examples of "Partition Transforms"), and pyiceberg's pure-Python transforms
(`BucketTransform(n).transform(type)`, mmh3 over the spec's byte form), compared on random values.
The data plane computes them with iceberg-rust's Arrow kernels, so these tests are what holds the
two implementations together.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.transforms import BucketTransform, TruncateTransform
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from kafscale_iceberg.dataplane.partitioning import split_by_partition, transform_values
from kafscale_iceberg.domain.partitioning import partitioned_by_keys
from kafscale_iceberg.domain.runs import PartitionField, PartitionTransform

INT_MAX = 2**31 - 1
EPOCH = dt.datetime(1970, 1, 1)


def bucket(n: int) -> PartitionField:
    return PartitionField(column="c", transform=PartitionTransform.BUCKET, parameter=n)


def truncate(w: int) -> PartitionField:
    return PartitionField(column="c", transform=PartitionTransform.TRUNCATE, parameter=w)


def micros(moment: dt.datetime) -> int:
    return (moment.replace(tzinfo=None) - EPOCH) // dt.timedelta(microseconds=1)


# (arrow values, arrow type, the spec's hash) from Appendix B. With N = Integer.MAX_VALUE the bucket
# is the positive hash itself (`hash & MAX_VALUE`, below N but for one value no vector hits).
SPEC_HASHES = [
    ([34], pa.int32(), 2017239379),
    ([34], pa.int64(), 2017239379),
    ([Decimal("14.20")], pa.decimal128(9, 2), -500754589),
    ([dt.date(2017, 11, 16)], pa.date32(), -653330422),
    ([dt.datetime(2017, 11, 16, 22, 31, 8)], pa.timestamp("us"), -2047944441),
    ([dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=dt.UTC)], pa.timestamp("us", "UTC"), -2047944441),
    (["iceberg"], pa.string(), 1210000089),
    ([uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7").bytes], pa.uuid(), 1488055340),
    ([b"\x00\x01\x02\x03"], pa.binary(), -188683207),
]


@pytest.mark.parametrize(("values", "arrow_type", "spec_hash"), SPEC_HASHES, ids=str)
def test_bucket_is_the_positive_murmur3_hash_of_the_specs_byte_form(
    values: list[Any], arrow_type: pa.DataType, spec_hash: int
) -> None:
    column = pa.array([*values, None], arrow_type)
    assert transform_values(column, bucket(INT_MAX)).to_pylist() == [spec_hash & INT_MAX, None]


@pytest.mark.parametrize(
    ("values", "arrow_type", "width", "expected"),
    [
        ([1, -1, 10, -10, 0], pa.int32(), 10, [0, -10, 10, -10, 0]),
        ([1, -1, 10, -10, 0], pa.int64(), 10, [0, -10, 10, -10, 0]),
        ([Decimal("10.65"), Decimal("-0.05")], pa.decimal128(9, 2), 50, [Decimal("10.50"), Decimal("-0.50")]),
        (["iceberg", "ab", ""], pa.string(), 3, ["ice", "ab", ""]),
        (["héllo", "🎉🎉🎉"], pa.string(), 2, ["hé", "🎉🎉"]),
        ([b"\x01\x02\x03", b"\x01"], pa.binary(), 2, [b"\x01\x02", b"\x01"]),
    ],
)
def test_truncate_floors_numbers_and_cuts_strings_by_code_points_and_binaries_by_bytes(
    values: list[Any], arrow_type: pa.DataType, width: int, expected: list[Any]
) -> None:
    column = pa.array([*values, None], arrow_type)
    assert transform_values(column, truncate(width)).to_pylist() == [*expected, None]


LONGS = st.integers(-(2**63) + 1000, 2**63 - 1)
# (strategy of Python values, arrow type, pyiceberg type, value as pyiceberg's transform takes it)
CASES: dict[str, tuple[st.SearchStrategy[Any], pa.DataType, IcebergType, Callable[[Any], Any]]] = {
    "int": (st.integers(-(2**31) + 1000, 2**31 - 1), pa.int32(), IntegerType(), lambda v: v),
    "long": (LONGS, pa.int64(), LongType(), lambda v: v),
    "decimal": (
        st.decimals(
            min_value=-(10**7) + 1, max_value=10**7 - 1, places=2, allow_nan=False, allow_infinity=False
        ),
        pa.decimal128(9, 2),
        DecimalType(9, 2),
        lambda v: v,
    ),
    "date": (
        st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1)),
        pa.date32(),
        DateType(),
        lambda v: (v - EPOCH.date()).days,
    ),
    "timestamp": (
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)),
        pa.timestamp("us"),
        TimestampType(),
        micros,
    ),
    "timestamptz": (
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)),
        pa.timestamp("us", "UTC"),
        TimestamptzType(),
        micros,
    ),
    "string": (st.text(max_size=40), pa.string(), StringType(), lambda v: v),
    "uuid": (st.uuids(), pa.uuid(), UUIDType(), lambda v: v),
    "binary": (st.binary(max_size=40), pa.binary(), BinaryType(), lambda v: v),
}
TRUNCATED = ("int", "long", "decimal", "string", "binary")


def _arrow_values(case: str, values: list[Any]) -> pa.Array:
    arrow_type = CASES[case][1]
    return pa.array([v.bytes if isinstance(v, uuid.UUID) else v for v in values], arrow_type)


@pytest.mark.parametrize("case", list(CASES))
@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.sampled_from([1, 2, 3, 16, 1000, INT_MAX]))
def test_bucket_values_equal_pyicebergs_for_every_type(case: str, data: st.DataObject, n: int) -> None:
    strategy, _arrow_type, iceberg_type, as_iceberg = CASES[case]
    values = data.draw(st.lists(strategy, min_size=1, max_size=20))
    reference = BucketTransform(n).transform(iceberg_type)
    expected = [reference(as_iceberg(v)) for v in values]
    assert transform_values(_arrow_values(case, values), bucket(n)).to_pylist() == expected


@pytest.mark.parametrize("case", TRUNCATED)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), width=st.sampled_from([1, 2, 3, 10, 100, 1000]))
def test_truncate_values_equal_pyicebergs_for_every_type(case: str, data: st.DataObject, width: int) -> None:
    strategy, _arrow_type, iceberg_type, as_iceberg = CASES[case]
    values = data.draw(st.lists(strategy, min_size=1, max_size=20))
    reference = TruncateTransform(width).transform(iceberg_type)
    expected = [reference(as_iceberg(v)) for v in values]
    assert transform_values(_arrow_values(case, values), truncate(width)).to_pylist() == expected


def test_rows_split_by_bucket_keep_each_key_in_one_group_and_values_stay_json() -> None:
    table = pa.table(
        {
            "id": pa.array([5, 17, 5, 33, 17], pa.int64()),
            "amount": pa.array([Decimal("1.25"), Decimal("7.99"), None, Decimal("7.50"), Decimal("-0.01")]),
            "n": [0, 1, 2, 3, 4],
        }
    )
    fields = (
        PartitionField(column="id", transform=PartitionTransform.BUCKET, parameter=4),
        PartitionField(column="amount", transform=PartitionTransform.TRUNCATE, parameter=100),
    )
    groups = split_by_partition(table, fields)
    id_bucket = BucketTransform(4).transform(LongType())
    for values, rows in groups:
        assert {id_bucket(i) for i in rows.column("id").to_pylist()} == {values["id_bucket"]}
        assert values["amount_trunc"] is None or isinstance(values["amount_trunc"], str)
    by_rows = {tuple(rows.column("n").to_pylist()): values for values, rows in groups}
    assert by_rows[(1,)]["amount_trunc"] == "7.00"
    assert by_rows[(4,)]["amount_trunc"] == "-1.00"


def test_binary_truncate_values_are_carried_as_base64() -> None:
    table = pa.table({"c": pa.array([b"\xff\x00\x01"], pa.binary())})
    [(values, _rows)] = split_by_partition(table, (truncate(2),))
    assert values == {"c_trunc": "/wA="}


def test_a_spec_is_partitioned_by_keys_when_every_field_comes_from_a_key_column() -> None:
    by_id = PartitionField(column="id", transform=PartitionTransform.BUCKET, parameter=16)
    by_day = PartitionField(column="at", transform=PartitionTransform.DAY)
    assert partitioned_by_keys((by_id,), ["tenant", "id"])
    assert partitioned_by_keys((), ["id"])
    assert not partitioned_by_keys((by_id, by_day), ["id"])
    assert not partitioned_by_keys((by_day,), ["id"])


@pytest.mark.slow
def test_the_data_plane_computes_bucket_values_without_loading_pyiceberg() -> None:
    code = (
        "import sys, pyarrow as pa, spark_app.job\n"
        "from kafscale_iceberg.dataplane.partitioning import transform_values\n"
        "from kafscale_iceberg.domain.runs import PartitionField\n"
        "field = PartitionField(column='c', transform='bucket', parameter=16)\n"
        "assert transform_values(pa.array([34], pa.int64()), field).to_pylist() == [3]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyiceberg'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
