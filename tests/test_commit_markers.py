"""The commit markers and rules: `kafscale.*` keys, run standing, reconciliation (pure, no catalog)."""

from __future__ import annotations

import pytest

from kafscale_iceberg.domain.commits import (
    QuarantinedRange,
    Standing,
    TableCommit,
    TableMarker,
    advance_offsets,
    decode_offsets,
    decode_quarantine,
    encode_offsets,
    encode_quarantine,
    marker_properties,
    read_marker,
    reconcile,
    stand_dead_letters,
    stand_run,
)
from kafscale_iceberg.exceptions import TableMarkerError

RANGE = QuarantinedRange(
    partition=2, first_offset=10, last_offset=19, segment_key="ns/t/2/s.kfs", run_id="r1"
)


def test_offsets_are_compact_json_in_partition_order() -> None:
    assert encode_offsets({10: 5, 2: 7, 0: -1}) == '{"0":-1,"2":7,"10":5}'
    assert decode_offsets('{"0":-1,"2":7,"10":5}', table="t", key="k") == {0: -1, 2: 7, 10: 5}


@pytest.mark.parametrize("text", ["[1]", '{"a":1}', '{"0":"1"}', '{"0":true}', '{"0":-2}', "{"])
def test_a_malformed_offsets_property_names_the_table_and_key(text: str) -> None:
    with pytest.raises(TableMarkerError, match=r"'lake.t' property 'kafscale.offsets.orders'"):
        decode_offsets(text, table="lake.t", key="kafscale.offsets.orders")


def test_quarantined_ranges_round_trip_sorted() -> None:
    other = QuarantinedRange(0, 5, 6, "k0", "r0")

    assert decode_quarantine(encode_quarantine([RANGE, other]), table="t", key="k") == (other, RANGE)


def test_a_malformed_quarantine_entry_is_refused() -> None:
    with pytest.raises(TableMarkerError, match="not a quarantined range"):
        decode_quarantine('[{"partition":0}]', table="t", key="k")


def test_a_marker_is_read_back_from_the_properties_it_writes() -> None:
    marker = TableMarker(offsets={0: 9, 3: 4}, run_id="r1", quarantined=(RANGE,))
    updates, removals = marker_properties("orders", marker)

    assert set(updates) == {"kafscale.offsets.orders", "kafscale.run-id.orders", "kafscale.quarantine.orders"}
    assert removals == ()
    assert read_marker({**updates, "other": "x"}, "orders", table="t") == marker


def test_a_marker_without_quarantined_ranges_removes_the_property() -> None:
    _, removals = marker_properties("orders", TableMarker(offsets={0: 1}))

    assert removals == ("kafscale.quarantine.orders",)


def test_a_table_that_never_recorded_the_topic_has_no_offsets() -> None:
    marker = read_marker({"kafscale.offsets.other": '{"0":1}'}, "orders", table="t")

    assert marker.offsets is None
    assert marker.offset(0) == -1


def test_the_summary_names_run_topic_and_exact_ranges() -> None:
    commit = TableCommit(
        topic="orders",
        run_id="r1",
        file_uris=(),
        start_offsets={0: -1, 1: 4},
        end_offsets={0: 9, 1: 8},
        marker_after=TableMarker(offsets={0: 9, 1: 8}),
        quarantined=(RANGE,),
    )

    assert commit.summary() == {
        "kafscale.run-id": "r1",
        "kafscale.topic": "orders",
        "kafscale.start-offsets": '{"0":-1,"1":4}',
        "kafscale.offsets": '{"0":9,"1":8}',
        "kafscale.quarantined": encode_quarantine([RANGE]),
    }


@pytest.mark.parametrize(
    ("committed", "standing"),
    [
        ({1: 4}, Standing.READY),  # a partition never committed is at -1
        ({0: -1, 1: 4}, Standing.READY),
        ({}, Standing.MISMATCH),
        ({0: 9, 1: 8}, Standing.COMMITTED),
        ({0: 20, 1: 30}, Standing.COMMITTED),
        ({0: 9, 1: 4}, Standing.MISMATCH),
        ({0: 3, 1: 4}, Standing.MISMATCH),
    ],
)
def test_a_run_stands_committed_ready_or_mismatched(committed: dict[int, int], standing: Standing) -> None:
    assert stand_run(committed, {0: -1, 1: 4}, {0: 9, 1: 8}).standing is standing


