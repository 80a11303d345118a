"""The rewrite step of an upsert run (see `domain/upsert.py`): which change of each key wins, which rows
of a file it replaces, and the file written again without them. Pure pyarrow; storage is the
`ObjectReader` and `FileSink` ports: the run's driver resolves the winners once and writes them
(`write_winners`), each rewrite task reads them (`read_winners`) and rewrites its files.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.dataplane.file_stats import file_stats
from kafscale_iceberg.dataplane.storage import join_uri
from kafscale_iceberg.domain.runs import DataFile, PartitionValue
from kafscale_iceberg.ports import FileSink, ObjectReader

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


@dataclass(frozen=True)
class FileRewrite:
    """One file written again without some of its rows: `written` None when nothing was dropped (kept
    as it is) or every row was (the file goes)."""

    source: str
    written: DataFile | None
    dropped: int
    deleted: int
    """Of `dropped`, the rows of keys the run deletes (the rest are updated)."""


def write_winners(sink: FileSink, uri: str, changes: KeyChanges) -> None:
    """Write the resolved changes to `uri` (Parquet), for the rewrite tasks. Idempotent."""
    staging = sink.staging_path(uri)
    pq.write_table(changes.winners, staging, compression="zstd", compression_level=1)
    sink.publish(staging, uri)


def read_winners(reader: ObjectReader, uri: str, key: Sequence[str]) -> KeyChanges:
    """The resolved changes `write_winners` wrote to `uri`."""
    return KeyChanges.from_winners(key, pq.read_table(io.BytesIO(reader.read_bytes(uri))))


def read_change_columns(reader: ObjectReader, files: Sequence[DataFile], key: Sequence[str]) -> pa.Table:
    """The key columns, `partition` and `offset` of the run's `files` (its rows or deleted keys)."""
    columns = [*key, "partition", "offset"]
    tables = [pq.read_table(io.BytesIO(reader.read_bytes(f.uri)), columns=columns) for f in files]
    if not tables:
        return pa.table({c: pa.array([], pa.int64()) for c in columns})
    return pa.concat_tables(tables, promote_options="permissive")


def rewrite_without(
    reader: ObjectReader,
    sink: FileSink,
    source: str,
    changes: KeyChanges,
    *,
    folder: str,
    own: bool,
    partition_values: Mapping[str, PartitionValue] | None = None,
) -> FileRewrite:
    """`source` written again under `folder` without the rows `changes` replace (a table file: rows of
    a changed key; `own`, a file of the run: rows a later change superseded). Only the key columns
    are decoded unless a row must go. `partition_values`: what the new file carries (the source's
    values of partition fields its bounds cannot give, e.g. a bucket's). Idempotent: the new file's
    name derives from `source`."""
    data = reader.read_bytes(source)
    columns = [*changes.key, "partition", "offset"] if own else list(changes.key)
    probe = pq.read_table(io.BytesIO(data), columns=columns)
    if own:
        drop, deleted = changes.superseded(probe), np.zeros(probe.num_rows, bool)
    else:
        drop, deleted = changes.replaced(probe)
    dropped = int(np.count_nonzero(drop))
    if not dropped:
        return FileRewrite(source=source, written=None, dropped=0, deleted=0)
    rows = pq.read_table(io.BytesIO(data)).filter(pa.array(~drop))
    deletes = int(np.count_nonzero(deleted))
    if not rows.num_rows:
        return FileRewrite(source=source, written=None, dropped=dropped, deleted=deletes)
    name = f"{'run' if own else 'table'}-{hashlib.sha256(source.encode()).hexdigest()[:24]}.parquet"
    uri = join_uri(folder, name)
    staging = sink.staging_path(uri)
    pq.write_table(rows, staging, compression="zstd", compression_level=1, write_statistics=True)
    size = os.path.getsize(staging)
    # Its metrics from the footer just written (local), so the commit step reads no data file.
    stats = file_stats(pq.read_metadata(staging), rows.schema)
    sink.publish(staging, uri)
    return FileRewrite(
        source=source,
        written=DataFile(
            uri=uri,
            record_count=rows.num_rows,
            size_bytes=size,
            partition_values=dict(partition_values or {}),
            stats=stats,
        ),
        dropped=dropped,
        deleted=deletes,
    )
