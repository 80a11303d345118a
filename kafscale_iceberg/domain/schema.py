"""Table layouts: the eight base fields every KafScale table has, mapping columns, dead-letter rows.

The base fields, their order, types, required flags and field ids 1-8 are exactly those of KafScale's
Go processor, so tables it created keep working. Types are named with `ColumnType`; the Arrow
(data plane) and Iceberg (commit step) translations live beside the code that needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType


@dataclass(frozen=True)
class FieldSpec:
    """One top-level column of a table; `field_id` is None where the table assigns it."""

    name: str
    type: ColumnType
    required: bool
    field_id: int | None = None
    column: ColumnSpec | None = None
    """The mapping column this field holds, with its parts (decimal precision, nested types)."""


BASE_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("record_id", ColumnType.STRING, True, 1),
    FieldSpec("topic", ColumnType.STRING, True, 2),
    FieldSpec("partition", ColumnType.INT, True, 3),
    FieldSpec("offset", ColumnType.LONG, True, 4),
    FieldSpec("timestamp_ms", ColumnType.LONG, True, 5),
    FieldSpec("key", ColumnType.BINARY, False, 6),
    FieldSpec("value", ColumnType.BINARY, False, 7),
    FieldSpec("headers", ColumnType.STRING, False, 8),
)
BASE_FIELD_NAMES = frozenset(f.name for f in BASE_FIELDS)

# Dead-letter rows keep the record as it arrived (base fields; timestamp optional because a
# quarantined segment may have no readable record), then why and where it failed. A quarantined
# segment is one row: `offset` is its base offset and `last_offset` its last, so a later replay of
# the repaired segment knows the exact range to ingest.
DEAD_LETTER_FIELDS: tuple[FieldSpec, ...] = (
    *BASE_FIELDS[:4],
    FieldSpec("timestamp_ms", ColumnType.LONG, False, 5),
    *BASE_FIELDS[5:],
    FieldSpec("error_kind", ColumnType.STRING, True, 9),
    FieldSpec("error", ColumnType.STRING, True, 10),
    FieldSpec("run_id", ColumnType.STRING, True, 11),
    FieldSpec("segment_key", ColumnType.STRING, False, 12),
    FieldSpec("last_offset", ColumnType.LONG, False, 13),
)


def table_fields(columns: Sequence[ColumnSpec]) -> tuple[FieldSpec, ...]:
    """The fields of a mapped table: the base fields, then the mapping columns in their order.

    Raises ValueError when a mapping column reuses a base field's name or appears twice.
    """
    seen = set(BASE_FIELD_NAMES)
    fields = list(BASE_FIELDS)
    for column in columns:
        if column.name in seen:
            raise ValueError(f"column {column.name!r} is a base field or listed twice")
        seen.add(column.name)
        fields.append(FieldSpec(column.name, column.type, column.required, column=column))
    return tuple(fields)


def record_id(topic: str, partition: int, offset: int) -> str:
    """`{topic}:{partition}:{offset}`, the Go processor's dedupe key."""
    return f"{topic}:{partition}:{offset}"
