"""`value_format: avro`: Avro in Confluent wire format (`wire.py`), schemas from the registry by id.

Records are grouped by schema id; each group is decoded in bulk:

- **checked first** (`avro_skip.py`): one compiled pass walks every payload by its schema and checks
  it is exactly one record (lengths, varints, UTF-8, enum and union indexes, array and map blocks,
  decimal digits, no byte left over). A payload that is not is an `undecodable` dead letter naming
  the schema id, the field, the byte and what is wrong, and is never handed to a reader: a block
  reader cannot tell where a record ends, so one such record would shift every record after it, or
  (`polars-avro` 0.13, on bytes left over in a block) spin for ever; fastavro reads some of them
  wrong too (a negative enum index as the last symbol, an `int` beyond 32 bits), and polars-avro
  others (a union index out of range as another branch, a decimal beyond its precision into the
  column unchecked).
- **fast path** (a Rust-backed reader, `polars-avro`): the group's checked payloads become one Avro
  container block, read at once. The 8-byte guards once written after each record to catch a shift
  are gone: the check proves every record in the block takes exactly its bytes, so they could only
  catch a reader that misreads valid Avro, which the property tests check against fastavro instead.
  A block the reader refuses is halved until the refused records are found, and those are read by
  the general path.
- **general path** (fastavro, record by record): schemas the fast reader cannot read (general unions,
  `uuid`, `time-*` logical types), records the fast reader refused, and records with a map holding a
  key twice (the block reader would keep both entries; fastavro keeps the last, as Java's reader);
  a value its column cannot hold makes that record a dead letter, not the group's run a failure.

Values without the wire prefix are read with `value_subject`'s latest schema when the mapping names
one (Redpanda's `value_schema_latest`), else are `wire_format` dead letters. A schema id the registry
does not have (404) makes its records `unknown_schema` dead letters; a payload that does not decode
with its schema `undecodable` ones, naming the schema id. A registry outage raises
`RegistryUnavailableError` (the run fails transiently; nothing is dead-lettered for it).

A schema's `references` (named types other subjects' versions define) are read through the task's
`SchemaCache` and put in place (`domain/avro_schemas.with_references`); a reference the registry does
not have makes the records `unknown_schema` dead letters naming it.
"""

from __future__ import annotations

import datetime
import io
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.formats.avro_skip import (
    DUPLICATE_KEYS,
    OK,
    SkipProgram,
    compile_skip_program,
)
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch, DecodedGroup
from kafscale_iceberg.dataplane.formats.registered import RegisteredSchemaDecoder
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache, no_registry
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.domain.avro_schemas import (
    as_key_record,
    avro_columns,
    parse_avro_schema,
    with_references,
)
from kafscale_iceberg.domain.record_schemas import RegisteredSchema
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, ConversionSettings
from kafscale_iceberg.domain.schema import BASE_FIELD_NAMES
from kafscale_iceberg.exceptions import RecordSchemaError

_SMALLEST_BLOCK = 16
"""A refused block of at most this many records is read record by record."""
_FAST_UNSUPPORTED = frozenset(
    {"uuid", "time-millis", "time-micros", "timestamp-nanos", "local-timestamp-nanos"}
)


@dataclass(frozen=True)
class AvroSchema:
    """What the decoder keeps per schema id: the parsed schema, its columns and reading plan."""

    registered: RegisteredSchema
    parsed: Any
    program: SkipProgram
    """How its payloads are checked before any reader reads them."""
    columns: tuple[ColumnSpec, ...]
    struct_type: pa.StructType
    container_header: bytes | None
    """The container file's header for the fast path (None: the general path only)."""
    sync: bytes

    @property
    def label(self) -> str:
        """The schema's name in messages (`schema id 7`)."""
        return self.registered.label


