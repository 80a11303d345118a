"""The AWS Glue Schema Registry's wire header (`schema_registry.type: glue`), as the serializers of
awslabs/aws-glue-schema-registry write it before every record:

    byte 0       header version, 3
    byte 1       compression: 0 none, 5 zlib (the payload is a zlib stream, RFC 1950)
    bytes 2-17   the schema version id, a UUID, big-endian (its most significant 64 bits first)
    bytes 18-    the payload: Avro binary, JSON text, or Protobuf (a varint message index, then the
                 message: see `glue_protobuf.py`)

`glue_frames` frames a batch: a value whose first byte is 3 and that is at least 18 bytes long has
the header; a compressed payload is inflated. A compression byte other than 0 or 5 is a
`wire_format` dead letter, a zlib payload that does not inflate an `undecodable` one, both naming
the schema version id.
"""

from __future__ import annotations

import uuid
import zlib

import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.formats.frames import Frames
from kafscale_iceberg.dataplane.formats.wire import first_bytes, value_layout
from kafscale_iceberg.domain.record_schemas import SchemaId

HEADER_VERSION = 3
COMPRESSION_NONE = 0
COMPRESSION_ZLIB = 5
HEADER_BYTES = 18
GLUE_MISSING = (
    "no AWS Glue Schema Registry header (first byte 0x{first:02x}, expected header version 0x03, a "
    "compression byte and a 16-byte schema version id)"
)


def glue_header(version_id: str, *, compressed: bool = False) -> bytes:
    """The header of a record written with schema version `version_id` (what the serializers write)."""
    compression = COMPRESSION_ZLIB if compressed else COMPRESSION_NONE
    return bytes((HEADER_VERSION, compression)) + uuid.UUID(version_id).bytes


def glue_frames(values: pa.Array) -> Frames:
    """`values` framed by the Glue header (see the module docstring and `framing.Frames`)."""
    valid, data, starts, lengths = value_layout(values)
    present = valid & (lengths > 0)
    first = first_bytes(valid, data, starts, lengths)
    prefixed = present & (lengths >= HEADER_BYTES) & (first == HEADER_VERSION)
    raw: list[bytes | None] = values.to_pylist()
    members: dict[SchemaId, list[tuple[int, bytes]]] = {}
    errors: dict[int, tuple[str, str]] = {}
    for position in np.flatnonzero(prefixed).tolist():
        value: bytes = raw[position]  # type: ignore[assignment]
        version_id = str(uuid.UUID(bytes=value[2:HEADER_BYTES]))
        compression = value[1]
        payload = value[HEADER_BYTES:]
        if compression == COMPRESSION_ZLIB:
            try:
                payload = zlib.decompress(payload)
            except zlib.error as exc:
                errors[position] = (
                    "undecodable",
                    f"schema version id {version_id}: the payload is marked zlib-compressed (0x05) but "
                    f"does not inflate ({exc})",
                )
                continue
        elif compression != COMPRESSION_NONE:
            errors[position] = (
                "wire_format",
                f"schema version id {version_id}: unknown compression byte 0x{compression:02x} in the "
                "AWS Glue Schema Registry header (0x00 none, 0x05 zlib)",
            )
            continue
        members.setdefault(version_id, []).append((position, payload))
    return Frames(
        present=present,
        prefixed=prefixed,
        first_bytes=first,
        members=members,
        errors=errors,
        raw=raw,
        missing=GLUE_MISSING,
    )
