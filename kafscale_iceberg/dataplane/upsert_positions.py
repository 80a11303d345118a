"""The rows of one table file an upsert run replaces, by position (`domain/upsert.py`): what the locate
step hands to the rewrite step (copy-on-write, `upsert_rewrite.rewrite_without`) or to the delete
step (merge-on-read, `position_deletes.py`) alike.

Only the key columns of the file are read - through ranged reads when the storage offers them (the
footer, then the key columns' chunks), so the bytes read follow the key columns, not the file - and
the positions the table's position delete files already delete in it are left out: those rows are
gone, a change of their key neither updates nor deletes them again.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafscale_iceberg.dataplane.upsert_keys import KeyChanges
from kafscale_iceberg.ports import ObjectReader, RangedObjectReader


@dataclass(frozen=True)
class LocatedRows:
    """The rows of one table file a run's changes replace."""

    uri: str
    replaced: np.ndarray
    """Positions (sorted) of rows holding a changed key that no delete file deletes yet."""
    deleted: np.ndarray
    """Of `replaced`, the positions of keys the run deletes (the others it updates)."""
    deleted_before: np.ndarray
    """Positions the table's delete files already delete (sorted): gone from the table."""
    rows: int
    bytes_read: int
    """Bytes read from the file to find them (footer and key columns with ranged reads)."""


class _RangedFile(io.RawIOBase):
    """A read-only file over ranged reads of an object, counting the bytes it read."""

    def __init__(self, reader: RangedObjectReader, uri: str, size: int) -> None:
        super().__init__()
        self._reader, self._uri, self._size = reader, uri, size
        self._position = 0
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        end = min(self._size, self._position + len(buffer))
        if end <= self._position:
            return 0
        data = self._reader.read_range(self._uri, self._position, end - 1)
        buffer[: len(data)] = data
        self._position += len(data)
        self.bytes_read += len(data)
        return len(data)


def read_columns(reader: ObjectReader, uri: str, size: int, columns: Sequence[str]) -> tuple[pa.Table, int]:
    """`columns` of the Parquet file `uri` (of `size` bytes), and the bytes read to get them: ranged
    reads of its footer and those columns when `reader` offers them, else the whole object."""
    if isinstance(reader, RangedObjectReader) and size > 12:
        ranged = _RangedFile(reader, uri, size)
        table = pq.ParquetFile(ranged, metadata=_footer(ranged, uri, size)).read(columns=list(columns))
        return table, ranged.bytes_read
    data = reader.read_bytes(uri)
    return pq.read_table(io.BytesIO(data), columns=list(columns)), len(data)


def read_delete_rows(reader: ObjectReader, delete_uri: str) -> pa.Table:
    """The (`file_path`, `pos`) rows of a position delete file."""
    rows = pq.read_table(io.BytesIO(reader.read_bytes(delete_uri)), columns=["file_path", "pos"])
    return rows.set_column(0, "file_path", rows.column("file_path").cast(pa.string()))


def _footer(ranged: _RangedFile, uri: str, size: int) -> pq.FileMetaData:
    """The file's footer in two small reads (its length, then it): pyarrow's own footer read takes
    the last 64 KiB whatever the footer's size, more than a small file's key column."""
    ranged.seek(size - 8)
    tail = ranged.read(8)
    length = struct.unpack("<I", tail[:4])[0]
    if tail[4:] != b"PAR1" or length + 12 > size:
        raise ValueError(f"{uri} is not a Parquet file (no footer)")
    ranged.seek(size - 8 - length)
    footer = ranged.read(length)
    return pq.read_metadata(io.BytesIO(b"PAR1" + footer + tail))


def deleted_positions(
    delete_rows: Callable[[str], pa.Table], delete_files: Sequence[str], uri: str
) -> np.ndarray:
    """The positions of `uri` the position delete files `delete_files` delete (sorted, each once);
    `delete_rows` reads a delete file's rows (`read_delete_rows`, cached by the caller: a delete file
    of a partition names rows of many of its files)."""
    found: list[np.ndarray] = []
    for delete_uri in delete_files:
        rows = delete_rows(delete_uri)
        mine = rows.filter(pc.equal(rows.column("file_path"), uri))
        found.append(mine.column("pos").to_numpy())
    if not found:
        return np.zeros(0, np.int64)
    return np.unique(np.concatenate(found).astype(np.int64))


def locate_rows(
    reader: ObjectReader,
    uri: str,
    size: int,
    changes: KeyChanges,
    delete_files: Sequence[str] = (),
    delete_rows: Callable[[str], pa.Table] | None = None,
) -> LocatedRows:
    """The rows of table file `uri` that hold a key `changes` changes (see the module docstring);
    `delete_rows` reads a delete file's rows (default: `read_delete_rows`, uncached). Storage errors
    of `reader`."""
    keys, bytes_read = read_columns(reader, uri, size, changes.key)
    replaced, deleted = changes.replaced(keys)
    load = delete_rows or (lambda delete_uri: read_delete_rows(reader, delete_uri))
    before = deleted_positions(load, delete_files, uri)
    if before.size:
        live = np.ones(keys.num_rows, bool)
        live[before[before < keys.num_rows]] = False
        replaced &= live
        deleted &= live
    return LocatedRows(
        uri=uri,
        replaced=np.flatnonzero(replaced).astype(np.int64),
        deleted=np.flatnonzero(deleted).astype(np.int64),
        deleted_before=before,
        rows=keys.num_rows,
        bytes_read=bytes_read,
    )