class AvroDecoder(RegisteredSchemaDecoder[AvroSchema]):
    """Decodes Avro records in Confluent wire format (see the module docstring)."""

    def _compile_registered(self, registered: RegisteredSchema) -> AvroSchema:
        return compile_avro_schema(registered, self._schemas, key=self._part == "key")

    def decode(self, values: pa.Array) -> DecodedBatch:
        """See `ValueDecoder.decode`."""
        errors: dict[int, tuple[str, str]] = {}
        groups = []
        for compiled, members in self._compiled_groups(values, errors):
            positions = [p for p, _ in members]
            payloads = [payload for _, payload in members]
            rows, failures = _decode_group(compiled, payloads)
            kept = [p for i, p in enumerate(positions) if i not in failures]
            for index, reason in failures.items():
                errors[positions[index]] = (
                    "undecodable",
                    f"the payload does not decode with {compiled.registered.label}: {reason}",
                )
            if kept:
                groups.append(DecodedGroup.of(compiled, kept, rows))
        return DecodedBatch(count=len(values), groups=tuple(groups), errors=errors)


def decoder(settings: ConversionSettings, schemas: SchemaCache | None, *, part: str) -> AvroDecoder:
    """`value_format: avro`'s decoder (its `ValueFormatSpec.decoder`)."""
    return AvroDecoder(schemas or no_registry("avro"), subject=settings.value_subject, part=part)


def compile_avro_schema(
    registered: RegisteredSchema, schemas: SchemaCache, *, key: bool = False
) -> AvroSchema:
    """A registered schema made ready to read records with, its `references` read through `schemas`
    (each subject version once per task). Raises `RecordSchemaError` when it (or a schema it
    references) is not an Avro schema or gives columns Iceberg cannot hold, `SchemaNotFoundError` when
    a reference is not in the registry.

    With `key` (a decoded `key_format`), a schema that is not a record is read as the one-field record
    of a key (`domain/avro_schemas.as_key_record`), and no field name is reserved: the key's columns
    are prefixed `key_`."""
    label = registered.label
    document: Any = _avro_document(registered, schemas, depth=0)
    if key:
        document = as_key_record(document)
    columns = avro_columns(document, schema_name=label, reserved=() if key else BASE_FIELD_NAMES)
    try:
        parsed = fastavro.parse_schema(document)
    except Exception as exc:  # fastavro raises several classes for a bad schema
        raise RecordSchemaError(f"{label} is not a valid Avro schema: {exc}") from None
    try:
        program = compile_skip_program(parsed)
    except RecordSchemaError as exc:
        raise RecordSchemaError(f"{label}: {exc}") from None
    struct_type = pa.struct([pa.field(c.name, column_arrow_type(c, storage=True)) for c in columns])
    header = None
    sync = bytes(range(16))
    if columns and _fast_readable(document, set()):
        # One field holding the record: the same bytes, read as one struct column.
        wrapper = {"type": "record", "name": "KafscaleRecord", "fields": [{"name": "v", "type": document}]}
        header = _container_header(json.dumps(wrapper).encode(), sync)
    return AvroSchema(registered, parsed, program, columns, struct_type, header, sync)


_MAX_REFERENCE_DEPTH = 32


def _avro_document(registered: RegisteredSchema, schemas: SchemaCache, *, depth: int) -> object:
    """`registered`'s schema JSON with its references' named types in place (`with_references`)."""
    label = registered.label
    if registered.schema_type.upper() != "AVRO":
        raise RecordSchemaError(f"{label} is a {registered.schema_type} schema; the mapping reads avro")
    document = parse_avro_schema(registered.text, schema_name=label)
    if not registered.references:
        return document
    if depth >= _MAX_REFERENCE_DEPTH:
        raise RecordSchemaError(f"{label}: references nest deeper than {_MAX_REFERENCE_DEPTH}")
    referenced = [
        _avro_document(schemas.version(r.subject, r.version), schemas, depth=depth + 1)
        for r in registered.references
    ]
    return with_references(document, referenced)


def _fast_readable(schema: object, seen: set[str]) -> bool:
    """Whether the Rust reader reads it as the columns expect (no general union, no `uuid`/`time-*`,
    no `fixed` of size 0)."""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return len(branches) == 1 and _fast_readable(branches[0], seen)
    if isinstance(schema, str):
        return True
    if not isinstance(schema, Mapping):
        return False
    if schema.get("logicalType") in _FAST_UNSUPPORTED:
        return False
    kind = schema.get("type")
    if kind == "record":
        name = str(schema.get("name"))
        if name in seen:
            return False
        seen.add(name)
        return all(_fast_readable(f.get("type"), seen) for f in schema.get("fields", ()))
    if kind == "fixed" and schema.get("size") == 0:
        return False  # the Rust reader panics on a fixed of no bytes
    if kind == "array":
        return _fast_readable(schema.get("items"), seen)
    if kind == "map":
        return _fast_readable(schema.get("values"), seen)
    if isinstance(kind, list | Mapping):
        return _fast_readable(kind, seen)
    return True


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _container_header(schema_json: bytes, sync: bytes) -> bytes:
    entries = [(b"avro.schema", schema_json), (b"avro.codec", b"null")]
    meta = (
        _varint(len(entries))
        + b"".join(_varint(len(k)) + k + _varint(len(v)) + v for k, v in entries)
        + b"\x00"
    )
    return b"Obj\x01" + meta + sync


