"""`domain/backlog.py`: pending bytes against one run, the arrival rate, and the operator's line."""

from __future__ import annotations

import pytest

from kafscale_iceberg.domain.backlog import backlog

MB = 1_000_000


@pytest.mark.parametrize(
    ("pending", "run_bytes", "behind", "arriving", "says"),
    [
        ([], 100 * MB, False, None, "keeping up: 0.0 MB pending"),
        (
            [(40 * MB, 0), (40 * MB, 30_000)],
            100 * MB,
            False,
            80.0,
            "keeping up: 80.0 MB pending, arriving 80",
        ),
        (
            [(3_000 * MB, 0), (3_000 * MB, 20_000), (3_000 * MB, 50_000)],
            7_000 * MB,
            True,
            9_000.0,
            "falling behind: 9,000 MB pending, more than one run takes (7,000 MB), arriving 9,000 MB/min; "
            "raise runs.max_bytes_per_run or EmrMaximumCpu",
        ),
    ],
)
def test_a_topic_is_behind_when_more_is_pending_than_one_run_takes(
    pending: list[tuple[int, int]], run_bytes: int, behind: bool, arriving: float | None, says: str
) -> None:
    found = backlog(pending, run_bytes, now_ms=60_000)  # the oldest pending segment: a minute ago
    assert found.falling_behind is behind
    assert found.arriving_bytes_per_min == (None if arriving is None else pytest.approx(arriving * MB))
    assert found.message().startswith(says)
    assert found.to_json()["falling_behind"] is behind
