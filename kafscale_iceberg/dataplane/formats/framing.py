"""What a registry's wire header leaves of a batch of record values: the payloads by the schema id
their header names, and what could not be framed.

Two headers exist: the Confluent wire format (`wire.py`: a zero byte and a 4-byte schema id) and the
AWS Glue Schema Registry's (`glue_wire.py`: a version byte, a compression byte and a 16-byte schema
version id). The registry a run reads schemas from says which one its records carry
(`schema_registry.type`): `frames_of` frames a batch by it. The decoders of a registered format read
`Frames` (`frames.py`) and never the header; what else must tell a registry-framed value from another
(an upsert tombstone's record key: `dataplane/upsert_changes.py`) asks `frames_of` too.
"""

from __future__ import annotations

import pyarrow as pa

from kafscale_iceberg.dataplane.formats.frames import Frames
from kafscale_iceberg.dataplane.formats.glue_wire import glue_frames
from kafscale_iceberg.dataplane.formats.wire import confluent_frames
from kafscale_iceberg.domain.runs import RegistryType


def frames_of(values: pa.Array, registry_type: RegistryType) -> Frames:
    """`values` framed by the header the records of a `registry_type` registry carry."""
    if registry_type is RegistryType.GLUE:
        return glue_frames(values)
    return confluent_frames(values)