def _decode_group(schema: AvroSchema, payloads: list[bytes]) -> tuple[pa.StructArray, dict[int, str]]:
    """The group's records (typed by its schema, failures left out) and the failures by index."""
    failures: dict[int, str] = {}
    data = b"".join(payloads)
    sizes = np.fromiter(map(len, payloads), np.int64, len(payloads))
    ends = np.cumsum(sizes)
    statuses, ops, at = schema.program.check(np.frombuffer(data, np.uint8), ends - sizes, ends)
    readable = (statuses == OK) | (statuses == DUPLICATE_KEYS)
    refused = np.flatnonzero(~readable)
    for index in refused.tolist():
        failures[index] = schema.program.reason(
            int(statuses[index]), int(ops[index]), int(at[index]), int(sizes[index])
        )
    pieces: list[pa.StructArray] = []
    if schema.container_header is None:
        pieces.append(_general(schema, payloads, np.flatnonzero(readable), failures))
        return _joined(schema, pieces), failures
    checked = np.flatnonzero(statuses == OK)
    _fast(schema, payloads, checked, pieces, failures, body=data if len(checked) == len(payloads) else None)
    # `pieces` hold the kept records in index order; rows of each piece were appended in order.
    duplicates = np.flatnonzero(statuses == DUPLICATE_KEYS)
    if not len(duplicates):
        return _joined(schema, pieces), failures
    # A map with a key twice: fastavro keeps its last value; the records put back in index order.
    pieces.append(_general(schema, payloads, duplicates, failures))
    order = [i for i in (*checked.tolist(), *duplicates.tolist()) if i not in failures]
    return _joined(schema, pieces).take(np.argsort(order, kind="stable")), failures


def _joined(schema: AvroSchema, pieces: list[pa.StructArray]) -> pa.StructArray:
    pieces = [p for p in pieces if len(p)]
    if not pieces:
        return pa.array([], schema.struct_type)
    if len(pieces) == 1:
        return pieces[0]
    return pa.concat_arrays(
        [p.cast(schema.struct_type) if p.type != schema.struct_type else p for p in pieces]
    )


def _fast(
    schema: AvroSchema,
    payloads: Sequence[bytes],
    indices: np.ndarray,
    pieces: list[pa.StructArray],
    failures: dict[int, str],
    *,
    body: bytes | None = None,
) -> None:
    """Read `indices` of `payloads` (checked ones; `body`: them joined, when at hand) with the Rust
    reader as one block; appends the kept records to `pieces` in index order and the failures to
    `failures`."""
    import polars_avro  # noqa: PLC0415 - heavy (polars): loaded by the tasks that read Avro only

    if not len(indices):
        return
    if body is None:
        body = b"".join([payloads[i] for i in indices.tolist()])
    block = _varint(len(indices)) + _varint(len(body)) + body + schema.sync
    assert schema.container_header is not None
    try:
        table = polars_avro.read_avro(io.BytesIO(schema.container_header + block)).to_arrow()
        if table.num_rows != len(indices):
            raise RecordSchemaError(f"the reader read {table.num_rows} of {len(indices)} records")
    except BaseException as exc:  # the reader panics (pyo3 PanicException) as well as raising
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        if len(indices) <= _SMALLEST_BLOCK:
            pieces.append(_general(schema, payloads, indices, failures))
            return
        half = len(indices) // 2
        _fast(schema, payloads, indices[:half], pieces, failures)
        _fast(schema, payloads, indices[half:], pieces, failures)
        return
    pieces.append(_struct_of(table.column("v").combine_chunks()))


