"""Iceberg partition values of rows, and rows split so each data file holds one value per field.

pyiceberg's `add_files` derives a file's partition from its column statistics and refuses a file
whose rows span more than one value of a partition field, so rows are grouped by their partition
values before writing. Transform results are Iceberg's own (spec, "Partition Transforms"):

- `identity(col)`: the value; a `date` is its day number, a `timestamp` its epoch microseconds;
- `year` / `month` / `day`: years, months, days since 1970-01-01 (negative before), of a `date`
  or of a `timestamp`'s UTC date;
- `hour`: hours since 1970-01-01T00:00 of a `timestamp`.

A null source value is the null partition value. Partition field names follow Iceberg's defaults:
the column name for identity, `{column}_{transform}` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.domain.runs import ColumnType, PartitionField, PartitionTransform, PartitionValue
from kafscale_iceberg.domain.schema import FieldSpec
from kafscale_iceberg.exceptions import PartitioningError

_TIME_SOURCES: dict[PartitionTransform, frozenset[ColumnType]] = {
    PartitionTransform.YEAR: frozenset({ColumnType.DATE, ColumnType.TIMESTAMP}),
    PartitionTransform.MONTH: frozenset({ColumnType.DATE, ColumnType.TIMESTAMP}),
    PartitionTransform.DAY: frozenset({ColumnType.DATE, ColumnType.TIMESTAMP}),
    PartitionTransform.HOUR: frozenset({ColumnType.TIMESTAMP}),
}
_MICROS_PER_DAY = 86_400_000_000
_MICROS_PER_HOUR = 3_600_000_000

PartitionKey = dict[str, PartitionValue]


def partition_field_name(field: PartitionField) -> str:
    """Iceberg's default name of the partition field: `col` for identity, else `col_{transform}`."""
    if field.transform is PartitionTransform.IDENTITY:
        return field.column
    return f"{field.column}_{field.transform.value}"


UNPARTITIONED_TYPES = frozenset(
    {
        ColumnType.BINARY,
        ColumnType.TIMESTAMPTZ,
        ColumnType.UUID,
        ColumnType.DECIMAL,
        ColumnType.STRUCT,
        ColumnType.LIST,
        ColumnType.MAP,
    }
)
"""Column types no partition field is written for (one value per file is not computed for them)."""


def check_partitioning(fields: Sequence[FieldSpec], partition_by: Sequence[PartitionField]) -> None:
    """Raise `PartitioningError` unless every partition field is writable as one value per file."""
    types = {f.name: f.type for f in fields}
    names: set[str] = set()
    for field in partition_by:
        source = types.get(field.column)
        if source is None:
            raise PartitioningError(f"partition field {field.transform}({field.column}): no such column")
        if field.transform is PartitionTransform.IDENTITY:
            if source in UNPARTITIONED_TYPES:
                raise PartitioningError(
                    f"identity({field.column}): {source.value} columns are not partitioned"
                )
        elif source not in _TIME_SOURCES[field.transform]:
            raise PartitioningError(
                f"{field.transform}({field.column}): a {source.value} column has no {field.transform} "
                f"transform (allowed on {', '.join(sorted(t.value for t in _TIME_SOURCES[field.transform]))})"
            )
        name = partition_field_name(field)
        if name in names:
            raise PartitioningError(f"partition field {name!r} is listed twice")
        names.add(name)


def transform_values(column: pa.Array, transform: PartitionTransform) -> pa.Array:
    """The partition values of `column` (a date32, timestamp[us] or plain column) under `transform`."""
    column_type = column.type
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
    keys = [transform_values(_combined(table.column(f.column)), f.transform) for f in partition_by]
    if all(k.null_count == 0 for k in keys) and all(
        pc.min_max(k)["min"] == pc.min_max(k)["max"] for k in keys
    ):
        return [({n: k[0].as_py() for n, k in zip(names, keys, strict=True)}, table)]
    key_table = pa.table({**{f"k{i}": k for i, k in enumerate(keys)}, "row": np.arange(table.num_rows)})
    groups = key_table.group_by([f"k{i}" for i in range(len(keys))], use_threads=False).aggregate(
        [("row", "list")]
    )
    result: list[tuple[PartitionKey, pa.Table]] = []
    key_columns = [groups.column(f"k{i}").to_pylist() for i in range(len(keys))]
    row_lists = groups.column("row_list")
    for g in range(groups.num_rows):
        key = {name: key_columns[i][g] for i, name in enumerate(names)}
        rows = np.sort(row_lists[g].values.to_numpy())
        result.append((key, table.take(pa.array(rows))))
    result.sort(key=lambda item: tuple((v is not None, v) for v in item[0].values()))
    return result


def _combined(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
