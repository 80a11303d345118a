"""What a value decoder returns (`DecodedBatch`, its `DecodedGroup`s) and what it groups records by
(`CompiledRecordSchema`): the values the `ValueDecoder` port (`ports.py`) names, below it, so the port
and the decoders both import them and neither imports the other's module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa

from kafscale_iceberg.domain.runs import ColumnSpec


class CompiledRecordSchema(Protocol):
    """A schema a value decoder made ready to read records with: the columns it gives, and its name
    in messages (`schema id 7`), which its records' `DecodedGroup` carries."""

    @property
    def columns(self) -> tuple[ColumnSpec, ...]: ...

    @property
    def label(self) -> str: ...


@dataclass(frozen=True)
class DecodedGroup:
    """Records of a batch written with one schema: their positions in the batch (ascending), the
    records typed by that schema, the columns the schema gives, and its name for messages."""

    positions: np.ndarray
    records: pa.StructArray
    columns: tuple[ColumnSpec, ...]
    label: str

    @classmethod
    def of(
        cls, schema: CompiledRecordSchema, positions: Sequence[int] | np.ndarray, records: pa.StructArray
    ) -> DecodedGroup:
        """The group of `records` (in order) at `positions` of the batch, written with `schema`."""
        return cls(np.asarray(positions, np.int64), records, schema.columns, schema.label)


@dataclass(frozen=True)
class DecodedBatch:
    """What a decoder made of a batch of values (see `dataplane/formats/__init__.py`)."""

    count: int
    groups: tuple[DecodedGroup, ...] = ()
    errors: dict[int, tuple[str, str]] = field(default_factory=dict)
