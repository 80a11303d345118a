"""Decoded records -> table rows and dead-letter rows (pure Arrow; one `RecordConverter` per task).

Rows carry the eight base fields exactly as KafScale's Go processor writes them (`record_id` =
`topic:partition:offset`, topic and partition from the segment's key, `headers` as Go's JSON or
`""`), then the mapping columns extracted from the JSON value (`values.py` has the coercions).

A record is *invalid*, and becomes a dead-letter row instead of a table row, when (first match wins):

1. `invalid_json` - the value is not JSON (or, when the mapping has columns, not a JSON object).
   A null or empty value, or the JSON `null`, is not invalid: every column is null (as in Go).
2. `schema_violation` - `schema_mode` is lenient or strict and the parsed value fails the JSON
   Schema (null and empty values pass, as in the Go processor).
3. `required_column` - a required mapping column is missing, null or not of its type.

With `schema_mode: off` and no mapping columns nothing is parsed and every record is valid. With
`schema_mode: off` and mapping columns, rules 1 and 3 still apply: such a record cannot be
written without inventing or dropping data.

A value present in an *optional* column that does not convert to the column's type (`"soon"` in a
`timestamp` column, `"12"` in a `long`) is never silently null: the record is kept (its `value`
column keeps the bytes), the column is null, and the failure is counted per column
(`ConvertedRecords.conversion_failures`, then the run's counts and `conversion_failures_total`).
With `schema_mode: strict` it is rule 4, `conversion_failure`, and fails the run naming the record
and the column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane.columns import ColumnScanner, ExtractedColumns, parse_columns, scannable
from kafscale_iceberg.dataplane.formats.choice import decoder_for
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.dataplane.headers import go_headers_json
from kafscale_iceberg.dataplane.key_columns import KeyColumnReader
from kafscale_iceberg.dataplane.schemas import DEAD_LETTER_SCHEMA, data_schema
from kafscale_iceberg.dataplane.values import NO_VALUE
from kafscale_iceberg.domain.runs import NESTED_TYPES, ColumnSpec, ConversionSettings, SchemaMode
from kafscale_iceberg.domain.schema import record_id as format_record_id
from kafscale_iceberg.exceptions import InvalidJsonSchemaError


class ErrorKind(StrEnum):
    """`error_kind` of a dead-letter row."""

    INVALID_JSON = "invalid_json"
    SCHEMA_VIOLATION = "schema_violation"
    REQUIRED_COLUMN = "required_column"
    CORRUPT_SEGMENT = "corrupt_segment"
    LFS_DECODE = "lfs_decode"
    LFS_MISSING_BLOB = "lfs_missing_blob"
    LFS_CHECKSUM = "lfs_checksum"
    LFS_TOO_LARGE = "lfs_too_large"
    CONVERSION_FAILURE = "conversion_failure"
    """Strict mode only: an optional column's value did not convert (counted, not invalid, otherwise)."""
    UNROUTED = "unrouted"
    """A routed mapping: the route field is missing or null, or no value matched, and no default table."""
    ROUTE_INVALID = "route_invalid"
    """A routed mapping: the route field is not a string, or its value is not a valid table name."""
    WIRE_FORMAT = "wire_format"
    """A self-described format (`value_format`): no or a wrong magic byte, or not a Connect envelope."""
    UNKNOWN_SCHEMA = "unknown_schema"
    """A registered format: the registry has no schema of the record's id (404)."""
    UNDECODABLE = "undecodable"
    """A self-described format: the payload does not decode with its schema (or does not fit it)."""
    CDC_ENVELOPE = "cdc_envelope"
    """An upsert mapping: the value is not a change event of its `upsert.cdc` (`upsert_changes.py`)."""
    TOMBSTONE = "tombstone"
    """An upsert mapping: a tombstone that deletes nothing (tombstones do not delete, or its record key
    names no key)."""


