"""The field names a run's records carry, for the hint of a column no record filled: the top-level
keys of the JSON `value` of the first few rows of one of the run's data files (every row keeps its
record's value bytes). Read only when a column is unfilled, so it costs nothing otherwise.

Best effort: a file that cannot be read gives no hint (None), never a failed commit.
"""

from __future__ import annotations

import json
import logging

import pyarrow.parquet as pq
from pyiceberg.io import FileIO

logger = logging.getLogger(__name__)

VALUE_COLUMN = "value"


def sample_record_fields(io: FileIO, uri: str, limit: int) -> tuple[str, ...] | None:
    """The top-level keys of the JSON objects among the first `limit` rows' values of the data file
    `uri`, in first-seen order; None when the file cannot be read."""
    try:
        with io.new_input(uri).open() as stream:
            batches = pq.ParquetFile(stream).iter_batches(batch_size=limit, columns=[VALUE_COLUMN])
            batch = next(batches, None)
            values = [] if batch is None else batch.column(0).to_pylist()
    except (OSError, ValueError, KeyError) as exc:
        logger.warning("could not sample the records' fields", extra={"uri": uri, "error": str(exc)})
        return None
    fields: dict[str, None] = {}
    for raw in values:
        try:
            document = json.loads(raw) if raw is not None else None
        except ValueError:
            continue
        if isinstance(document, dict):
            fields.update(dict.fromkeys(document))
    return tuple(fields)
