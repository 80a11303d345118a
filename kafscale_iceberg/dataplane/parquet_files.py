"""Parquet data files for one table from one task: one file series per partition value, rolled by size.

Names are deterministic, derived from the inputs only, so a retried run (or a retried Spark task)
rewrites the same names instead of adding files:

    {data_uri}/part-{partition-values hash}-{task:05d}-{sequence:04d}.parquet

Rows are buffered per partition value and written as row groups of about `row_group_bytes`
(uncompressed Arrow bytes); a file is closed once it reaches `target_file_size_bytes`. The files
carry no field ids (pyiceberg maps columns by name), microsecond timestamps, and the schema's
nullability, so `add_files` accepts them as they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.dataplane.partitioning import PartitionKey
from kafscale_iceberg.dataplane.storage import FileSink, join_uri
from kafscale_iceberg.domain.runs import DataFile

DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024
# Rows buffered across all partition values of one writer before the largest buffer is written out
# (many partition values must not each hold a row group's worth of memory).
DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 1
# Columns whose values are (nearly) all distinct: dictionary-encoding them only costs time (about
# half of the write time, measured) before Parquet falls back to plain encoding.
UNIQUE_COLUMNS = frozenset({"record_id", "offset", "timestamp_ms", "value", "headers", "error"})
# How much smaller than its Arrow buffers a row group is on disk, before any has been written: none,
# so a first chunk of incompressible values (LFS blobs: images, archives) cannot overshoot the target.
_INITIAL_RATIO = 1.0


def partition_hash(values: PartitionKey) -> str:
    """8 hex digits identifying a partition-value combination (stable across processes)."""
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


@dataclass
class _OpenFile:
    uri: str
    staging: str
    writer: pq.ParquetWriter
    rows: int = 0


@dataclass
class _Series:
    values: PartitionKey
    pending: list[pa.Table] = field(default_factory=list)
    pending_bytes: int = 0
    sequence: int = 0
    current: _OpenFile | None = None


class RollingParquetWriter:
    """Writes one table's rows for one task. Call `write` any number of times, then `close` once.

    Files are published (moved or uploaded by the `FileSink`) as they are closed; `close` returns
    every file written, in name order. Not thread-safe.
    """

    def __init__(
        self,
        *,
        sink: FileSink,
        data_uri: str,
        schema: pa.Schema,
        task_index: int,
        target_file_size_bytes: int,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
    ) -> None:
        self._sink = sink
        self._data_uri = data_uri
        self._schema = schema
        self._task = task_index
        self._target = target_file_size_bytes
        self._row_group_bytes = max(1, min(row_group_bytes, target_file_size_bytes))
        self._max_buffered = max_buffered_bytes
        self._buffered = 0
        self._series: dict[str, _Series] = {}
        self._ratio = _INITIAL_RATIO
        self._files: list[DataFile] = []

    def write(self, values: PartitionKey, table: pa.Table) -> None:
        """Buffer `table` (rows of one partition value, in this writer's schema) for writing."""
        if table.num_rows == 0:
            return
        key = partition_hash(values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(values)
        series.pending.append(table)
        series.pending_bytes += table.nbytes
        self._buffered += table.nbytes
        if series.pending_bytes >= self._row_group_bytes:
            self._flush(key, series)
        while self._buffered > self._max_buffered:
            largest = max(self._series, key=lambda k: self._series[k].pending_bytes)
            self._flush(largest, self._series[largest])

    def close(self) -> list[DataFile]:
        """Write what is buffered, close and publish every open file; returns all files written."""
        for key, series in self._series.items():
            self._flush(key, series)
            self._finish(series)
        self._series.clear()
        return sorted(self._files, key=lambda f: f.uri)

    def abort(self) -> None:
        """Close open files without publishing them (their staging files are removed)."""
        for series in self._series.values():
            if series.current is not None:
                series.current.writer.close()
                _remove_quietly(series.current.staging)
                series.current = None
        self._series.clear()

    def _flush(self, key: str, series: _Series) -> None:
        if not series.pending:
            return
        table = pa.concat_tables(series.pending)
        series.pending.clear()
        self._buffered -= series.pending_bytes
        series.pending_bytes = 0
        while table.num_rows:
            current = series.current or self._open(key, series)
            written = os.path.getsize(current.staging) if current.rows else 0
            room = max(self._target - written, 1)
            bytes_per_row = max(table.nbytes / table.num_rows, 1.0)
            rows = max(1, min(table.num_rows, int(room / (bytes_per_row * self._ratio))))
            chunk = table.slice(0, rows)
            table = table.slice(rows)
            before = written
            current.writer.write_table(chunk, row_group_size=rows)
            current.rows += rows
            after = os.path.getsize(current.staging)
            if after > before and chunk.nbytes:
                observed = (after - before) / chunk.nbytes
                self._ratio = min(max(observed, 0.01), 4.0)
            if after >= self._target:
                self._finish(series)

    def _open(self, key: str, series: _Series) -> _OpenFile:
        name = f"part-{key}-{self._task:05d}-{series.sequence:04d}.parquet"
        series.sequence += 1
        uri = join_uri(self._data_uri, name)
        staging = self._sink.staging_path(uri)
        writer = pq.ParquetWriter(
            staging,
            self._schema,
            compression=COMPRESSION,
            compression_level=COMPRESSION_LEVEL,
            use_dictionary=[name for name in self._schema.names if name not in UNIQUE_COLUMNS],
            store_schema=False,
            write_statistics=True,
        )
        series.current = _OpenFile(uri=uri, staging=staging, writer=writer)
        return series.current

    def _finish(self, series: _Series) -> None:
        current = series.current
        if current is None:
            return
        series.current = None
        current.writer.close()
        size = os.path.getsize(current.staging)
        self._sink.publish(current.staging, current.uri)
        self._files.append(
            DataFile(
                uri=current.uri,
                record_count=current.rows,
                size_bytes=size,
                partition_values=dict(series.values),
            )
        )


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
