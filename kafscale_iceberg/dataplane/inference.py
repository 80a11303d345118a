"""The observation stage of an inferred table (`schema.source: infer`): what the records' fields hold.

`ValueObserver` parses record values as JSON (msgspec) and notes, for each top-level field of a JSON
object value, how many values of each JSON kind it held, recursively inside objects and arrays, and
where it first held a value (partition, offset). Nothing is written; values that are not JSON, not
an object, null or empty are passed over (the conversion stage dead-letters or keeps them by its
own rules). The rules that turn observations into columns are in `domain/inference.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import pyarrow as pa

from kafscale_iceberg.domain.field_ids import TableFieldIds, planned_field_ids
from kafscale_iceberg.domain.inference import MAX_DEPTH, FieldObservation, TableObservation, resolve_columns
from kafscale_iceberg.domain.runs import LFS_METADATA_COLUMNS, RunPlan
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES, table_fields

# The JSON kind of a scalar Python value as msgspec decodes it (bool before int: exact types).
_SCALAR_KINDS: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


class _Node:
    """A field's observation while it is being gathered (mutable; `FieldObservation` at the end)."""

    __slots__ = ("element", "fields", "first", "kinds")

    def __init__(self) -> None:
        self.kinds: dict[str, int] = {}
        self.fields: dict[str, _Node] = {}
        self.element: _Node | None = None
        self.first: tuple[int, int, int] | None = None

    def note(self, value: object, depth: int) -> None:
        kind = type(value)
        scalar = _SCALAR_KINDS.get(kind)
        if scalar is not None:
            self.kinds[scalar] = self.kinds.get(scalar, 0) + 1
            return
        if kind is dict:
            name = "object"
            if depth < MAX_DEPTH:
                fields = self.fields
                for key, inner in value.items():  # type: ignore[attr-defined]
                    node = fields.get(key)
                    if node is None:
                        node = fields[key] = _Node()
                    if inner is not None:
                        node.note(inner, depth + 1)
        elif kind is list:
            name = "array"
            if depth < MAX_DEPTH:
                for inner in value:  # type: ignore[attr-defined]
                    if inner is None:
                        continue
                    if self.element is None:
                        self.element = _Node()
                    self.element.note(inner, depth + 1)
        else:
            return
        self.kinds[name] = self.kinds.get(name, 0) + 1

    def observation(self) -> FieldObservation:
        return FieldObservation(
            kinds=dict(self.kinds),
            fields={name: node.observation() for name, node in self.fields.items()},
            element=None if self.element is None else self.element.observation(),
            first=self.first,
        )


class ValueObserver:
    """Gathers one table's observation over batches of record values (one per task)."""

    def __init__(self) -> None:
        self._fields: dict[str, _Node] = {}
        self._decode: Any = msgspec.json.Decoder().decode

    def observe(self, values: pa.Array, offsets: pa.Array, *, partition: int) -> None:
        """Note the fields of every JSON object among `values` (binary, nullable), whose offsets are
        `offsets` in `partition`; batches come in (partition, offset) order (a field's first value
        is the first one noted)."""
        decode = self._decode
        fields = self._fields
        kinds_of = _SCALAR_KINDS.get
        failure = (msgspec.DecodeError, UnicodeDecodeError)
        for value, offset in zip(values.to_pylist(), offsets.to_pylist(), strict=True):
            if not value:
                continue
            try:
                document = decode(value)
            except failure:
                continue  # not JSON as msgspec reads it: the conversion stage decides what it is
            if type(document) is not dict:
                continue
            for position, (key, inner) in enumerate(document.items()):
                node = fields.get(key)
                if node is None:
                    node = fields[key] = _Node()
                if inner is None:
                    continue
                if node.first is None:  # a task's segments come in (partition, offset) order
                    node.first = (partition, offset, position)
                scalar = kinds_of(type(inner))
                if scalar is None:
                    node.note(inner, 1)
                else:
                    counts = node.kinds
                    counts[scalar] = counts.get(scalar, 0) + 1

    def observation(self) -> TableObservation:
        """What was observed so far."""
        return TableObservation(fields={name: node.observation() for name, node in self._fields.items()})


def with_inferred_columns(plan: RunPlan, observations: Mapping[str, TableObservation]) -> RunPlan:
    """`plan` with its inferred table's columns decided from the merged `observations` (by table
    identifier) and their field ids planned: the plan the conversion stage runs.

    The table's current columns (the plan's) keep their ids; new ones take Iceberg's ids after the
    table's `last_column_id`, keyed by path (`domain/field_ids.py`); a table that does not exist yet
    gets the ids its creation from these columns assigns. Unchanged for a plan that does not infer.
    """
    conversion = plan.conversion
    target = plan.table
    if not conversion.infer_columns or target is None:  # config: infer has one fixed table
        return plan
    reserved = {*BASE_FIELD_NAMES, *(c.name for c in LFS_METADATA_COLUMNS if conversion.lfs.store_metadata)}
    columns = resolve_columns(
        conversion.columns,
        observations.get(target.identifier),
        allow_type_widening=conversion.allow_type_widening,
        reserved=reserved,
    )
    resolved = conversion.model_copy(update={"columns": columns})
    field_ids: dict[str, int] | None = None
    if target.last_column_id is None:  # a table to be created: the ids its creation assigns
        field_ids = planned_field_ids(table_fields(resolved.table_columns), None)
    elif target.field_ids is not None:
        known = TableFieldIds(
            identifier=target.identifier, field_ids=target.field_ids, last_column_id=target.last_column_id
        )
        field_ids = planned_field_ids(table_fields(resolved.table_columns), known, new_parts=True)
    # Else the launcher could not plan the table's ids: files without ids (read by name), as then.
    return plan.model_copy(
        update={"conversion": resolved, "table": target.model_copy(update={"field_ids": field_ids})}
    )
