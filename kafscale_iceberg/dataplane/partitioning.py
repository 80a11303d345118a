"""Iceberg partition values of rows, and rows split so each data file holds one value per field.

Each data file holds one value per partition field (the commit step gives the table each file's
partition, and a reset or compaction keeps files of one partition), so rows are grouped by their
partition values before writing. Transform results are Iceberg's own (spec, "Partition Transforms"):

- `identity(col)`: the value; a `date` is its day number, a `timestamp` its epoch microseconds;
- `year` / `month` / `day`: years, months, days since 1970-01-01 (negative before), of a `date`
  or of a `timestamp`'s UTC date;
- `hour`: hours since 1970-01-01T00:00 of a `timestamp`;
- `bucket[N]`: `(murmur3_x86_32(bytes) & Integer.MAX_VALUE) % N` of the spec's byte form of the
  value (int and date as a long, 8 bytes little-endian; a timestamp's microseconds; a decimal's
  unscaled two's complement, big-endian, minimal; a string's UTF-8; a uuid's 16 bytes; binary as is);
- `truncate[W]`: ints and longs `v - (v mod W)` (floor, so -1 -> -W), a decimal's unscaled value
  likewise (scale kept), a string's first W code points (not bytes), a binary's first W bytes.

bucket and truncate run in iceberg-rust's Arrow kernels (`pyiceberg_core.transform`, the same
kernels pyiceberg writes with): the one import of the data plane that is not pyarrow, numpy or the
codec's, allowed here only (a compute library without I/O; no pyiceberg, see docs/architecture.md).

A null source value is the null partition value. Partition field names follow Iceberg's defaults
(`domain/partitioning.py`). In a `DataFile`'s `partition_values` a truncated decimal is its text
(`"12.20"`) and a truncated binary the base64 of its bytes, so results stay JSON.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg_core import transform as iceberg_kernels

from kafscale_iceberg.domain.partitioning import (
    describe_partition_field,
    partition_field_name,
    source_type_problem,
)
from kafscale_iceberg.domain.runs import PartitionField, PartitionTransform, PartitionValue
from kafscale_iceberg.domain.schema import FieldSpec
from kafscale_iceberg.exceptions import PartitioningError

_MICROS_PER_DAY = 86_400_000_000
_MICROS_PER_HOUR = 3_600_000_000

PartitionKey = dict[str, PartitionValue]


def check_partitioning(fields: Sequence[FieldSpec], partition_by: Sequence[PartitionField]) -> None:
    """Raise `PartitioningError` unless every partition field is writable as one value per file."""
    types = {f.name: f.type for f in fields}
    names: set[str] = set()
    for field in partition_by:
        source = types.get(field.column)
        if source is None:
            raise PartitioningError(f"partition field {describe_partition_field(field)}: no such column")
        problem = source_type_problem(field, source)
        if problem is not None:
            raise PartitioningError(problem)
        name = partition_field_name(field)
        if name in names:
            raise PartitioningError(f"partition field {name!r} is listed twice")
        names.add(name)


def transform_values(column: pa.Array, field: PartitionField) -> pa.Array:
    """The partition values of `column` (as the data plane writes its type) under `field`'s transform."""
    transform = field.transform
    column_type = column.type
    if transform is PartitionTransform.BUCKET:
        return iceberg_kernels.bucket(column, field.parameter)
    if transform is PartitionTransform.TRUNCATE:
        return iceberg_kernels.truncate(column, field.parameter)
    if transform is PartitionTransform.IDENTITY:
        if pa.types.is_date32(column_type):
            return column.cast(pa.int32())
        if pa.types.is_timestamp(column_type):
            return column.cast(pa.int64())
        return column
    if transform is PartitionTransform.YEAR:
        return pc.subtract(pc.year(column), 1970).cast(pa.int32())
    if transform is PartitionTransform.MONTH:
        years = pc.subtract(pc.year(column), 1970)
        return pc.add(pc.multiply(years, 12), pc.subtract(pc.month(column), 1)).cast(pa.int32())
    if pa.types.is_date32(column_type):
        return column.cast(pa.int32())  # day of a date: its day number
    divisor = _MICROS_PER_DAY if transform is PartitionTransform.DAY else _MICROS_PER_HOUR
    micros = column.cast(pa.int64())
    floored = np.floor_divide(micros.fill_null(0).to_numpy(), divisor).astype(np.int32)
    return pa.array(floored, pa.int32(), mask=np.asarray(micros.is_null().to_numpy(zero_copy_only=False)))


def partition_value(value: object) -> PartitionValue:
    """A partition value as a run result carries it (JSON): decimals as text, bytes as base64."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    assert value is None or isinstance(value, str | int | float | bool), value
    return value


def split_by_partition(
    table: pa.Table, partition_by: Sequence[PartitionField]
) -> list[tuple[PartitionKey, pa.Table]]:
    """`table`'s rows grouped by their partition values, groups in value order (nulls first).

    Rows keep their order inside a group. An unpartitioned table is one group with no values.
    """
    if not partition_by:
        return [({}, table)] if table.num_rows else []
    if table.num_rows == 0:
        return []
    names = [partition_field_name(f) for f in partition_by]
    keys = [transform_values(_combined(table.column(f.column)), f) for f in partition_by]
    if all(k.null_count == 0 for k in keys) and all(
        pc.min_max(k)["min"] == pc.min_max(k)["max"] for k in keys
    ):
        return [({n: partition_value(k[0].as_py()) for n, k in zip(names, keys, strict=True)}, table)]
    key_table = pa.table({**{f"k{i}": k for i, k in enumerate(keys)}, "row": np.arange(table.num_rows)})
    groups = key_table.group_by([f"k{i}" for i in range(len(keys))], use_threads=False).aggregate(
        [("row", "list")]
    )
    result: list[tuple[PartitionKey, pa.Table]] = []
    key_columns = [[partition_value(v) for v in groups.column(f"k{i}").to_pylist()] for i in range(len(keys))]
    row_lists = groups.column("row_list")
    for g in range(groups.num_rows):
        key = {name: key_columns[i][g] for i, name in enumerate(names)}
        rows = np.sort(row_lists[g].values.to_numpy())
        result.append((key, table.take(pa.array(rows))))
    result.sort(key=lambda item: tuple((v is not None, v) for v in item[0].values()))
    return result


def _combined(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
