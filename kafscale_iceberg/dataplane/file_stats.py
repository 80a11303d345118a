"""A data file's Iceberg metrics from the footer the writer has just produced, in memory (no re-read).

What pyiceberg's `add_files` computes by opening every file's footer again, the task computes from
the `FileMetaData` pyarrow hands back when it closes the file: per column the compressed size,
value and null counts, and min/max over the row groups, with the same rules (a row group without
statistics drops the column's null count and bounds; a value pyarrow kept no min/max for has
none). Columns are keyed by name; the commit step maps them to the table's field ids and applies
the table's metrics modes, so either field-id scheme of the written files works.

pyarrow only: this runs in the Spark executors, which have no pyiceberg.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.domain.runs import ColumnStats, ColumnType, FileStats

CARRIED_PREFIX = 64
"""Characters (strings) or bytes (binaries) of a bound carried in the result; longer ones are cut."""

_COLUMN_TYPES: Mapping[pa.DataType, ColumnType] = {
    pa.bool_(): ColumnType.BOOLEAN,
    pa.int32(): ColumnType.INT,
    pa.int64(): ColumnType.LONG,
    pa.float32(): ColumnType.FLOAT,
    pa.float64(): ColumnType.DOUBLE,
    pa.string(): ColumnType.STRING,
    pa.large_string(): ColumnType.STRING,
    pa.binary(): ColumnType.BINARY,
    pa.large_binary(): ColumnType.BINARY,
    pa.timestamp("us"): ColumnType.TIMESTAMP,
    pa.timestamp("us", "UTC"): ColumnType.TIMESTAMPTZ,
    pa.date32(): ColumnType.DATE,
    pa.time64("us"): ColumnType.TIME,
    pa.uuid(): ColumnType.UUID,
}
_PACK = {
    ColumnType.INT: "<i",
    ColumnType.DATE: "<i",
    ColumnType.LONG: "<q",
    ColumnType.TIMESTAMP: "<q",
    ColumnType.TIMESTAMPTZ: "<q",
    ColumnType.TIME: "<q",
    ColumnType.FLOAT: "<f",
    ColumnType.DOUBLE: "<d",
}


def file_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> FileStats | None:
    """The metrics of a closed Parquet file from its in-memory footer; `schema` is what was written.

    None when a column is nested or a decimal (no carried metrics here): the commit step then reads
    that file's footer, as for results without statistics. A uuid column carries sizes and counts,
    never bounds (`schemas.unbounded_columns`: its files have no uuid statistics to take them from).
    """
    if any(_COLUMN_TYPES.get(f.type) is None for f in schema):
        return None
    split_offsets: list[int] = []
    columns = []
    for r in range(metadata.num_row_groups):
        first = metadata.row_group(r).column(0)
        if first.has_dictionary_page and first.dictionary_page_offset < first.data_page_offset:
            split_offsets.append(first.dictionary_page_offset)
        else:
            split_offsets.append(first.data_page_offset)
    for position in range(metadata.num_columns):
        name = metadata.schema.column(position).path
        field = schema.field(name)
        column_type = _COLUMN_TYPES[field.type]
        columns.append(_column_stats(metadata, position, name, column_type, required=not field.nullable))
    return FileStats(split_offsets=tuple(sorted(split_offsets)), columns=tuple(columns))


def _column_stats(
    metadata: pq.FileMetaData, position: int, name: str, column_type: ColumnType, *, required: bool
) -> ColumnStats:
    size = values = 0
    nulls: int | None = None
    has_stats = metadata.num_row_groups > 0
    low: object = None
    high: object = None
    physical = metadata.schema.column(position).physical_type
    for r in range(metadata.num_row_groups):
        chunk = metadata.row_group(r).column(position)
        size += chunk.total_compressed_size
        values += chunk.num_values
        if not chunk.is_stats_set:
            has_stats = False
            continue
        statistics = chunk.statistics
        if statistics.has_null_count:
            nulls = (nulls or 0) + statistics.null_count
        if statistics.has_min_max:
            low = statistics.min_raw if low is None else min(low, statistics.min_raw)
            high = statistics.max_raw if high is None else max(high, statistics.max_raw)
    if not has_stats:
        nulls = low = high = None
    if column_type is ColumnType.UUID:
        low = high = None  # whatever wrote the statistics: no uuid bound, see `schemas.unbounded_columns`
    lower, lower_cut = _encode(column_type, low)
    upper, upper_cut = _encode(column_type, high)
    return ColumnStats(
        name=name,
        type=column_type,
        required=required,
        physical_type=physical,
        size_bytes=size,
        value_count=values,
        null_count=nulls,
        has_stats=has_stats,
        lower=lower,
        upper=upper,
        lower_cut=lower_cut,
        upper_cut=upper_cut,
    )


def _encode(column_type: ColumnType, raw: object) -> tuple[str | None, bool]:
    """Iceberg single-value bytes of a raw Parquet statistic, base64; and whether it was cut."""
    if raw is None:
        return None, False
    cut = False
    if column_type is ColumnType.BOOLEAN:
        data = b"\x01" if raw else b"\x00"
    elif column_type is ColumnType.STRING:
        assert isinstance(raw, bytes)
        text = raw.decode("utf-8")
        cut = len(text) > CARRIED_PREFIX
        data = text[:CARRIED_PREFIX].encode("utf-8")
    elif column_type is ColumnType.BINARY:
        assert isinstance(raw, bytes)
        cut = len(raw) > CARRIED_PREFIX
        data = raw[:CARRIED_PREFIX]
    else:
        data = struct.pack(_PACK[column_type], raw)
    return base64.b64encode(data).decode("ascii"), cut
