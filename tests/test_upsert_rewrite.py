"""Which change of a key wins in a run (`KeyChanges`), and which rows it replaces: pure pyarrow."""

from __future__ import annotations

import pyarrow as pa

from kafscale_iceberg.dataplane.upsert_keys import KeyChanges

STRING = pa.string()


def changes(rows: list[tuple[object, int, int]], key_type: pa.DataType = STRING) -> pa.Table:
    """`(key, partition, offset)` rows of a key column `id`."""
    keys, partitions, offsets = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table(
        {
            "id": pa.array(list(keys), key_type),
            "partition": pa.array(list(partitions), pa.int32()),
            "offset": pa.array(list(offsets), pa.int64()),
        }
    )


def test_the_last_change_of_a_key_by_offset_in_its_partition_wins() -> None:
    run = KeyChanges(("id",), changes([("a", 0, 1), ("a", 0, 5), ("b", 0, 2)]), changes([("a", 0, 3)]))
    assert run.winners.to_pylist() == [
        {"id": "a", "__kafscale_win_partition": 0, "__kafscale_win_offset": 5, "__kafscale_deleted": False},
        {"id": "b", "__kafscale_win_partition": 0, "__kafscale_win_offset": 2, "__kafscale_deleted": False},
    ]
    own = changes([("a", 0, 1), ("a", 0, 5), ("b", 0, 2)])
    assert run.superseded(own).tolist() == [True, False, False]


def test_a_key_met_in_two_partitions_is_decided_by_the_higher_partition() -> None:
    run = KeyChanges(("id",), changes([("a", 1, 1), ("a", 0, 9)]), changes([]))
    assert run.superseded(changes([("a", 1, 1), ("a", 0, 9)])).tolist() == [False, True]


def test_a_run_of_deletes_only_keeps_its_key_type() -> None:
    run = KeyChanges(("id",), changes([], pa.int64()), changes([("x", 0, 1), ("y", 0, 2)]))
    assert (run.count, run.deleted) == (2, 2)
    table_rows = changes([("x", 3, 0), ("z", 3, 1)])
    assert [mask.tolist() for mask in run.replaced(table_rows)] == [[True, False], [True, False]]


def test_an_empty_run_changes_no_key() -> None:
    run = KeyChanges(("id",), changes([], pa.int64()), changes([], pa.int64()))
    assert run.count == 0
    assert run.replaced(changes([(1, 0, 0)], pa.int64()))[0].tolist() == [False]
