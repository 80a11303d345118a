"""Confluent wire format: a zero magic byte, a 4-byte big-endian schema id, then the payload.

`split_wire` reads the headers of a whole batch at once (numpy over the values' buffers): per value
the schema id, where its payload starts, and whether it has the prefix at all; `confluent_frames`
groups the payloads by schema id (`framing.Frames`, what the registered decoders read). The AWS Glue
Schema Registry's header is `glue_wire.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.formats.frames import Frames
from kafscale_iceberg.domain.record_schemas import SchemaId

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


def value_layout(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A binary array's buffers as numpy, without copying: per value whether it is valid, where it
    starts and how long it is, and the data all values share."""
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
    return valid, data, offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64)


def first_bytes(valid: np.ndarray, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each value's first byte (-1 for a null or empty value)."""
    present = valid & (lengths > 0)
    first = np.full(len(starts), -1, np.int64)
    first[present] = data[starts[present]]
    return first


def split_wire(values: pa.Array) -> WireHeaders:
    """The wire headers of `values` (a binary array, nullable)."""
    valid, data, starts, lengths = value_layout(values)
    count = len(starts)
    present = valid & (lengths > 0)
    first = first_bytes(valid, data, starts, lengths)
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


def confluent_frames(values: pa.Array) -> Frames:
    """`values` framed by the Confluent wire format (see `framing.Frames`)."""
    headers = split_wire(values)
    raw: list[bytes | None] = values.to_pylist()
    members: dict[SchemaId, list[tuple[int, bytes]]] = {}
    ids = headers.schema_ids
    for position in np.flatnonzero(headers.prefixed).tolist():
        members.setdefault(int(ids[position]), []).append((position, raw[position][HEADER_BYTES:]))  # type: ignore[index]
    return Frames(
        present=headers.present,
        prefixed=headers.prefixed,
        first_bytes=headers.first_bytes,
        members=members,
        errors={},
        raw=raw,
        missing=CONFLUENT_MISSING,
    )


CONFLUENT_MISSING = (
    "no Confluent wire-format prefix (first byte 0x{first:02x}, expected 0x00 and a 4-byte schema id)"
)