# Records the LFS stage could not use: dead-lettered in every schema mode, never a strict-mode failure.
_LFS_KINDS = frozenset(
    {ErrorKind.LFS_DECODE, ErrorKind.LFS_MISSING_BLOB, ErrorKind.LFS_CHECKSUM, ErrorKind.LFS_TOO_LARGE}
)


@dataclass(frozen=True)
class InvalidRecord:
    """The lowest-offset invalid record of a batch (what strict mode reports)."""

    offset: int
    record_id: str
    kind: ErrorKind
    error: str
    column: str | None = None
    """The mapping column at fault (`required_column`, `conversion_failure`)."""


@dataclass(frozen=True)
class ConvertedRecords:
    """What a batch of records became: table rows, dead-letter rows, and its first invalid record.

    `conversion_failures`: per column, the kept rows whose present value did not convert (null).
    """

    rows: pa.Table
    dead_letters: pa.Table
    first_invalid: InvalidRecord | None
    conversion_failures: Mapping[str, int] = field(default_factory=dict)
    failed_rows: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Per column counted in `conversion_failures`: the positions in `rows` of those records (to
    count them per table when a route splits the rows)."""
    deleted_keys: pa.Table | None = None
    """An upsert mapping: the records deleting their key (base fields and key columns)."""


class RecordConverter:
    """Converts decoded records of one topic; compiles the JSON Schema once.

    Raises `InvalidJsonSchemaError` from the constructor when the plan's schema is itself invalid.
    """

    def __init__(
        self, *, topic: str, run_id: str, settings: ConversionSettings, schemas: SchemaCache | None = None
    ) -> None:
        """`schemas`: the task's schema cache (a registered `value_format` needs it)."""
        self.topic = topic
        self.run_id = run_id
        self.columns = settings.columns
        self._lfs_columns = settings.lfs_metadata_columns
        self.schema = data_schema(settings.table_columns)
        self._strict = settings.schema_mode is SchemaMode.STRICT
        self._validator: Any = None
        # A self-described value format's decoder (`dataplane/formats/`): its records are checked
        # against their own schemas; the columns come from it instead of the JSON readers below.
        self._decoder = decoder_for(settings, schemas)
        # A decoded `key_format` fills the `key_` columns from the keys (`key_columns.py`).
        self._key_reader = KeyColumnReader(settings, schemas) if settings.key_columns else None
        from_key = {c.name for c in settings.key_columns}
        self._value_columns = tuple(c for c in self.columns if c.name not in from_key)
        if (
            self._decoder is None
            and settings.schema_mode is not SchemaMode.OFF
            and settings.json_schema is not None
        ):
            validator_class = jsonschema.validators.validator_for(settings.json_schema)
            try:
                validator_class.check_schema(settings.json_schema)
            except jsonschema.SchemaError as exc:
                raise InvalidJsonSchemaError(
                    f"topic {topic}: the plan's json_schema is invalid: {exc.message}"
                ) from exc
            self._validator = validator_class(settings.json_schema)
        # The compiled scanner builds the Go processor's scalar types and decimals (the fast path); a
        # mapping with nested or uuid columns takes the per-record path for all its columns.
        scanned = all(scannable(c) for c in self._value_columns)
        json_columns = bool(self._value_columns) and self._decoder is None
        self._scanner = (
            ColumnScanner(self._value_columns)
            if json_columns and self._validator is None and scanned
            else None
        )
        self._parse = json_columns and self._scanner is None
        self._failure_rows: dict[str, np.ndarray] = {}

    def convert(
        self,
        records: pa.Table,
        *,
        partition: int,
        segment_key: str,
        rejected: Mapping[int, tuple[str, str]] | None = None,
        lfs_metadata: Mapping[str, pa.Array] | None = None,
        decoded: DecodedBatch | None = None,
    ) -> ConvertedRecords:
        """Rows and dead-letter rows of `records` (decoded records of `partition`, already in range).

        `rejected` (row -> (error kind, message), from the LFS stage) become dead-letter rows as they
        are; `lfs_metadata` fills the `lfs_*` columns and wins over mapping columns of the same name
        where it has a value (the Go processor's precedence); `decoded`: the records' values already
        decoded (a Debezium envelope's `after`, `dataplane/debezium_envelopes.py`), read instead of
        `value`.
        """
        count = records.num_rows
        offsets = _column(records, "offset")
        prefix = f"{self.topic}:{partition}"
        base: dict[str, pa.Array] = {
            "record_id": pc.binary_join_element_wise(pa.scalar(prefix), offsets.cast(pa.string()), ":"),
            "topic": repeat_string(self.topic, count),
            "partition": pa.array(np.full(count, partition, np.int32)),
            "offset": offsets,
            "timestamp_ms": _column(records, "timestamp_ms"),
            "key": _column(records, "key"),
            "value": _column(records, "value"),
            "headers": go_headers_json(_column(records, "headers")),
        }
        self._failure_rows = {}
        problems: dict[int, tuple[ErrorKind, str]] = {
            row: (ErrorKind(kind), message) for row, (kind, message) in (rejected or {}).items()
        }
        culprits: dict[int, str] = {}
        failures: dict[str, int] = {}
        mapped: list[pa.Array] = []
        if (
            decoded is not None
            or self._decoder is not None
            or self._scanner is not None
            or self._validator is not None
            or self._parse
        ):
            values = base["value"]
            if problems:  # rejected values are dead letters as they are: not parsed, not validated
                values = pc.if_else(_mask(count, problems), pa.nulls(count, values.type), values)
            mapped = self._mapped_columns(values, problems, culprits, failures, lfs_metadata, decoded)
        if self._key_reader is not None:
            mapped = self._with_key_columns(base["key"], mapped, problems, culprits, failures)
        mapped += [
            lfs_metadata[c.name]
            if lfs_metadata is not None
            else pa.nulls(count, self.schema.field(c.name).type)
            for c in self._lfs_columns
        ]
        rows = pa.Table.from_arrays([*base.values(), *mapped], schema=self.schema)
        if not problems:
            return ConvertedRecords(
                rows, DEAD_LETTER_SCHEMA.empty_table(), None, failures, self._failed_rows(None)
            )
        invalid = np.zeros(count, bool)
        invalid_indices = np.fromiter(sorted(problems), np.int64, len(problems))
        invalid[invalid_indices] = True
        dead = self._dead_letters(base, invalid_indices, problems, segment_key)
        checked = np.asarray(
            [i for i in invalid_indices.tolist() if problems[i][0] not in _LFS_KINDS], np.int64
        )
        failed_rows = self._failed_rows(invalid)
        if not len(checked):
            return ConvertedRecords(rows.filter(pa.array(~invalid)), dead, None, failures, failed_rows)
        first = int(checked[np.argmin(offsets.to_numpy()[checked])])
        kind, error = problems[first]
        first_invalid = InvalidRecord(
            offset=offsets[first].as_py(),
            record_id=format_record_id(self.topic, partition, offsets[first].as_py()),
            kind=kind,
            error=error,
            column=culprits.get(first),
        )
        return ConvertedRecords(rows.filter(pa.array(~invalid)), dead, first_invalid, failures, failed_rows)

    def _failed_rows(self, invalid: np.ndarray | None) -> dict[str, np.ndarray]:
        """`_failure_rows` (batch positions) as positions among the kept rows."""
        found, self._failure_rows = self._failure_rows, {}
        if invalid is None:
            return found
        kept_position = np.cumsum(~invalid) - 1
        return {name: kept_position[rows[~invalid[rows]]] for name, rows in found.items()}

    def _mapped_columns(
        self,
        values: pa.Array,
        problems: dict[int, tuple[ErrorKind, str]],
        culprits: dict[int, str],
        failures: dict[str, int],
        lfs_metadata: Mapping[str, pa.Array] | None = None,
        decoded: DecodedBatch | None = None,
    ) -> list[pa.Array]:
        extracted: ExtractedColumns
        kinds: Mapping[int, str] = {}
        columns = self._value_columns
        if decoded is None and self._decoder is not None:
            decoded = self._decoder.decode(values)
        if decoded is not None:
            conformed = conform(decoded, columns)
            extracted, kinds = conformed, conformed.kinds
        elif self._scanner is not None:
            extracted = self._scanner.scan(values)
        else:
            extracted = parse_columns(values, columns, documents=self._validator is not None)
        for index, reason in extracted.errors.items():
            problems[index] = (ErrorKind(kinds.get(index, ErrorKind.INVALID_JSON)), reason)
        if extracted.documents is not None:
            self._validate(extracted.documents, problems)
        arrays = list(extracted.arrays)
        if lfs_metadata:  # LFS metadata wins over a mapping column of the same name (as in Go)
            arrays = [
                pc.coalesce(lfs_metadata[column.name].cast(array.type), array)
                if column.name in lfs_metadata
                else array
                for column, array in zip(columns, arrays, strict=True)
            ]
        self._check_columns(columns, extracted, arrays, problems, culprits, failures)
        return arrays

    def _with_key_columns(
        self,
        keys: pa.Array,
        value_arrays: list[pa.Array],
        problems: dict[int, tuple[ErrorKind, str]],
        culprits: dict[int, str],
        failures: dict[str, int],
    ) -> list[pa.Array]:
        """The mapping's columns in order: the value's (`value_arrays`) and the decoded keys'."""
        assert self._key_reader is not None
        columns = self._key_reader.columns
        extracted, kinds = self._key_reader.read(keys)
        for index, reason in extracted.errors.items():
            if index not in problems:  # the value's own problem is named first
                problems[index] = (
                    ErrorKind(kinds.get(index, ErrorKind.INVALID_JSON)),
                    f"record key: {reason}",
                )
        arrays = list(extracted.arrays)
        self._check_columns(columns, extracted, arrays, problems, culprits, failures)
        by_name = dict(zip([c.name for c in self._value_columns], value_arrays, strict=True))
        by_name.update(zip([c.name for c in columns], arrays, strict=True))
        return [by_name[c.name] for c in self.columns]

    def _check_columns(
        self,
        columns: tuple[ColumnSpec, ...],
        extracted: ExtractedColumns,
        arrays: list[pa.Array],
        problems: dict[int, tuple[ErrorKind, str]],
        culprits: dict[int, str],
        failures: dict[str, int],
    ) -> None:
        """Records whose required column is null are invalid; values that did not convert are counted."""
        for c, (column, array) in enumerate(zip(columns, arrays, strict=True)):
            if column.required and array.null_count:
                nulls = np.flatnonzero(np.asarray(array.is_null().to_numpy(zero_copy_only=False)))
                for index in nulls.tolist():
                    if index not in problems:
                        culprits[index] = column.name
                        problems[index] = (
                            ErrorKind.REQUIRED_COLUMN,
                            f"required column {column.name!r} ({column.type_name}): "
                            f"{extracted.describe(c, index)}",
                        )
        self._count_conversion_failures(columns, extracted, problems, culprits, failures)

    def _count_conversion_failures(
        self,
        columns: tuple[ColumnSpec, ...],
        extracted: ExtractedColumns,
        problems: dict[int, tuple[ErrorKind, str]],
        culprits: dict[int, str],
        failures: dict[str, int],
    ) -> None:
        """Count present values that converted to null in kept rows; in strict mode they are invalid."""
        rejected = list(problems)
        for c, (column, array) in enumerate(zip(columns, extracted.arrays, strict=True)):
            nested = column.type in NESTED_TYPES
            if column.required and not nested:
                continue  # a required scalar's failure already made the record invalid
            if not array.null_count and not nested:
                continue
            failed = extracted.failed(c)
            if rejected:
                failed[rejected] = False
            rows = np.flatnonzero(failed)
            if not rows.size:
                continue
            failures[column.name] = int(rows.size)
            self._failure_rows[column.name] = rows
            if self._strict:
                for index in rows.tolist():
                    if index not in problems:
                        culprits[index] = column.name
                        problems[index] = (
                            ErrorKind.CONVERSION_FAILURE,
                            f"column {column.name!r} ({column.type_name}): {extracted.describe(c, index)}",
                        )

    def _validate(self, documents: list[object], problems: dict[int, tuple[ErrorKind, str]]) -> None:
        validator = self._validator
        for index, document in enumerate(documents):
            if document is NO_VALUE or index in problems:
                continue
            if not validator.is_valid(document):
                error = jsonschema.exceptions.best_match(validator.iter_errors(document))
                where = error.json_path if error is not None else "$"
                message = error.message if error is not None else "invalid"
                problems[index] = (ErrorKind.SCHEMA_VIOLATION, f"{where}: {message}")

    def _dead_letters(
        self,
        base: Mapping[str, pa.Array],
        indices: np.ndarray,
        problems: Mapping[int, tuple[ErrorKind, str]],
        segment_key: str,
    ) -> pa.Table:
        take = pa.array(indices)
        kinds = [problems[i][0].value for i in indices.tolist()]
        errors = [problems[i][1] for i in indices.tolist()]
        count = len(indices)
        arrays = [base[name].take(take) for name in base]
        arrays += [
            pa.array(kinds, pa.string()),
            pa.array(errors, pa.string()),
            repeat_string(self.run_id, count),
            repeat_string(segment_key, count),
            pa.nulls(count, pa.int64()),
        ]
        return pa.Table.from_arrays(arrays, schema=DEAD_LETTER_SCHEMA)


