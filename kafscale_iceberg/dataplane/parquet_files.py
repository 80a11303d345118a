"""Parquet data files for one table from one task: file series per partition value, rolled by size.

Names are deterministic, derived from the inputs only, so a retried run (or a retried Spark task)
rewrites the same names instead of adding files:

    {data_uri}/part-{partition-values hash}[-p{kafka partition}]-{task:05d}-{sequence:04d}.parquet

Rows of one Kafka partition (in offset order, as the task reads them) get files of their own once
they reach `partition_file_min_bytes` in the task, so a reset of a range of that partition touches
few files; smaller shares are written together in the shared series (no `-p` in the name), which
compaction later makes partition-pure. Rows are buffered per series and written as row groups of
about `row_group_bytes` (uncompressed Arrow bytes); a file is closed once it reaches
`target_file_size_bytes`. The files carry the schema's field ids when it has them
(`PARQUET:field_id`), microsecond timestamps and the schema's nullability, so `add_files` accepts
them as they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.dataplane.file_stats import file_stats
from kafscale_iceberg.dataplane.partitioning import PartitionKey
from kafscale_iceberg.dataplane.schemas import statistics_columns
from kafscale_iceberg.dataplane.storage import join_uri
from kafscale_iceberg.domain.runs import DataFile
from kafscale_iceberg.ports import FileSink

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
    name: str
    kafka_partition: int | None = None
    pending: list[pa.Table] = field(default_factory=list)
    pending_bytes: int = 0
    seen_bytes: int = 0
    sequence: int = 0
    current: _OpenFile | None = None

    @property
    def opened(self) -> bool:
        return self.sequence > 0


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
        partition_file_min_bytes: int = 0,
        delta_columns: frozenset[str] = frozenset(),
    ) -> None:
        self._sink = sink
        # Integer columns written DELTA_BINARY_PACKED (an upsert table's key: a run locating its keys
        # reads that column of the table's files, and sequential or sorted keys cost bytes per file,
        # not per row, so).
        self._delta = {
            name: "DELTA_BINARY_PACKED"
            for name in delta_columns
            if name in schema.names and pa.types.is_integer(schema.field(name).type)
        }
        self._data_uri = data_uri
        self._schema = schema
        self._statistics = statistics_columns(self._schema)  # none for uuids: `unbounded_columns`
        self._task = task_index
        self._target = target_file_size_bytes
        self._row_group_bytes = max(1, min(row_group_bytes, target_file_size_bytes))
        self._max_buffered = max_buffered_bytes
        self._partition_min = partition_file_min_bytes
        self._buffered = 0
        self._series: dict[str, _Series] = {}
        self._ratio = _INITIAL_RATIO
        self._files: list[DataFile] = []

    def write(self, values: PartitionKey, table: pa.Table, kafka_partition: int | None = None) -> None:
        """Buffer `table` (rows of one partition value, in this writer's schema) for writing.

        With `kafka_partition`, the rows are one Kafka partition's, in offset order after the rows
        written for it before: they go to that partition's own files once it has enough of them.
        """
        if table.num_rows == 0:
            return
        hashed = partition_hash(values)
        name = hashed if kafka_partition is None else f"{hashed}-p{kafka_partition}"
        series = self._series.get(name)
        if series is None:
            series = self._series[name] = _Series(values, name, kafka_partition)
        series.pending.append(table)
        series.pending_bytes += table.nbytes
        series.seen_bytes += table.nbytes
        self._buffered += table.nbytes
        if series.pending_bytes >= self._row_group_bytes and self._own_files(series):
            self._flush(series)
        while self._buffered > self._max_buffered:
            largest = max(self._series.values(), key=lambda s: s.pending_bytes)
            self._flush(largest)

    def close(self) -> list[DataFile]:
        """Write what is buffered, close and publish every open file; returns all files written.

        A Kafka partition with less than `partition_file_min_bytes` here (and no file yet) joins
        the shared series of its partition value, after the partitions before it.
        """
        shared: dict[str, _Series] = {}
        for series in sorted(self._series.values(), key=_series_order):
            if series.kafka_partition is None or self._own_files(series) or series.opened:
                continue
            hashed = partition_hash(series.values)
            target = self._series.get(hashed) or shared.get(hashed)
            if target is None:
                target = shared[hashed] = _Series(series.values, hashed)
            target.pending.extend(series.pending)
            target.pending_bytes += series.pending_bytes
            series.pending, series.pending_bytes = [], 0
        self._series.update(shared)
        for series in sorted(self._series.values(), key=_series_order):
            self._flush(series)
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

    def _own_files(self, series: _Series) -> bool:
        return series.kafka_partition is None or series.seen_bytes >= self._partition_min

    def _flush(self, series: _Series) -> None:
        if not series.pending:
            return
        table = pa.concat_tables(series.pending)
        series.pending.clear()
        self._buffered -= series.pending_bytes
        series.pending_bytes = 0
        while table.num_rows:
            current = series.current or self._open(series)
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

    def _open(self, series: _Series) -> _OpenFile:
        name = f"part-{series.name}-{self._task:05d}-{series.sequence:04d}.parquet"
        series.sequence += 1
        uri = join_uri(self._data_uri, name)
        staging = self._sink.staging_path(uri)
        writer = pq.ParquetWriter(
            staging,
            self._schema,
            compression=COMPRESSION,
            compression_level=COMPRESSION_LEVEL,
            use_dictionary=[
                name for name in self._schema.names if name not in UNIQUE_COLUMNS and name not in self._delta
            ],
            column_encoding=self._delta or None,
            store_schema=False,
            write_statistics=self._statistics,
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
        # The footer pyarrow just wrote, still in memory: the commit step needs no footer read.
        stats = file_stats(current.writer.writer.metadata, self._schema)
        self._sink.publish(current.staging, current.uri)
        self._files.append(
            DataFile(
                uri=current.uri,
                record_count=current.rows,
                size_bytes=size,
                partition_values=dict(series.values),
                stats=stats,
            )
        )


def _series_order(series: _Series) -> tuple[str, int]:
    return (partition_hash(series.values), -1 if series.kafka_partition is None else series.kafka_partition)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
