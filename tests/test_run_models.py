"""Run plans and results: the versioned contract between launcher, Spark job and commit step."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kafscale_iceberg.domain.runs import (
    ConversionSettings,
    DataFile,
    FailureKind,
    PlannedSegment,
    RunFailure,
    RunPlan,
    RunResult,
    RunStatus,
    RunTimings,
    SchemaMode,
    SegmentSource,
    make_run_id,
)
from tests.support.plans import sample_plan_fields


def _segment(base: int, last: int) -> PlannedSegment:
    return PlannedSegment(
        key=f"ns/orders/0/segment-{base:020d}.kfs", base_offset=base, last_offset=last, size_bytes=100
    )


def test_plan_round_trips_through_json() -> None:
    plan = RunPlan.model_validate(sample_plan_fields())
    again = RunPlan.model_validate_json(plan.model_dump_json())
    assert again == plan
    assert again.end_offsets() == {0: 9}
    assert again.start_offsets() == {0: -1}
    assert again.total_bytes == 100


def test_plan_of_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValidationError, match="version"):
        RunPlan.model_validate(sample_plan_fields(version=2))


def test_plan_with_unknown_fields_is_refused() -> None:
    with pytest.raises(ValidationError, match="surprise"):
        RunPlan.model_validate(sample_plan_fields(surprise=1))


@pytest.mark.parametrize(
    ("partitions", "problem"),
    [
        ([], "at least one partition"),
        (
            [
                {"partition": 0, "start_exclusive": 5, "end_inclusive": 5, "segments": [_segment(0, 5)]},
            ],
            "empty range",
        ),
        ([{"partition": 0, "start_exclusive": -1, "end_inclusive": 5, "segments": []}], "no segments"),
        (
            [
                {
                    "partition": 0,
                    "start_exclusive": -1,
                    "end_inclusive": 20,
                    "segments": [_segment(10, 20), _segment(0, 9)],
                }
            ],
            "base-offset order",
        ),
        (
            [
                {"partition": 1, "start_exclusive": -1, "end_inclusive": 9, "segments": [_segment(0, 9)]},
                {"partition": 1, "start_exclusive": -1, "end_inclusive": 9, "segments": [_segment(0, 9)]},
            ],
            "each partition once",
        ),
    ],
)
def test_inconsistent_plans_are_refused(partitions: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        RunPlan.model_validate(sample_plan_fields(partitions=partitions))


def test_segment_source_names_exactly_one_location() -> None:
    assert SegmentSource(root="/data").root == "/data"
    with pytest.raises(ValidationError, match="exactly one"):
        SegmentSource(bucket="b", root="/data")
    with pytest.raises(ValidationError, match="exactly one"):
        SegmentSource()


def test_validating_needs_a_json_schema() -> None:
    with pytest.raises(ValidationError, match="json_schema"):
        ConversionSettings(schema_mode=SchemaMode.STRICT)
    assert ConversionSettings(schema_mode=SchemaMode.LENIENT, json_schema={"type": "object"}).json_schema


def test_run_id_is_deterministic_bounded_and_attempt_scoped() -> None:
    ranges = [(1, 10, 20), (0, -1, 5)]
    run_id = make_run_id("orders", ranges)
    assert run_id == make_run_id("orders", list(reversed(ranges)))
    assert run_id != make_run_id("orders", ranges, attempt=1)
    assert run_id != make_run_id("orders", [(1, 10, 21), (0, -1, 5)])
    assert run_id != make_run_id("orders2", ranges)
    long_id = make_run_id("t" * 249, ranges)
    assert len(long_id) <= 64
    assert long_id != make_run_id("t" * 248 + "u", ranges)


def test_run_id_with_invalid_characters_is_refused() -> None:
    with pytest.raises(ValidationError, match="run id"):
        RunPlan.model_validate(sample_plan_fields(run_id="has space"))


def _timings() -> RunTimings:
    return RunTimings(started_at_ms=1, ended_at_ms=2)


def test_failed_result_carries_a_failure_and_no_files() -> None:
    failure = RunFailure(kind=FailureKind.CORRUPT_SEGMENT, message="bad crc", segment_key="k", position=32)
    result = RunResult(run_id="r", topic="t", status=RunStatus.FAILED, failure=failure, timings=_timings())
    assert RunResult.model_validate_json(result.model_dump_json()) == result
    with pytest.raises(ValidationError, match="nothing of a failed run"):
        RunResult(
            run_id="r",
            topic="t",
            status=RunStatus.FAILED,
            failure=failure,
            data_files=(DataFile(uri="file:///x.parquet", record_count=1, size_bytes=10),),
            timings=_timings(),
        )
    with pytest.raises(ValidationError, match="carries a failure"):
        RunResult(run_id="r", topic="t", status=RunStatus.FAILED, timings=_timings())
    with pytest.raises(ValidationError, match="carries a failure"):
        RunResult(run_id="r", topic="t", status=RunStatus.SUCCEEDED, failure=failure, timings=_timings())
