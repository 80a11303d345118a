"""The observation stage of an inferred table (`schema.source: infer`): what the records' fields hold.

`ValueObserver` parses record values as JSON (msgspec) and notes, for each top-level field of a JSON
object value, how many values of each JSON kind it held, recursively inside objects and arrays, and
where it first held a value (partition, offset). Nothing is written; values that are not JSON, not
an object, null or empty are passed over (the conversion stage dead-letters or keeps them by its
own rules). The rules that turn observations into columns are in `domain/inference.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec
import pyarrow as pa

from kafscale_iceberg.domain.field_ids import TableFieldIds, planned_field_ids
from kafscale_iceberg.domain.inference import (
    MAX_DEPTH,
    FieldObservation,
    TableObservation,
    case_clashes,
    resolve_columns,
)
from kafscale_iceberg.domain.runs import (
    LFS_METADATA_COLUMNS,
    ColumnSpec,
    ConversionSettings,
    MappingPlan,
    RunPlan,
    TableTarget,
)
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES, table_fields
from kafscale_iceberg.domain.schema_evolution import evolved_columns, with_time_as

logger = logging.getLogger(__name__)

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
    """`plan` with each inferred table's columns decided from the merged `observations` (by table
    identifier) and their field ids planned: the plan the conversion stage runs.

    Every mapping with `schema.source: infer` is resolved: its fixed table (`conversion.columns`), or,
    routed, each of its tables on its own (`TableTarget.columns`): the route's tables and default
    table, and every table its template named in the observations (`RoutePlan.known_columns`; a
    table the launcher did not know starts from the base fields). A table's current columns keep
    their ids; new ones take Iceberg's ids after the table's `last_column_id`, keyed by path
    (`domain/field_ids.py`); a table that does not exist yet gets the ids its creation from these
    columns assigns. Unchanged for a plan that does not infer.
    """
    if not plan.infers:
        return plan
    mappings = [_resolved_mapping(m, observations) for m in plan.mappings]
    return plan.with_mappings(mappings)


def _resolved_mapping(mapping: MappingPlan, observations: Mapping[str, TableObservation]) -> MappingPlan:
    conversion = mapping.conversion
    if not conversion.infer_columns:
        return mapping
    if mapping.table is not None:
        resolved, table = _resolved_table(conversion, mapping.table, conversion.columns, observations)
        return mapping.model_copy(update={"conversion": resolved, "table": table})
    route = mapping.route
    assert route is not None

    def routed(target: TableTarget) -> TableTarget:
        current = target.columns if target.columns is not None else conversion.columns
        resolved, written = _resolved_table(conversion, target, current, observations)
        return written.model_copy(update={"columns": resolved.columns})

    tables = {value: routed(t) for value, t in route.tables.items()}
    default = None if route.default_table is None else routed(route.default_table)
    static = {t.identifier for t in route.static_targets()}
    known_columns = dict(route.known_columns)
    known_ids = dict(route.known_field_ids)
    if route.table_template is not None:
        for identifier in sorted(observations):
            if identifier in static or mapping.target(identifier) is None:
                continue
            written = routed(route.template_target(identifier))
            known_columns[identifier] = written.columns or ()
            if written.field_ids is not None:
                known_ids[identifier] = written.field_ids
    resolved_route = route.resolved(tables, default, known_columns, known_ids)
    return mapping.model_copy(update={"route": resolved_route})


def _resolved_table(
    conversion: ConversionSettings,
    target: TableTarget,
    current: tuple[ColumnSpec, ...],
    observations: Mapping[str, TableObservation],
) -> tuple[ConversionSettings, TableTarget]:
    """One inferred table's conversion (its columns decided) and target (its field ids planned)."""
    reserved = {*BASE_FIELD_NAMES, *(c.name for c in LFS_METADATA_COLUMNS if conversion.lfs.store_metadata)}
    observed = observations.get(target.identifier)
    if conversion.value_format.self_described:  # columns from the records' own schemas
        schemas = observed.schemas if observed is not None else {}
        given = [with_time_as(schemas[key], conversion.time_columns, current) for key in sorted(schemas)]
        pinned = {p.column for p in conversion.partition_by}
        pinned.update(conversion.upsert.key if conversion.upsert is not None else ())
        columns = evolved_columns(current, given, reserved=reserved, pinned=pinned)
    else:
        columns = resolve_columns(
            current, observed, allow_type_widening=conversion.allow_type_widening, reserved=reserved
        )
    clashes = case_clashes(columns, observed, reserved)
    if clashes:
        logger.warning(
            "fields not made columns of %s: another column has the same name in another case "
            "(engines that fold case could not tell them apart); their values stay in `value`: %s",
            target.identifier,
            ", ".join(clashes),
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
    return resolved, target.model_copy(update={"field_ids": field_ids})