def _struct_of(column: pa.Array) -> pa.StructArray:
    assert isinstance(column, pa.StructArray)
    return column


def _general(
    schema: AvroSchema, payloads: Sequence[bytes], indices: np.ndarray, failures: dict[int, str]
) -> pa.StructArray:
    """Read `indices` of `payloads` with fastavro, record by record; failures noted by index."""
    rows: list[object] = []
    read: list[int] = []
    for index in indices.tolist():
        payload = payloads[index]
        stream = io.BytesIO(payload)
        try:
            record = fastavro.schemaless_reader(stream, schema.parsed, None)
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, ... on bad bytes
            failures[index] = f"{type(exc).__name__}: {exc}" if str(exc) else "the payload ends early"
            continue
        left = len(payload) - stream.tell()
        if left:
            failures[index] = f"{left} bytes left over after the record"
            continue
        try:
            rows.append(_normalized(record, schema.columns))
            read.append(index)
        except (ValueError, TypeError) as exc:
            failures[index] = str(exc)
    try:
        return pa.array(rows, schema.struct_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    # Some value its column cannot hold (a decimal beyond its precision): those records alone fail.
    kept = []
    for index, row in zip(read, rows, strict=True):
        try:
            kept.append(pa.array([row], schema.struct_type))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            failures[index] = f"a value its column cannot hold: {exc}"
    return pa.concat_arrays(kept) if kept else pa.array([], schema.struct_type)


def _normalized(record: object, columns: Sequence[ColumnSpec]) -> dict[str, object]:
    if not isinstance(record, dict):
        raise ValueError(f"a top-level value that is not a record: {type(record).__name__}")
    return {c.name: _value(record.get(c.name), c) for c in columns}


def _value(value: object, column: ColumnSpec) -> object:
    """A fastavro value as Arrow builds `column`'s type from it."""
    if value is None:
        return None
    kind = column.type
    if kind is ColumnType.STRUCT:
        if isinstance(value, dict) and not _is_union_struct(value, column):
            return {f.name: _value(value.get(f.name), f) for f in column.fields}
        return _union_branch(value, column)
    if kind is ColumnType.LIST and column.element is not None:
        element = column.element
        return [_value(v, element) for v in value]  # type: ignore[attr-defined]
    if kind is ColumnType.MAP and column.value is not None:
        entry = column.value
        return [(k, _value(v, entry)) for k, v in value.items()]  # type: ignore[attr-defined]
    if kind is ColumnType.UUID:
        return value.bytes if isinstance(value, uuid.UUID) else uuid.UUID(str(value)).bytes
    if isinstance(value, datetime.time):  # `time-*`: a `time` column (a `long` one of older tables)
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return value


def _is_union_struct(value: dict[str, object], column: ColumnSpec) -> bool:
    """A record value against a union's struct: true when the value is not itself such a struct."""
    return bool(column.fields) and not any(f.name in value for f in column.fields)


_PY_KINDS: Mapping[ColumnType, tuple[type, ...]] = {
    ColumnType.BOOLEAN: (bool,),
    ColumnType.INT: (int,),
    ColumnType.LONG: (int,),
    ColumnType.FLOAT: (float,),
    ColumnType.DOUBLE: (float,),
    ColumnType.STRING: (str,),
    ColumnType.BINARY: (bytes,),
}


def _union_branch(value: object, column: ColumnSpec) -> dict[str, object]:
    """A general union's value as its struct: the first branch whose type takes the value is set."""
    for branch in column.fields:
        kinds = _PY_KINDS.get(branch.type)
        if kinds is not None:
            if type(value) in kinds:
                return {f.name: (_value(value, f) if f is branch else None) for f in column.fields}
            continue
        if branch.type is ColumnType.STRUCT and isinstance(value, dict):
            return {f.name: (_value(value, f) if f is branch else None) for f in column.fields}
        if branch.type in (ColumnType.LIST,) and isinstance(value, list):
            return {f.name: (_value(value, f) if f is branch else None) for f in column.fields}
        if branch.type in (ColumnType.MAP,) and isinstance(value, dict):
            return {f.name: (_value(value, f) if f is branch else None) for f in column.fields}
    raise ValueError(f"a union value {value!r} fits none of its branches")
