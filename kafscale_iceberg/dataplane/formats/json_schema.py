"""`value_format: json_schema`: JSON in Confluent wire format (`wire.py`), validated against the
registry's JSON Schema by id.

Columns come from the schema by the mapping `schema.source: registry` already uses
(`domain/registry.columns_from_json_schema`, the Go processor's columns and their nested additions),
every column optional (a property a newer version drops stays, null from then on). Records are
grouped by schema id; each payload is parsed (msgspec) and validated (`jsonschema`, the schema's own
draft); the group's records become one struct array, strings where the column is a `timestamp` or
`date` (conformed onto the column like any string, a value that does not convert counted).

A number projected onto a `decimal` column of the mapping (`schema.columns`, at any depth) is read
from its exact text, never through a float (`12345678901234567890.123` lands exact in
`decimal(38,10)`), and conformed by the one decimal rule (`domain/decimals.py`): a value the column
cannot hold is a counted conversion failure, as on JSON's mapped path.

Values without the wire prefix are read with `value_subject`'s latest schema when the mapping names
one, else are `wire_format` dead letters. A schema id the registry does not have (404):
`unknown_schema`; a payload that is not JSON or does not validate against its schema: `undecodable`,
naming the schema id and the failing path. A schema with `references` is refused (`undecodable`) by
this version. A registry outage raises `RegistryUnavailableError` (the run fails transiently).
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import pyarrow as pa
from jsonschema import exceptions as jsonschema_exceptions
from jsonschema import validators

from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch, DecodedGroup
from kafscale_iceberg.dataplane.formats.registered import RegisteredSchemaDecoder
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache, no_registry
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.domain.record_schemas import RegisteredSchema
from kafscale_iceberg.domain.registry import columns_from_json_schema
from kafscale_iceberg.domain.runs import KEY_VALUE_FIELD, ColumnSpec, ColumnType, ConversionSettings
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES
from kafscale_iceberg.exceptions import RecordSchemaError


@dataclass(frozen=True)
class JsonSchema:
    """What the decoder keeps per schema id: its validator, columns and the records' Arrow type."""

    registered: RegisteredSchema
    validator: Any
    columns: tuple[ColumnSpec, ...]
    struct_type: pa.StructType
    read_columns: tuple[ColumnSpec, ...] = ()
    """The columns as the records are read, when some numbers are kept as exact text (else empty)."""
    exact: frozenset[tuple[str, ...]] = frozenset()
    """Paths of the numbers read as exact text (a list's element is `[]`)."""
    whole_key: bool = False
    """A key whose schema is not an object: each document is the value of the one field
    `KEY_VALUE_FIELD` (its column is `key_value`)."""

    @property
    def label(self) -> str:
        """The schema's name in messages (`schema id 7`)."""
        return self.registered.label


_EXACT_JSON: Final = msgspec.json.Decoder(float_hook=decimal.Decimal)


class JsonSchemaDecoder(RegisteredSchemaDecoder[JsonSchema]):
    """Decodes JSON Schema records in Confluent wire format (see the module docstring)."""

    def __init__(
        self,
        schemas: SchemaCache,
        *,
        subject: str | None = None,
        columns: Sequence[ColumnSpec] = (),
        part: str = "value",
    ) -> None:
        """`columns`: the mapping's columns (`schema.columns`), whose decimals are read exactly."""
        super().__init__(schemas, subject=subject, part=part)
        self._columns = tuple(columns)

    def _compile_registered(self, registered: RegisteredSchema) -> JsonSchema:
        return compile_json_schema(registered, self._columns, key=self._part == "key")

    def decode(self, values: pa.Array) -> DecodedBatch:
        """See `ValueDecoder.decode`."""
        errors: dict[int, tuple[str, str]] = {}
        groups = []
        for compiled, members in self._compiled_groups(values, errors):
            kept: list[int] = []
            rows: list[dict[str, object]] = []
            for position, payload in members:
                row = _row(compiled, payload)
                if isinstance(row, str):
                    errors[position] = (
                        "undecodable",
                        f"the payload does not validate against {compiled.registered.label}: {row}",
                    )
                    continue
                kept.append(position)
                rows.append(row)
            if not kept:
                continue
            records, failed = _records(compiled, rows)
            for index, reason in failed.items():
                errors[kept[index]] = ("undecodable", f"{compiled.registered.label}: {reason}")
            if failed:
                kept = [p for i, p in enumerate(kept) if i not in failed]
            groups.append(DecodedGroup.of(compiled, kept, records))
        return DecodedBatch(count=len(values), groups=tuple(groups), errors=errors)


def decoder(settings: ConversionSettings, schemas: SchemaCache | None, *, part: str) -> JsonSchemaDecoder:
    """`value_format: json_schema`'s decoder (its `ValueFormatSpec.decoder`)."""
    return JsonSchemaDecoder(
        schemas or no_registry("json_schema"),
        subject=settings.value_subject,
        columns=settings.columns,
        part=part,
    )


