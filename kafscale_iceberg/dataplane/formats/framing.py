"""What a registry's wire header leaves of a batch of record values: the payloads by the schema id
their header names, and what could not be framed.

Two headers exist: the Confluent wire format (`wire.py`: a zero byte and a 4-byte schema id) and the
AWS Glue Schema Registry's (`glue_wire.py`: a version byte, a compression byte and a 16-byte schema
version id). The registry a run reads schemas from says which one its records carry
(`schema_registry.type`): `frames_of` frames a batch by it. The decoders of a registered format read
`Frames` and never the header; what else must tell a registry-framed value from another (an upsert
tombstone's record key: `dataplane/upsert_changes.py`) asks `frames_of` too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kafscale_iceberg.domain.record_schemas import SchemaId
from kafscale_iceberg.domain.runs import RegistryType


@dataclass(frozen=True)
class Frames:
    """A batch's values, framed.

    `present`: not null, not empty; `prefixed`: carries the header; `first_bytes`: each value's first
    byte (-1 when empty: what a message names); `members`: the prefixed values by schema id, as
    `(position, payload)` in position order (a compressed payload inflated); `errors`: prefixed values
    whose header is unusable, position -> (dead-letter kind, reason naming the schema id); `raw`: the
    values as they are (what an unprefixed value is read from); `missing`: the reason of a value
    without the header, a format string taking `first` (its first byte).
    """

    present: np.ndarray
    prefixed: np.ndarray
    first_bytes: np.ndarray
    members: dict[SchemaId, list[tuple[int, bytes]]]
    errors: dict[int, tuple[str, str]]
    raw: list[bytes | None]
    missing: str

    def missing_reason(self, position: int) -> str:
        """Why the value at `position` names no schema: its first byte and the header expected."""
        return self.missing.format(first=int(self.first_bytes[position]))


def frames_of(values: pa.Array, registry_type: RegistryType) -> Frames:
    """`values` framed by the header the records of a `registry_type` registry carry."""
    # The two header modules build `Frames`: imported here, not at the top, so they can import this one.
    if registry_type is RegistryType.GLUE:
        from kafscale_iceberg.dataplane.formats.glue_wire import glue_frames  # noqa: PLC0415

        return glue_frames(values)
    from kafscale_iceberg.dataplane.formats.wire import confluent_frames  # noqa: PLC0415

    return confluent_frames(values)
