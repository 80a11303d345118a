"""How compaction writes a group's rows (`adapters/iceberg_maintenance.py` plans and commits it).

The rows of a group's files are read through the table's metadata and written again under the
compaction's folder with the table's field ids, in files of about the target size:

- **an append table**: split by Kafka partition and sorted by offset, so every new file is
  partition-pure and in offset order (a reset then rewrites few files);
- **an upsert table** (the table has identifier fields, its key): sorted by the key, so the files'
  key bounds do not overlap - a later run's locate step (`adapters/iceberg_upsert.py`) prunes by
  them. Its rows hold each key's last state only, so no reset needs them partition-pure.

`rewrite_job_group` is one group as a Spark task of a compaction job runs it (no catalog: the
table metadata the job was planned from).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.table import FileScanTask, StaticTable, Table

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.iceberg_schemas import key_column_names
from kafscale_iceberg.dataplane.schemas import statistics_columns
from kafscale_iceberg.dataplane.storage import join_uri
from kafscale_iceberg.domain.compaction_jobs import CompactionGroupOutput, CompactionJob
from kafscale_iceberg.exceptions import CompactionResultError

# Compressed bytes per Arrow byte assumed when cutting compacted files to the target size.
_COMPRESSION_RATIO = 0.35
_ROW_GROUP_ROWS = 1_000_000


def rewrite_job_group(job: CompactionJob, index: int, sink: StagedFileStore) -> CompactionGroupOutput:
    """One group of a compaction job, as a Spark task runs it: read the group's files through the
    table metadata the job was planned from (no catalog), write them partition-pure in offset
    order under the job's folder. Raises when a file is not in that metadata's snapshot."""
    table = StaticTable.from_metadata(job.metadata_location, properties=job.io_properties)
    group = job.groups[index]
    wanted = set(group.files)
    scan = table.scan(snapshot_id=job.snapshot_id) if job.snapshot_id is not None else table.scan()
    tasks = [t for t in scan.plan_files() if t.file.file_path in wanted]
    if len(tasks) != len(wanted):
        found = {t.file.file_path for t in tasks}
        raise CompactionResultError(
            f"compaction job {job.job_id}: files not in snapshot {job.snapshot_id} of {job.table}: "
            f"{sorted(wanted - found)[:5]}"
        )
    uris, rows = rewrite_group(
        table,
        tasks,
        folder=job.folder,
        name=f"part-{index:05d}",
        target_file_size_bytes=job.target_file_size_bytes,
        sink=sink,
    )
    return CompactionGroupOutput(index=index, files=tuple(uris), rows=rows)


def rewrite_group(
    table: Table,
    tasks: Sequence[FileScanTask],
    *,
    folder: str,
    name: str,
    target_file_size_bytes: int,
    sink: StagedFileStore,
) -> tuple[list[str], int]:
    """The rows of `tasks` as new files under `folder`, each at most about `target_file_size_bytes`:
    one Kafka partition per file in offset order (cut at offset boundaries), or for an upsert table
    in key order (see the module docstring). Their URIs and the rows written."""
    schema = table.schema()
    arrow_schema = _regular_types(schema_to_pyarrow(schema, include_field_ids=True))
    rows = ArrowScan(
        table_metadata=table.metadata, io=table.io, projected_schema=schema, row_filter=AlwaysTrue()
    ).to_table(tasks=list(tasks))
    rows = rows.cast(arrow_schema) if rows.schema != arrow_schema else rows
    key = schema.identifier_field_names()
    runs = (
        [(None, rows.sort_by([(name, "ascending") for name in key_column_names(schema)]))]
        if key
        else _by_kafka_partition(rows)
    )
    written: list[str] = []
    for partition, part_rows in runs:
        written.extend(
            _write_files(
                part_rows,
                folder=folder,
                name=name + ("" if partition is None else f"-p{partition}"),
                target_file_size_bytes=target_file_size_bytes,
                sink=sink,
            )
        )
    return written, rows.num_rows


def _write_files(
    rows: pa.Table, *, folder: str, name: str, target_file_size_bytes: int, sink: StagedFileStore
) -> list[str]:
    """`rows` (in order) as Parquet files of about the target size; their URIs.

    The rows per file start from an estimate (Arrow bytes x `_COMPRESSION_RATIO`) and follow the
    bytes per row each written file actually took, so files stay near the target whatever the data
    compresses to (a reset then rewrites at most about one target-size file of a partition)."""
    bytes_per_row = max(rows.nbytes / max(rows.num_rows, 1) * _COMPRESSION_RATIO, 1.0)
    uris: list[str] = []
    start = 0
    while start < rows.num_rows:
        per_file = max(1, int(target_file_size_bytes / bytes_per_row))
        chunk = rows.slice(start, per_file)
        uri = join_uri(folder, f"{name}-{len(uris):04d}.parquet")
        staging = sink.staging_path(uri)
        pq.write_table(
            chunk,
            staging,
            compression="zstd",
            compression_level=1,
            row_group_size=min(per_file, _ROW_GROUP_ROWS),
            write_statistics=statistics_columns(chunk.schema),  # none for uuids, as the runs' files
        )
        written = os.path.getsize(staging)
        sink.publish(staging, uri)
        uris.append(uri)
        start += chunk.num_rows
        bytes_per_row = max(written / max(chunk.num_rows, 1), 1.0)
    return uris


def _by_kafka_partition(rows: pa.Table) -> Iterable[tuple[int | None, pa.Table]]:
    if "partition" not in rows.column_names or "offset" not in rows.column_names:
        yield None, rows
        return
    ordered = rows.sort_by([("partition", "ascending"), ("offset", "ascending")])
    partitions = ordered.column("partition")
    for value in pc.unique(partitions).to_pylist():
        yield value, ordered.filter(pc.equal(partitions, value))


def _regular_type(dtype: pa.DataType) -> pa.DataType:
    """pyiceberg's large string/binary/list types as the regular ones the data plane writes."""
    if pa.types.is_large_string(dtype):
        return pa.string()
    if pa.types.is_large_binary(dtype):
        return pa.binary()
    if pa.types.is_large_list(dtype):
        return pa.list_(_regular_field(dtype.value_field))
    if pa.types.is_list(dtype):
        return pa.list_(_regular_field(dtype.value_field))
    if pa.types.is_struct(dtype):
        return pa.struct([_regular_field(dtype.field(i)) for i in range(dtype.num_fields)])
    if pa.types.is_map(dtype):
        return pa.map_(_regular_field(dtype.key_field), _regular_field(dtype.item_field))
    return dtype


def _regular_field(field: pa.Field) -> pa.Field:
    return pa.field(field.name, _regular_type(field.type), field.nullable, field.metadata)


def _regular_types(schema: pa.Schema) -> pa.Schema:
    return pa.schema([_regular_field(f) for f in schema], metadata=schema.metadata)
