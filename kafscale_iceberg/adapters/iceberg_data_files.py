"""pyiceberg `DataFile`s for a run's files, from the metrics the Spark task carried (no footer read).

`add_files` opens every file's footer to compute its metrics: one GET per file, tens of ms each on
S3. The task already computed them from the footer it wrote (`dataplane.file_stats`), keyed by
column name; here they become the table's metrics exactly as `add_files` would compute them: the
table's field ids (by name, as the name mapping maps the files), its metrics modes
(`write.metadata.metrics.*`) and truncation, the same schema check, and the partition inferred from
the bounds. pyiceberg's own `StatsAggregator` and `DataFileStatistics` do the serialization, so the
rules cannot drift.

A file whose result carries no metrics (a result written before they were carried), or whose
metrics cannot give the table's (a bound cut shorter than the table's truncation needs), is read
from its footer as before.

A file's partition is inferred from its bounds for the fields whose transform keeps order
(identity, the time transforms, truncate), as `add_files` does; a `bucket` field's value cannot be
(its hash scatters the bounds), so it is the value the task computed and carried
(`DataFile.partition_values`), or, for a compacted file, its group's (`given`). pyiceberg's
`add_files` refuses bucket fields for that reason; building the entries here is what lets a bucket
table take files.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.fileformat import DataFileStatistics
from pyiceberg.io.pyarrow import (
    MetricModeTypes,
    StatisticsCollector,
    StatsAggregator,
    _check_pyarrow_schema_compatible,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.utils.concurrent import ExecutorFactory

from kafscale_iceberg.dataplane.file_stats import CARRIED_PREFIX
from kafscale_iceberg.dataplane.schemas import arrow_type
from kafscale_iceberg.domain.runs import ColumnStats, ColumnType, DataFile, FileStats

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1)
_UNPACK = {
    ColumnType.INT: "<i",
    ColumnType.LONG: "<q",
    ColumnType.FLOAT: "<f",
    ColumnType.DOUBLE: "<d",
}


class MetricsNeedFooterError(Exception):
    """The carried metrics cannot give this table's metrics for a file: read its footer instead."""


