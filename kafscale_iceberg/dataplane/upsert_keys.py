"""An upsert run's changes reduced to the last one per key (`KeyChanges`), and which rows of a file
they replace: what the locate, rewrite and delete steps share. Pure pyarrow."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

_POSITION = "__kafscale_position"
_DELETED = "__kafscale_deleted"
_WIN_PARTITION = "__kafscale_win_partition"
_WIN_OFFSET = "__kafscale_win_offset"


class KeyChanges:
    """A run's changes reduced to the last one per key (by offset within a Kafka partition; across
    partitions the higher partition's), from its new rows and its deleted keys (each a table of the
    key columns, `partition` and `offset`)."""

    def __init__(self, key: Sequence[str], rows: pa.Table, deletes: pa.Table) -> None:
        self.key = tuple(key)
        columns = [*self.key, "partition", "offset"]
        # The key columns' types: the rows' when the run has some (files without rows carry none).
        schema = (rows if rows.num_rows or not deletes.num_rows else deletes).select(columns).schema
        parts = [
            table.select(columns)
            .cast(schema)
            .append_column(_DELETED, pa.array(np.full(table.num_rows, flag)))
            for table, flag in ((rows, False), (deletes, True))
            if table.num_rows or table is rows
        ]
        changes = pa.concat_tables([p for p in parts if p.num_rows] or parts[:1])
        ordered = changes.sort_by([(c, "ascending") for c in columns])
        ordered = ordered.append_column(_POSITION, pa.array(np.arange(ordered.num_rows, dtype=np.int64)))
        last = ordered.group_by(list(self.key), use_threads=False).aggregate([(_POSITION, "max")])
        winners = ordered.take(last.column(f"{_POSITION}_max")).sort_by([(c, "ascending") for c in self.key])
        self.winners = winners.select([*self.key, "partition", "offset", _DELETED]).rename_columns(
            [*self.key, _WIN_PARTITION, _WIN_OFFSET, _DELETED]
        )

    @classmethod
    def from_winners(cls, key: Sequence[str], winners: pa.Table) -> KeyChanges:
        """The changes as `winners` (a table `write_winners` wrote) holds them: resolved already."""
        changes = cls.__new__(cls)
        changes.key = tuple(key)
        changes.winners = winners
        return changes

    @property
    def count(self) -> int:
        """How many keys the run changed."""
        return int(self.winners.num_rows)

    @property
    def deleted(self) -> int:
        """How many keys the run ends with deleted."""
        return int(np.count_nonzero(self.winners.column(_DELETED).to_numpy(zero_copy_only=False)))

    def key_values(self, column: str) -> pa.Array:
        """The changed keys' values of a key column, sorted, each once (what the locate step prunes by)."""
        values = self.winners.column(column).unique()
        return values.take(pa.compute.sort_indices(values))

    def replaced(self, rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """For `rows` of the table (key columns at least): which hold a changed key (to drop), and of
        those which the run deletes rather than updates."""
        matched, _partition, _offset, deleted = self._match(rows)
        return matched, matched & deleted

    def superseded(self, rows: pa.Table) -> np.ndarray:
        """For the run's own new `rows` (key columns, `partition`, `offset`): which a later change of
        their key replaced (not their key's winning row, or the key ends deleted)."""
        matched, partition, offset, deleted = self._match(rows)
        written_at = rows.column("partition").to_numpy(), rows.column("offset").to_numpy()
        same = (partition == written_at[0]) & (offset == written_at[1])
        superseded: np.ndarray = matched & (deleted | ~same)
        return superseded

    def _match(self, rows: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        keys = rows.select(list(self.key))
        keys = keys.cast(self.winners.select(list(self.key)).schema)
        keys = keys.append_column(_POSITION, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        joined = keys.join(self.winners, keys=list(self.key), join_type="inner", use_threads=False)
        count = rows.num_rows
        matched = np.zeros(count, bool)
        partition = np.full(count, -1, np.int64)
        offset = np.full(count, -1, np.int64)
        deleted = np.zeros(count, bool)
        at = joined.column(_POSITION).to_numpy()
        matched[at] = True
        partition[at] = joined.column(_WIN_PARTITION).to_numpy()
        offset[at] = joined.column(_WIN_OFFSET).to_numpy()
        deleted[at] = joined.column(_DELETED).to_numpy(zero_copy_only=False)
        return matched, partition, offset, deleted
