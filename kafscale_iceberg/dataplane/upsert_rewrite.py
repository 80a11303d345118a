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
from kafscale_iceberg.dataplane.upsert_keys import KeyChanges
from kafscale_iceberg.dataplane.upsert_positions import LocatedRows
from kafscale_iceberg.domain.runs import DataFile, PartitionValue
from kafscale_iceberg.ports import FileSink, ObjectReader


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
    located: LocatedRows | None = None,
) -> FileRewrite:
    """`source` written again under `folder` without the rows `changes` replace (a table file: rows of
    a changed key, at the positions `located` found - and the rows the table's delete files deleted,
    which must not come back; `own`, a file of the run: rows a later change superseded). Only the key
    columns are decoded unless a row must go. `partition_values`: what the new file carries (the
    source's values of partition fields its bounds cannot give, e.g. a bucket's). Idempotent: the new
    file's name derives from `source`."""
    if located is not None and not own:
        if not located.replaced.size:
            return FileRewrite(source=source, written=None, dropped=0, deleted=0)
        data = reader.read_bytes(source)
        drop = np.zeros(located.rows, bool)
        drop[located.replaced] = True
        drop[located.deleted_before[located.deleted_before < located.rows]] = True
        dropped, deletes = int(located.replaced.size), int(located.deleted.size)
    else:
        data = reader.read_bytes(source)
        columns = [*changes.key, "partition", "offset"] if own else list(changes.key)
        probe = pq.read_table(io.BytesIO(data), columns=columns)
        if own:
            drop, deleted = changes.superseded(probe), np.zeros(probe.num_rows, bool)
        else:
            drop, deleted = changes.replaced(probe)
        dropped, deletes = int(np.count_nonzero(drop)), int(np.count_nonzero(deleted))
        if not dropped:
            return FileRewrite(source=source, written=None, dropped=0, deleted=0)
    rows = pq.read_table(io.BytesIO(data)).filter(pa.array(~drop))
    if not rows.num_rows:
        return FileRewrite(source=source, written=None, dropped=dropped, deleted=deletes)
    name = f"{'run' if own else 'table'}-{hashlib.sha256(source.encode()).hexdigest()[:24]}.parquet"
    written = _write_rows(sink, join_uri(folder, name), rows, partition_values)
    return FileRewrite(source=source, written=written, dropped=dropped, deleted=deletes)


def _write_rows(
    sink: FileSink, uri: str, rows: pa.Table, partition_values: Mapping[str, PartitionValue] | None
) -> DataFile:
    staging = sink.staging_path(uri)
    pq.write_table(rows, staging, compression="zstd", compression_level=1, write_statistics=True)
    size = os.path.getsize(staging)
    # Its metrics from the footer just written (local), so the commit step reads no data file.
    stats = file_stats(pq.read_metadata(staging), rows.schema)
    sink.publish(staging, uri)
    return DataFile(
        uri=uri,
        record_count=rows.num_rows,
        size_bytes=size,
        partition_values=dict(partition_values or {}),
        stats=stats,
    )
