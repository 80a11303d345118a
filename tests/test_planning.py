"""Planning a run: which pending segments, within which limits, and when to wait."""

from __future__ import annotations

from kafscale_iceberg.domain.planning import (
    ListedSegment,
    RunLimits,
    eligible_segments,
    needs_fallback_listing,
    select_segments,
)

NOW = 1_000_000


def seg(partition: int, base: int, size: int = 100, *, index: bool = True, age_s: float = 0) -> ListedSegment:
    return ListedSegment(
        partition=partition,
        base_offset=base,
        key=f"ns/t/{partition}/segment-{base:020d}.kfs",
        size_bytes=size,
        has_index=index,
        last_modified_ms=NOW - int(age_s * 1000),
    )


LIMITS = RunLimits(max_bytes=10_000, max_segments=100)


def test_segments_after_the_committed_offset_are_eligible_in_order() -> None:
    chosen, blocked = eligible_segments(9, [seg(0, 20), seg(0, 10)])
    assert [s.base_offset for s in chosen] == [10, 20]
    assert blocked is None


def test_a_segment_without_its_index_stops_the_partition() -> None:
    chosen, blocked = eligible_segments(-1, [seg(0, 0), seg(0, 10, index=False), seg(0, 20)])
    assert [s.base_offset for s in chosen] == [0]
    assert blocked is not None
    assert blocked.base_offset == 10


def test_a_segment_holding_the_next_offset_is_kept_when_committed_is_mid_segment() -> None:
    # committed 14 sits inside the segment based at 10: it must be read again from offset 15.
    chosen, _ = eligible_segments(14, [seg(0, 0), seg(0, 10), seg(0, 20)])
    assert [s.base_offset for s in chosen] == [10, 20]


def test_fully_committed_segments_are_not_read() -> None:
    chosen, _ = eligible_segments(19, [seg(0, 0), seg(0, 10), seg(0, 20)])
    assert [s.base_offset for s in chosen] == [20]


def test_fallback_listing_only_when_the_next_segment_is_not_where_expected() -> None:
    assert not needs_fallback_listing(-1, [])
    assert not needs_fallback_listing(9, [seg(0, 10)])
    assert needs_fallback_listing(14, [seg(0, 20)])
    assert needs_fallback_listing(9, [])


def test_limits_are_shared_round_robin_across_partitions() -> None:
    eligible = {0: [seg(0, b) for b in range(0, 50, 10)], 1: [seg(1, b) for b in range(0, 50, 10)]}
    selection = select_segments({}, eligible, RunLimits(max_bytes=10_000, max_segments=4), now_ms=NOW)
    assert {p.partition: [s.base_offset for s in p.segments] for p in selection.partitions} == {
        0: [0, 10],
        1: [0, 10],
    }
    assert selection.pending_bytes == 1000


def test_byte_limit_stops_a_partition_without_skipping_within_it() -> None:
    eligible = {0: [seg(0, 0, 400), seg(0, 10, 400), seg(0, 20, 100)]}
    selection = select_segments({0: -1}, eligible, RunLimits(max_bytes=500, max_segments=100), now_ms=NOW)
    assert [s.base_offset for s in selection.partitions[0].segments] == [0]


def test_a_run_always_takes_at_least_one_segment() -> None:
    selection = select_segments(
        {}, {0: [seg(0, 0, 5_000)]}, RunLimits(max_bytes=10, max_segments=1), now_ms=NOW
    )
    assert [s.base_offset for s in selection.partitions[0].segments] == [0]


def test_small_backlog_waits_for_the_minimum_batch_until_max_wait() -> None:
    limits = RunLimits(max_bytes=10_000, max_segments=100, min_bytes=1_000, max_wait_seconds=60)
    young = select_segments({}, {0: [seg(0, 0, 100, age_s=20)]}, limits, now_ms=NOW)
    assert young.is_empty
    assert young.wait_seconds == 40
    old = select_segments({}, {0: [seg(0, 0, 100, age_s=61)]}, limits, now_ms=NOW)
    assert not old.is_empty
    big = select_segments({}, {0: [seg(0, 0, 1_000, age_s=0)]}, limits, now_ms=NOW)
    assert not big.is_empty


def test_interior_last_offsets_come_from_the_next_base() -> None:
    selection = select_segments({0: 4}, {0: [seg(0, 5), seg(0, 10), seg(0, 30)]}, LIMITS, now_ms=NOW)
    (partition,) = selection.partitions
    assert partition.committed == 4
    assert partition.last_offsets(end_inclusive=41) == [9, 29, 41]


def test_nothing_pending_is_empty() -> None:
    assert select_segments({0: 5}, {0: []}, LIMITS, now_ms=NOW).is_empty


def test_a_topics_own_batching_overrides_the_runs_defaults_and_the_most_eager_mapping_decides() -> None:
    """`mappings[].max_wait_seconds` / `.min_bytes_per_run`: a small topic waits as Firehose buffers
    (300 s) while the others keep `runs.*`; of a topic's mappings the smallest wait and bytes win."""
    from kafscale_iceberg.config import config_from_mapping
    from kafscale_iceberg.services.pending import run_limits
    from tests.test_config import minimal

    base = minimal()
    config = config_from_mapping(
        {
            **base,
            "runs": {**base["runs"], "max_wait_seconds": 60, "min_bytes_per_run": "256MiB"},
            "mappings": [
                {"topic": "orders", "table": "shop.orders"},
                {
                    "topic": "audit",
                    "table": "shop.audit",
                    "max_wait_seconds": 300,
                    "min_bytes_per_run": "5MB",
                },
                {"topic": "audit", "table": "shop.audit_copy", "max_wait_seconds": 600},
            ],
        },
        source="test",
    )
    orders = run_limits(config.runs, mappings=config.mappings_for("orders"))
    audit = run_limits(config.runs, mappings=config.mappings_for("audit"))
    assert (orders.max_wait_seconds, orders.min_bytes) == (60, 256 * 1024**2)
    assert (audit.max_wait_seconds, audit.min_bytes) == (300, 5_000_000)
    assert (
        run_limits(config.runs, ignore_min_batch=True, mappings=config.mappings_for("audit")).min_bytes == 0
    )
    # The limits the launcher plans with: a 200 s old segment waits for audit, not for orders.
    pending = {0: [seg(0, 0, 1_000, age_s=200)]}
    assert select_segments({}, pending, audit, now_ms=NOW).wait_seconds == 100
    assert not select_segments({}, pending, orders, now_ms=NOW).is_empty
