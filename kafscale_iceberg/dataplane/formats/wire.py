"""Confluent wire format: a zero magic byte, a 4-byte big-endian schema id, then the payload.

`split_wire` reads the headers of a whole batch at once (numpy over the values' buffers): per value
the schema id, where its payload starts, and whether it has the prefix at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

MAGIC_BYTE = 0
HEADER_BYTES = 5


@dataclass(frozen=True)
class WireHeaders:
    """Per value of a batch: `present` (not null, not empty), `prefixed` (starts with the magic byte
    and is long enough for an id), `schema_ids` (0 where not prefixed), `first_bytes` (the first
    byte, -1 for an empty value: what an error names)."""

    present: np.ndarray
    prefixed: np.ndarray
    schema_ids: np.ndarray
    first_bytes: np.ndarray


def split_wire(values: pa.Array) -> WireHeaders:
    """The wire headers of `values` (a binary array, nullable)."""
    if pa.types.is_large_binary(values.type):
        values = values.cast(pa.binary())
    count = len(values)
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), bool)
    offsets_buffer, data_buffer = values.buffers()[1], values.buffers()[2]
    offsets = (
        np.frombuffer(offsets_buffer, np.int32, count + 1, values.offset * 4)
        if count
        else np.zeros(1, np.int32)
    )
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    present = valid & (lengths > 0)
    first = np.full(count, -1, np.int64)
    first[present] = data[starts[present]]
    prefixed = present & (lengths >= HEADER_BYTES) & (first == MAGIC_BYTE)
    ids = np.zeros(count, np.int64)
    if prefixed.any():
        at = starts[prefixed]
        ids[prefixed] = (
            (data[at + 1].astype(np.int64) << 24)
            | (data[at + 2].astype(np.int64) << 16)
            | (data[at + 3].astype(np.int64) << 8)
            | data[at + 4].astype(np.int64)
        )
    return WireHeaders(present=present, prefixed=prefixed, schema_ids=ids, first_bytes=first)
