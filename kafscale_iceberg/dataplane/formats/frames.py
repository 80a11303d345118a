"""What a registry's wire header leaves of a batch of record values (`Frames`): the value both header
modules (`wire.py`, `glue_wire.py`) build and `framing.frames_of` returns, below all three."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafscale_iceberg.domain.record_schemas import SchemaId


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
