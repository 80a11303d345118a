"""Issue 35: per mapping column, the records that carried it, and the hint naming the nearest fields
(`domain/column_fill.py`). End to end (real files, real statistics): tests/test_documented_example.py."""

from __future__ import annotations

import pytest

from kafscale_iceberg.domain.column_fill import (
    column_fill,
    describe_unfilled,
    nearest_fields,
    refuse_unfilled,
)
from kafscale_iceberg.domain.runs import (
    ColumnStats,
    DataFile,
    FileStats,
    RunCounts,
    RunResult,
    RunStatus,
    RunTimings,
)
from kafscale_iceberg.exceptions import UnfilledColumnError
from tests.support.plans import sample_plan

COLUMNS = [
    {"name": "order_id", "type": "long"},
    {"name": "store", "type": "string"},
    {"name": "at", "type": "timestamp"},
]


def _result(nulls: dict[str, int], rows: int, failures: dict[str, int]) -> RunResult:
    stats = FileStats(
        columns=tuple(
            ColumnStats(
                name=name,
                type="string",
                required=False,
                physical_type="BYTE_ARRAY",
                size_bytes=1,
                value_count=rows,
                null_count=count,
            )
            for name, count in nulls.items()
        )
    )
    plan = sample_plan()
    return RunResult(
        run_id=plan.run_id,
        topic=plan.topic,
        status=RunStatus.SUCCEEDED,
        data_files=(DataFile(uri="s3://w/f.parquet", record_count=rows, size_bytes=1, stats=stats),),
        counts=RunCounts(written=rows, conversion_failures=failures),
        timings=RunTimings(started_at_ms=1, ended_at_ms=2),
    )


def test_a_value_present_but_not_converted_counts_as_carried() -> None:
    plan = sample_plan(conversion={"columns": COLUMNS})
    fill = column_fill(plan, _result({"order_id": 0, "store": 10, "at": 10}, 10, {"at": 3}))
    assert fill is not None
    assert dict(fill.carried) == {"order_id": 10, "store": 0, "at": 3}
    assert fill.unfilled == ("store",)
    assert fill.describe() == "order_id 10, store 0, at 3 of 10"


def test_a_file_without_statistics_gives_no_fill() -> None:
    plan = sample_plan(conversion={"columns": COLUMNS})
    result = _result({"store": 10}, 10, {})
    bare = result.model_copy(
        update={"data_files": (result.data_files[0].model_copy(update={"stats": None}),)}
    )
    assert column_fill(plan, bare) is None


def test_the_hint_names_the_nearest_fields_or_lists_what_the_records_carry() -> None:
    fields = ["order_id", "store_id", "customer", "event_time", "ordered_on"]
    assert nearest_fields("store", fields) == ("store_id",)
    assert describe_unfilled("store", 2400, fields) == (
        "`store`: absent in 2,400 of 2,400 records; they carry `store_id`"
    )
    assert describe_unfilled("zzz", 5, ["a", "b"]) == (
        "`zzz`: absent in 5 of 5 records; they carry none like it (`a`, `b`)"
    )
    assert describe_unfilled("store", 5, None) == "`store`: absent in 5 of 5 records"


def test_only_strict_schema_mode_refuses() -> None:
    result = _result({"order_id": 0, "store": 10, "at": 0}, 10, {})
    lenient = sample_plan(conversion={"columns": COLUMNS})
    refuse_unfilled(lenient, column_fill(lenient, result), ["store_id"], table="prod.orders")
    strict = sample_plan(conversion={"columns": COLUMNS, "schema_mode": "strict", "json_schema": {}})
    with pytest.raises(UnfilledColumnError) as raised:
        refuse_unfilled(strict, column_fill(strict, result), ["store_id"], table="prod.orders")
    assert raised.value.columns == ("store",)
    assert "they carry `store_id`" in str(raised.value)
    assert "prod.orders" in str(raised.value)
    assert "rename the mapping's column" in str(raised.value)