def test_a_mismatch_names_partition_expected_and_found() -> None:
    verdict = stand_run({0: -1, 1: 6}, {0: -1, 1: 4}, {0: 9, 1: 8})

    assert verdict.mismatches == ((1, 4, 6),)


@pytest.mark.parametrize(
    ("committed", "standing", "inside"),
    [
        ({}, Standing.READY, ()),
        ({0: 2}, Standing.READY, ()),  # lags: earlier runs had no dead letters
        ({0: 9}, Standing.COMMITTED, ()),
        ({0: 7}, Standing.MISMATCH, (0,)),
    ],
)
def test_a_dead_letter_table_may_lag_but_never_hold_part_of_the_run(
    committed: dict[int, int], standing: Standing, inside: tuple[int, ...]
) -> None:
    verdict = stand_dead_letters(committed, {0: 4}, {0: 9})

    assert (verdict.standing, verdict.partitions) == (standing, inside)


def test_offsets_only_advance() -> None:
    assert advance_offsets({0: 30, 5: 2}, {0: 9, 1: 4}) == {0: 30, 1: 4, 5: 2}


def test_the_store_is_adopted_only_when_the_table_never_recorded_the_topic() -> None:
    adopted = reconcile("orders", TableMarker(offsets=None), {0: 41, 7: 3})

    assert adopted.offsets == {0: 41, 7: 3}
    assert not adopted.from_table


def test_the_table_wins_and_store_differences_are_reported_both_ways() -> None:
    reconciliation = reconcile("orders", TableMarker(offsets={0: 10, 1: 5}), {0: 7, 1: 9, 2: 1})

    assert reconciliation.from_table
    assert reconciliation.offsets == {0: 10, 1: 5}
    assert reconciliation.offset(2) == -1
    assert reconciliation.store_behind == {0: (7, 10)}
    assert reconciliation.store_ahead == {1: (9, 5), 2: (1, -1)}


def test_offset_gaps_and_overlaps_round_trip_through_the_summary_leniently() -> None:
    """Issue 12 §6: what the commit writes for `status`; a malformed value is ignored, never fatal."""
    from kafscale_iceberg.domain.anomalies import (
        MAX_RECORDED_GAPS,
        SUMMARY_OFFSET_GAPS,
        SUMMARY_OVERLAPPED,
        OffsetAnomalies,
        PartitionGaps,
    )

    many = PartitionGaps.of((o * 10, o * 10 + 1) for o in range(MAX_RECORDED_GAPS + 5))
    anomalies = OffsetAnomalies(gaps={3: many, 1: PartitionGaps.of([(5, 5)])}, overlapped={1: 4, 2: 0})
    summary = anomalies.summary()
    assert summary[SUMMARY_OVERLAPPED] == '{"1":4}'
    back = OffsetAnomalies.from_summary(summary)
    assert back.gaps[1] == PartitionGaps(missing=1, ranges=((5, 5),))
    assert back.gaps[3].missing == 2 * (MAX_RECORDED_GAPS + 5)  # every offset counted
    assert len(back.gaps[3].ranges) == MAX_RECORDED_GAPS  # the ranges listed up to the cap
    assert back.overlapped == {1: 4}
    assert back.plus(back).gaps[1] == PartitionGaps(missing=2, ranges=((5, 5), (5, 5)))
    assert OffsetAnomalies().summary() == {}
    broken = {
        SUMMARY_OFFSET_GAPS: '{"0": {"missing": -1, "ranges": []}, "x": 1, "2": {"missing": 1, '
        '"ranges": [[4, 3], [1, 1]]}}',
        SUMMARY_OVERLAPPED: "not json",
    }
    assert OffsetAnomalies.from_summary(broken) == OffsetAnomalies(gaps={2: PartitionGaps(1, ((1, 1),))})
