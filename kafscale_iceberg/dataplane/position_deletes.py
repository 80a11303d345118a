"""The position-delete writer: Iceberg v2 position delete files, beside the data-file writer
(`parquet_files.py`). What a merge-on-read upsert run writes instead of rewriting the table files
that hold its changed keys (`domain/upsert.py`).

A position delete file is Parquet with two required columns, `file_path` (string, field id
2147483546) and `pos` (long, 2147483545): the data file and the 0-based row position of each deleted
row, sorted by `file_path` then `pos` as the spec requires. An upsert run writes one per data file
it deletes rows of (`execution/upsert_stage.py`; the commit gives it its target's partition); one
targeting a single data file has equal `file_path` bounds, which every reader takes as its
referenced data file. Its metrics -
record count, both columns' bounds and compressed sizes - come from the rows and the footer just
written, so the commit step reads no file.

pyarrow only: this runs in the run's driver on any runner (Spark, Lambda, in-process).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kafscale_iceberg.domain.runs import PositionDeleteFile
from kafscale_iceberg.ports import FileSink

FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545

POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_FIELD_ID)}
        ),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_FIELD_ID)}),
    ]
)


def position_delete_rows(positions: Mapping[str, np.ndarray]) -> pa.Table:
    """The rows of a position delete file for `positions` (data file URI -> row positions): sorted by
    `file_path` then `pos`, each position once; files with no position are left out."""
    paths: list[str] = []
    chunks: list[np.ndarray] = []
    for uri in sorted(positions):
        at = np.unique(np.asarray(positions[uri], dtype=np.int64))
        if at.size:
            if at[0] < 0:
                raise ValueError(f"a row position of {uri} is negative ({int(at[0])})")
            paths.append(uri)
            chunks.append(at)
    counts = [len(c) for c in chunks]
    file_path = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.arange(len(paths), dtype=np.int32), counts)), pa.array(paths, pa.string())
    ).cast(pa.string())
    pos = pa.array(np.concatenate(chunks) if chunks else np.zeros(0, np.int64), pa.int64())
    return pa.Table.from_arrays([file_path, pos], schema=POSITION_DELETE_SCHEMA)


def write_position_deletes(
    sink: FileSink, uri: str, positions: Mapping[str, np.ndarray]
) -> PositionDeleteFile:
    """Write the position delete file of `positions` (data file URI -> row positions, all of one
    Iceberg partition) to `uri` and return it with its metrics. Idempotent: the same positions give
    the same file. Raises `ValueError` when no position is given (a delete file deletes something)."""
    rows = position_delete_rows(positions)
    if not rows.num_rows:
        raise ValueError(f"position delete file {uri}: no position to delete")
    staging = sink.staging_path(uri)
    # Dictionary-encoded paths (few distinct, repeated): what Iceberg's writers do, and pyiceberg's
    # reader expects a dictionary it can unify. No Arrow schema in the footer (the Parquet schema
    # holds the field ids) and no Parquet statistics of the paths (readers match a delete file by
    # its manifest bounds): 694 bytes instead of 1,708 for 25 positions of one data file, which
    # counts with a file per data file a run deletes rows of.
    pq.write_table(
        rows,
        staging,
        compression="zstd",
        compression_level=1,
        write_statistics=["pos"],
        store_schema=False,
    )
    size = os.path.getsize(staging)
    metadata = pq.read_metadata(staging)
    sizes = [0, 0]
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for column in range(2):
            sizes[column] += row_group.column(column).total_compressed_size
    sink.publish(staging, uri)
    targets = tuple(sorted(u for u, p in positions.items() if len(p)))
    pos = rows.column("pos").to_numpy()
    return PositionDeleteFile(
        uri=uri,
        record_count=rows.num_rows,
        size_bytes=size,
        targets=targets,
        pos_lower=int(pos.min()),
        pos_upper=int(pos.max()),
        file_path_bytes=sizes[0],
        pos_bytes=sizes[1],
    )