def dead_letter_rows(
    rows: pa.Table, indices: np.ndarray, kinds: list[str], errors: list[str], *, run_id: str, segment_key: str
) -> pa.Table:
    """Dead-letter rows for the `indices` of converted `rows` (their base fields), with their reasons."""
    take = pa.array(indices, pa.int64())
    count = len(indices)
    names = DEAD_LETTER_SCHEMA.names[:8]
    arrays = [rows.column(name).take(take) for name in names]
    arrays += [
        pa.array(kinds, pa.string()),
        pa.array(errors, pa.string()),
        repeat_string(run_id, count),
        repeat_string(segment_key, count),
        pa.nulls(count, pa.int64()),
    ]
    return pa.Table.from_arrays(arrays, schema=DEAD_LETTER_SCHEMA)


def corrupt_segment_row(
    *,
    topic: str,
    partition: int,
    segment_key: str,
    base_offset: int,
    last_offset: int,
    error: str,
    run_id: str,
) -> pa.Table:
    """The one dead-letter row recording a quarantined segment: its identity, offset range and error."""
    row: dict[str, list[Any]] = {
        "record_id": [format_record_id(topic, partition, base_offset)],
        "topic": [topic],
        "partition": [partition],
        "offset": [base_offset],
        "timestamp_ms": [None],
        "key": [None],
        "value": [None],
        "headers": [""],
        "error_kind": [ErrorKind.CORRUPT_SEGMENT.value],
        "error": [error],
        "run_id": [run_id],
        "segment_key": [segment_key],
        "last_offset": [last_offset],
    }
    return pa.Table.from_pydict(row, schema=DEAD_LETTER_SCHEMA)


def repeat_string(value: str, count: int) -> pa.Array:
    """`count` copies of `value` as a plain string array, built from buffers (no object per row)."""
    encoded = value.encode()
    offsets = np.arange(count + 1, dtype=np.int64) * len(encoded)
    if offsets[-1] < 2**31:
        return pa.StringArray.from_buffers(
            count, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(encoded * count)
        )
    return pa.array([value] * count, pa.string())


def _mask(count: int, rows: Mapping[int, object]) -> pa.Array:
    mask = np.zeros(count, bool)
    mask[np.fromiter(rows, np.int64, len(rows))] = True
    return pa.array(mask)


def _column(records: pa.Table, name: str) -> pa.Array:
    column = records.column(name)
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks()
