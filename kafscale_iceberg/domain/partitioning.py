"""The rules of a table's partition fields: which column types each transform takes, the fields'
names, their config spelling, and whether a spec keeps each key in one partition.

One place for the config (checked at load, naming the YAML key), the Spark job (checked against the
plan's columns) and the commit step (the table's spec). The values themselves are computed by the
data plane (`dataplane/partitioning.py`) exactly as Iceberg's spec defines them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from kafscale_iceberg.domain.runs import ColumnType, PartitionField, PartitionTransform

_DATE_OR_TIMESTAMP = frozenset({ColumnType.DATE, ColumnType.TIMESTAMP})

SOURCE_TYPES: Mapping[PartitionTransform, frozenset[ColumnType]] = MappingProxyType(
    {
        PartitionTransform.IDENTITY: frozenset(
            {
                ColumnType.BOOLEAN,
                ColumnType.INT,
                ColumnType.LONG,
                ColumnType.FLOAT,
                ColumnType.DOUBLE,
                ColumnType.STRING,
                ColumnType.TIMESTAMP,
                ColumnType.DATE,
            }
        ),
        PartitionTransform.YEAR: _DATE_OR_TIMESTAMP,
        PartitionTransform.MONTH: _DATE_OR_TIMESTAMP,
        PartitionTransform.DAY: _DATE_OR_TIMESTAMP,
        PartitionTransform.HOUR: frozenset({ColumnType.TIMESTAMP}),
        # Iceberg's spec: bucket hashes int, long, decimal, date, time, timestamp(tz), string, uuid,
        # binary/fixed; truncate cuts int, long, decimal, string and binary (never float or boolean).
        PartitionTransform.BUCKET: frozenset(
            {
                ColumnType.INT,
                ColumnType.LONG,
                ColumnType.DECIMAL,
                ColumnType.DATE,
                ColumnType.TIMESTAMP,
                ColumnType.TIMESTAMPTZ,
                ColumnType.STRING,
                ColumnType.UUID,
                ColumnType.BINARY,
            }
        ),
        PartitionTransform.TRUNCATE: frozenset(
            {ColumnType.INT, ColumnType.LONG, ColumnType.DECIMAL, ColumnType.STRING, ColumnType.BINARY}
        ),
    }
)
"""The column types each transform is written for (one value per file per partition field)."""

# Iceberg's default partition field names (its Java `PartitionSpec.Builder`): `col` for identity,
# `col_year` .. `col_hour`, `col_bucket`, `col_trunc`.
_NAME_SUFFIX: Mapping[PartitionTransform, str] = MappingProxyType(
    {
        PartitionTransform.YEAR: "_year",
        PartitionTransform.MONTH: "_month",
        PartitionTransform.DAY: "_day",
        PartitionTransform.HOUR: "_hour",
        PartitionTransform.BUCKET: "_bucket",
        PartitionTransform.TRUNCATE: "_trunc",
    }
)


def partition_field_name(field: PartitionField) -> str:
    """The partition field's name as Iceberg's Java API names it: `col`, `col_day`, `col_bucket`,
    `col_trunc`."""
    return field.column + _NAME_SUFFIX.get(field.transform, "")


def describe_partition_field(field: PartitionField) -> str:
    """The config spelling of a partition field: `day(ordered_at)`, `bucket(16, id)`, `truncate(4, name)`."""
    if field.parameter is None:
        return f"{field.transform.value}({field.column})"
    return f"{field.transform.value}({field.parameter}, {field.column})"


def source_type_problem(field: PartitionField, column_type: ColumnType) -> str | None:
    """Why `field` cannot be written on a column of `column_type`, or None when it can."""
    allowed = SOURCE_TYPES[field.transform]
    if column_type in allowed:
        return None
    return (
        f"{describe_partition_field(field)} needs a {_or_list(allowed)} column, but {field.column!r} is "
        f"{column_type.value}"
    )


def partitioned_by_keys(partition_by: Sequence[PartitionField], key_columns: Iterable[str]) -> bool:
    """Whether every partition field is derived from one of `key_columns`, so all rows of a key share
    one partition (an upsert locates a key's rows within it). An unpartitioned table is: it has one."""
    keys = set(key_columns)
    return all(field.column in keys for field in partition_by)


def _or_list(types: Iterable[ColumnType]) -> str:
    names = sorted(t.value for t in types)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