@dataclass
class TableMetrics:
    """What turning carried metrics into a table's needs, computed once per commit, not per file."""

    metadata: TableMetadata
    schema: Schema = field(init=False)
    plan: dict[int, StatisticsCollector] = field(init=False)
    field_ids: dict[str, int] = field(init=False)
    partition_sources: frozenset[int] = field(init=False)
    _checked: set[tuple[tuple[str, ColumnType, bool], ...]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.schema = self.metadata.schema()
        self.plan = compute_statistics_plan(self.schema, self.metadata.properties)
        self.field_ids = parquet_path_to_id_mapping(self.schema)
        self.partition_sources = frozenset(f.source_id for f in self.metadata.spec().fields)

    def check_schema(self, stats: FileStats) -> None:
        """`add_files`' schema check of the written columns (once per distinct file schema)."""
        columns = tuple((c.name, c.type, c.required) for c in stats.columns)
        if columns in self._checked:
            return
        written = pa.schema([pa.field(n, arrow_type(t), nullable=not r) for n, t, r in columns])
        _check_pyarrow_schema_compatible(self.schema, written, format_version=self.metadata.format_version)
        self._checked.add(columns)


def data_files_to_add(
    metadata: TableMetadata, io: FileIO, uris: Sequence[str], files: Mapping[str, DataFile]
) -> list[IcebergDataFile]:
    """The `DataFile` entries for `uris`, in order: from the carried metrics, else from the footers.

    Footers are read concurrently (pyiceberg's executor), as `add_files` does. Raises ValueError
    when a file does not fit the table (the message names the column), FileNotFoundError/OSError
    when a footer that must be read cannot be.
    """
    if len(uris) != len(set(uris)):
        raise ValueError("File paths must be unique")
    table = TableMetrics(metadata)
    built: dict[str, IcebergDataFile] = {}
    footers: list[str] = []
    for uri in uris:
        carried = files.get(uri)
        if carried is None or carried.stats is None:
            footers.append(uri)
            continue
        try:
            built[uri] = data_file_from_stats(table, carried, carried.stats)
        except MetricsNeedFooterError:
            footers.append(uri)
    if footers:
        executor = ExecutorFactory.get_or_create()
        futures = {
            uri: executor.submit(
                data_file_from_footer, io, metadata, uri, _carried_values(files.get(uri), metadata)
            )
            for uri in footers
        }
        built.update({uri: future.result() for uri, future in futures.items()})
    return [built[uri] for uri in uris]


def data_file_from_footer(
    io: FileIO, metadata: TableMetadata, uri: str, given: Mapping[str, Any] | None = None
) -> IcebergDataFile:
    """The `DataFile` of `uri` from its footer: what `add_files` builds, with the values of the
    table's bucket fields taken from `given` (by partition field name).

    Raises ValueError when the file does not fit the table or a bucket field's value is not given,
    FileNotFoundError/OSError when the footer cannot be read.
    """
    input_file = io.new_input(uri)
    with input_file.open() as stream:
        footer = pq.read_metadata(stream)
    schema = metadata.schema()
    _check_pyarrow_schema_compatible(
        schema, footer.schema.to_arrow_schema(), format_version=metadata.format_version
    )
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return IcebergDataFile.from_args(
        content=DataFileContent.DATA,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=file_partition(metadata, statistics, uri, given or {}),
        file_size_in_bytes=len(input_file),
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


def file_partition(
    metadata: TableMetadata, statistics: DataFileStatistics, uri: str, given: Mapping[str, Any]
) -> Record:
    """The file's partition under the table's spec: order-keeping fields from the bounds (as
    `add_files`: ValueError when they span two values), bucket fields from `given`."""
    spec = metadata.spec()
    schema = metadata.schema()
    ordered = [f for f in spec.fields if f.transform.preserves_order]
    inferred = statistics.partition(PartitionSpec(*ordered), schema)
    from_bounds = {f.field_id: inferred[i] for i, f in enumerate(ordered)}
    values: list[Any] = []
    for spec_field in spec.fields:
        if spec_field.field_id in from_bounds:
            values.append(from_bounds[spec_field.field_id])
        elif spec_field.name in given:
            values.append(given[spec_field.name])
        else:
            raise ValueError(
                f"{uri}: no value for the table's partition field {spec_field.name!r} "
                f"({spec_field.transform}), which cannot be inferred from column bounds: the file was "
                "not written split by it (write it with the table's partition_by)"
            )
    return Record(*values)


def bucket_values(spec: PartitionSpec, data_file: IcebergDataFile) -> dict[str, Any]:
    """`data_file`'s values of the bucket fields of `spec` (its own spec), by partition field name: what
    a file written from some of its rows must be given (`given`), since its bounds cannot give them."""
    return {
        f.name: data_file.partition[i] for i, f in enumerate(spec.fields) if not f.transform.preserves_order
    }


def _carried_values(file: DataFile | None, metadata: TableMetadata) -> dict[str, Any]:
    """The bucket values the task carried for the table's bucket fields (ints; others left out)."""
    if file is None:
        return {}
    wanted = {f.name for f in metadata.spec().fields if not f.transform.preserves_order}
    return {k: v for k, v in file.partition_values.items() if k in wanted and isinstance(v, int)}


def data_file_from_stats(table: TableMetrics, file: DataFile, stats: FileStats) -> IcebergDataFile:
    """The `DataFile` `add_files` would build for `file`, from its carried metrics (no I/O).

    Raises ValueError when the file does not fit the table, `MetricsNeedFooterError` when the
    carried metrics are not enough for the table's metrics modes.
    """
    table.check_schema(stats)
    column_sizes: dict[int, int] = {}
    value_counts: dict[int, int] = {}
    null_counts: dict[int, int] = {}
    aggregates: dict[int, StatsAggregator] = {}
    for column in stats.columns:
        field_id = table.field_ids[column.name]
        wanted = table.plan[field_id]
        column_sizes[field_id] = column.size_bytes
        if wanted.mode.type is MetricModeTypes.NONE:
            continue
        value_counts[field_id] = column.value_count
        if not column.has_stats:
            continue
        if column.null_count is not None:
            null_counts[field_id] = column.null_count
        if wanted.mode.type is MetricModeTypes.COUNTS:
            continue
        # A cut bound gives Iceberg's truncation only when the table truncates shorter than the cut
        # (at the cut's own length the truncation would not see that the value went on).
        shorter = wanted.mode.length is not None and wanted.mode.length < CARRIED_PREFIX
        if (column.lower_cut or column.upper_cut) and (field_id in table.partition_sources or not shorter):
            raise MetricsNeedFooterError(column.name)
        try:
            aggregate = StatsAggregator(wanted.iceberg_type, column.physical_type, wanted.mode.length)
        except ValueError as exc:
            raise ValueError(f"{exc} for column '{column.name}'") from exc
        aggregate.update_min(_decode(column, column.lower))
        aggregate.update_max(_decode(column, column.upper))
        aggregates[field_id] = aggregate
    statistics = DataFileStatistics(
        record_count=file.record_count,
        column_sizes=column_sizes,
        value_counts=value_counts,
        null_value_counts=null_counts,
        nan_value_counts={},
        column_aggregates=aggregates,
        split_offsets=list(stats.split_offsets),
    )
    return IcebergDataFile.from_args(
        content=DataFileContent.DATA,
        file_path=file.uri,
        file_format=FileFormat.PARQUET,
        partition=file_partition(table.metadata, statistics, file.uri, _carried_values(file, table.metadata)),
        file_size_in_bytes=file.size_bytes,
        sort_order_id=None,
        spec_id=table.metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


def _decode(column: ColumnStats, encoded: str | None) -> Any:
    """The value pyarrow's `Statistics.min`/`max` gives for the column (what `add_files` aggregates)."""
    if encoded is None:
        return None
    data = base64.b64decode(encoded)
    kind = column.type
    if kind is ColumnType.BOOLEAN:
        return data == b"\x01"
    if kind is ColumnType.STRING:
        return data.decode("utf-8")
    if kind is ColumnType.BINARY:
        return data
    if kind is ColumnType.DATE:
        return _EPOCH_DAY + timedelta(days=struct.unpack("<i", data)[0])
    if kind is ColumnType.TIMESTAMP:
        return _EPOCH + timedelta(microseconds=struct.unpack("<q", data)[0])
    if kind is ColumnType.TIMESTAMPTZ:
        return _EPOCH_UTC + timedelta(microseconds=struct.unpack("<q", data)[0])
    if kind is ColumnType.TIME:
        return (_EPOCH + timedelta(microseconds=struct.unpack("<q", data)[0])).time()
    return struct.unpack(_UNPACK[kind], data)[0]
