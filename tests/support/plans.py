"""A small, valid run plan for tests that need one but don't care about its ranges."""

from __future__ import annotations

from typing import Any

from kafscale_iceberg.domain.runs import RunPlan, make_run_id


def sample_plan_fields(**overrides: Any) -> dict[str, Any]:
    """The JSON fields of a one-partition plan for topic `orders`, offsets (-1, 9]."""
    fields: dict[str, Any] = {
        "run_id": make_run_id("orders", [(0, -1, 9)]),
        "topic": "orders",
        "created_at_ms": 1,
        "source": {"bucket": "segments"},
        "partitions": [
            {
                "partition": 0,
                "start_exclusive": -1,
                "end_inclusive": 9,
                "segments": [
                    {
                        "key": "ns/orders/0/segment-00000000000000000000.kfs",
                        "base_offset": 0,
                        "last_offset": 9,
                        "size_bytes": 100,
                    }
                ],
            }
        ],
        "table": {"identifier": "prod.orders", "data_uri": "s3://warehouse/prod/orders/data/r1"},
        "dead_letter_table": {"identifier": "prod.orders__dlq", "data_uri": "s3://warehouse/dlq/r1"},
        "conversion": {},
        "result_uri": "s3://runs/orders/r1/result.json",
    }
    fields.update(overrides)
    return fields


def sample_plan(**overrides: Any) -> RunPlan:
    """A valid one-partition plan (see `sample_plan_fields`)."""
    return RunPlan.model_validate(sample_plan_fields(**overrides))
