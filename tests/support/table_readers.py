"""An Iceberg table's rows as engines other than pyiceberg read them, position deletes applied.

Neither DuckDB's Iceberg extension (it downloads itself) nor Iceberg's Spark runtime (Maven) installs
here, so each engine does what its Iceberg reader does, by hand, from the table's current snapshot:
read the data files with its own Parquet reader, each row with its file and row position, and drop
the (file, position) pairs the snapshot's position delete files name (an anti-join). What these
readers check is that the files the product writes - data files and position delete files - mean the
same rows to every Parquet reader: field ids, row order, the delete files' columns and paths.

And the compaction they are compared with after (`full_compaction`), shared with `make bench-upsert`.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from kafscale_iceberg.adapters.iceberg_maintenance import CompactionWrite, IcebergTableMaintainer
from kafscale_iceberg.domain.maintenance import DeleteFolding


def snapshot_files(table: Table) -> tuple[list[str], list[str]]:
    """The current snapshot's data files and the position delete files that apply to them (URIs)."""
    tasks = list(table.scan().plan_files())
    deletes = sorted({d.file_path for t in tasks for d in t.delete_files})
    return [t.file.file_path for t in tasks], deletes


def _local(uri: str) -> str:
    return uri.removeprefix("file://")


def duckdb_rows(table: Table, columns: str) -> list[tuple[Any, ...]]:
    """`SELECT {columns}` over the table as DuckDB's Parquet reader reads it, deletes applied."""
    import duckdb

    data, deletes = snapshot_files(table)
    if not data:
        return []
    source = f"read_parquet({[_local(u) for u in data]!r}, filename=true, file_row_number=true)"
    if not deletes:
        return duckdb.sql(f"SELECT {columns} FROM {source}").fetchall()
    gone = f"read_parquet({[_local(u) for u in deletes]!r})"
    query = (
        f"SELECT {columns} FROM {source} AS t ANTI JOIN {gone} AS d "
        "ON regexp_replace(d.file_path, '^file://', '') = t.filename AND d.pos = t.file_row_number"
    )
    return duckdb.sql(query).fetchall()


def spark_rows(spark: Any, table: Table, columns: list[str]) -> list[tuple[Any, ...]]:
    """`columns` of the table as Spark's Parquet reader reads it (`_metadata.row_index`: the row's
    position in its file), deletes applied."""
    from pyspark.sql import functions as F  # noqa: N812

    data, deletes = snapshot_files(table)
    if not data:
        return []

    def canonical(column: Any) -> Any:
        return F.regexp_replace(column, "^file:/*", "/")

    rows = spark.read.parquet(*data).select(
        *columns,
        canonical(F.col("_metadata.file_path")).alias("_file"),
        F.col("_metadata.row_index").alias("_pos"),
    )
    if deletes:
        gone = spark.read.parquet(*deletes).select(
            canonical(F.col("file_path")).alias("_file"), F.col("pos").alias("_pos")
        )
        rows = rows.join(gone, on=["_file", "_pos"], how="left_anti")
    return [tuple(r) for r in rows.select(*columns).collect()]


def delete_file_paths(table: Table) -> set[str]:
    """The position delete files the current snapshot's data files carry."""
    return set(snapshot_files(table)[1])


def full_compaction(
    maintainer: IcebergTableMaintainer, table: str, *, data_prefix: str, target_file_size_bytes: int
) -> CompactionWrite:
    """`maintain`'s compaction of every data file of `table`, every position delete folded, planned
    and written (not committed: `maintainer.commit_compaction(written, now_ms=0)`). What the upsert
    tests and `make bench-upsert` compare a merge-on-read table with."""
    plan = maintainer.plan_compaction(
        table,
        small_file_bytes=1 << 40,
        min_small_files=2,
        max_bytes=1 << 40,
        folding=DeleteFolding(max_delete_ratio=1e-9, max_delete_files=1),
    )
    return maintainer.write_compaction(
        plan, data_prefix=data_prefix, target_file_size_bytes=target_file_size_bytes
    )