def compile_json_schema(
    registered: RegisteredSchema, targets: Sequence[ColumnSpec] = (), *, key: bool = False
) -> JsonSchema:
    """A registered JSON Schema made ready to validate and read records with; its numbers that
    `targets` (the mapping's columns) put in a decimal are read as exact text. With `key`, a schema
    whose type is not `object` (`{"type": "string"}`) is read as an object of the one property
    `KEY_VALUE_FIELD` (validated as it is), and no property name is reserved. Raises
    `RecordSchemaError` when it is not a JSON Schema, does not parse, or has references."""
    label = registered.label
    if registered.schema_type.upper() != "JSON":
        raise RecordSchemaError(
            f"{label} is a {registered.schema_type} schema; the mapping reads json_schema"
        )
    if registered.references:
        raise RecordSchemaError(
            f"{label} references other schemas, which json_schema mappings do not read yet"
        )
    try:
        document = json.loads(registered.text)
    except json.JSONDecodeError as exc:
        raise RecordSchemaError(f"JSON Schema {label} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise RecordSchemaError(f"JSON Schema {label} is not an object")
    kind = validators.validator_for(document)
    try:
        kind.check_schema(document)
    except jsonschema_exceptions.SchemaError as exc:
        raise RecordSchemaError(f"{label} is not a valid JSON Schema: {exc.message}") from None
    whole_key = key and not _is_object_schema(document)
    described = {"type": "object", "properties": {KEY_VALUE_FIELD: document}} if whole_key else document
    reserved = () if key else BASE_FIELD_NAMES
    columns = tuple(
        c.model_copy(update={"required": False})
        for c in columns_from_json_schema(described, reserved=reserved)
    )
    by_name = {t.name: t for t in targets}
    exact: set[tuple[str, ...]] = set()
    read = tuple(_as_read(c, by_name.get(c.name), (c.name,), exact) for c in columns)
    struct_type = pa.struct([pa.field(c.name, column_arrow_type(c)) for c in read])
    if not exact:
        return JsonSchema(registered, kind(document), columns, struct_type, whole_key=whole_key)
    return JsonSchema(registered, kind(document), columns, struct_type, read, frozenset(exact), whole_key)


def _is_object_schema(document: dict[str, object]) -> bool:
    """Whether a schema describes objects: its `type` is or includes `object`, or it names none."""
    declared = document.get("type")
    kinds = [t for t in (declared if isinstance(declared, list) else [declared]) if t not in (None, "null")]
    return not kinds or "object" in kinds


_NUMBERS = (ColumnType.LONG, ColumnType.DOUBLE)


def _as_read(
    column: ColumnSpec, target: ColumnSpec | None, path: tuple[str, ...], exact: set[tuple[str, ...]]
) -> ColumnSpec:
    """The column as JSON holds it: `timestamp`/`date` values are strings until conformed, and so
    are numbers `target` (the mapping's column of that name, if any) holds in a decimal (their exact
    text; their paths are added to `exact`)."""
    if column.type in (ColumnType.TIMESTAMP, ColumnType.DATE):
        return ColumnSpec(name=column.name, type=ColumnType.STRING)
    if column.type in _NUMBERS and target is not None and target.type is ColumnType.DECIMAL:
        exact.add(path)
        return ColumnSpec(name=column.name, type=ColumnType.STRING)
    if column.type is ColumnType.STRUCT:
        parts = {f.name: f for f in target.fields} if target is not None else {}
        fields = tuple(_as_read(f, parts.get(f.name), (*path, f.name), exact) for f in column.fields)
        return column.model_copy(update={"fields": fields})
    if column.type is ColumnType.LIST and column.element is not None:
        element = target.element if target is not None else None
        return column.model_copy(update={"element": _as_read(column.element, element, (*path, "[]"), exact)})
    return column


def _exact_numbers(
    value: object, column: ColumnSpec, path: tuple[str, ...], exact: frozenset[tuple[str, ...]]
) -> object:
    """A value decoded with exact numbers as Arrow builds `column` from it: a number at an `exact`
    path as its text, any other `Decimal` as the float the plain reader would have given."""
    if type(value) is decimal.Decimal or type(value) is int:
        return str(value) if path in exact else float(value) if type(value) is decimal.Decimal else value
    if type(value) is dict and column.type is ColumnType.STRUCT:
        return {f.name: _exact_numbers(value.get(f.name), f, (*path, f.name), exact) for f in column.fields}
    if type(value) is list and column.type is ColumnType.LIST and column.element is not None:
        element = column.element
        return [_exact_numbers(e, element, (*path, "[]"), exact) for e in value]
    return value


def _row(schema: JsonSchema, payload: bytes) -> dict[str, object] | str:
    """The payload's object, or why it is not one that validates (its first error, with its path)."""
    try:
        document = _EXACT_JSON.decode(payload) if schema.exact else msgspec.json.decode(payload)
    except msgspec.DecodeError as exc:
        return f"not JSON ({exc})"
    error = next(iter(schema.validator.iter_errors(document)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(the value)"
        return f"at {where}: {error.message}"
    if schema.whole_key:
        return {KEY_VALUE_FIELD: document}
    if not isinstance(document, dict):
        return f"a top-level {type(document).__name__}, not an object"
    return document


def _records(schema: JsonSchema, rows: list[dict[str, object]]) -> tuple[pa.StructArray, dict[int, str]]:
    """The rows as one struct array; a row Arrow cannot hold (an integer beyond 64 bits) is left out
    and named by index."""
    if schema.exact:
        read, exact = schema.read_columns, schema.exact
        projected = [
            {c.name: _exact_numbers(row.get(c.name), c, (c.name,), exact) for c in read} for row in rows
        ]
    else:
        names = [f.name for f in schema.struct_type]
        projected = [{n: row.get(n) for n in names} for row in rows]
    try:
        return pa.array(projected, schema.struct_type), {}
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    kept: list[dict[str, object]] = []
    failed: dict[int, str] = {}
    for index, row in enumerate(projected):
        try:
            pa.array([row], schema.struct_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            failed[index] = f"a value its columns cannot hold: {exc}"
            continue
        kept.append(row)
    return pa.array(kept, schema.struct_type), failed
