"""Mapping columns from record values: one interface, two ways to get there.

- `ScannedColumns` (no validation): the compiled scanner (`json_scan`) finds each column's token in
  every value; Arrow kernels turn the tokens into typed columns. Records the scanner leaves alone
  (`FALLBACK`: syntax errors, invalid UTF-8, non-objects, ...) and tokens that need Python (strings
  with escapes, numbers with a fraction or exponent for integer columns, 19+ digit integers) take the
  per-record rules of `values.py`, so both ways give the same answers.
- `ParsedColumns` (validation on): every value is parsed into a document for `jsonschema`, and the
  columns come from the documents with `values.coerce`.

Both give the columns in mapping order, the records whose value is not a JSON object (with why),
and, for error text, what a record's value of a column was.
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane import json_scan as js
from kafscale_iceberg.dataplane.datetimes import (
    MICROS_PER_DAY,
    READABLE_DAYS,
    READABLE_MILLIS,
    days_from_number,
    expected,
    millis_to_micros,
    parse_datetimes,
)
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.dataplane.values import (
    INT32_RANGE,
    INT64_RANGE,
    MISSING,
    ValueReader,
    coerce_column,
    decimal_of,
    describe_mismatch,
    float_or_none,
    holds_decimal,
    integer_in_range,
    loads_like_go,
)
from kafscale_iceberg.domain.decimals import fit_decimal
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType


class ExtractedColumns(Protocol):
    """The mapping columns of a batch of values."""

    arrays: list[pa.Array]
    errors: dict[int, str]
    documents: list[object] | None

    def describe(self, column: int, row: int) -> str:
        """What row `row`'s value of column `column` was, and why it is not of the column's type."""
        ...

    def present(self, column: int) -> np.ndarray:
        """Per row: whether the value held column `column` (a key with a non-null value).

        A present value whose array entry is null failed to convert to the column's type.
        """
        ...

    def failed(self, column: int) -> np.ndarray:
        """Per row: whether a present value of column `column` (or a value inside it) did not convert."""
        ...


@dataclass
class ParsedColumns:
    """Columns from parsed documents (the per-record path)."""

    arrays: list[pa.Array]
    errors: dict[int, str]
    documents: list[object] | None
    raw: list[list[object]]
    types: tuple[ColumnType, ...]
    inner_failures: list[np.ndarray | None]

    def describe(self, column: int, row: int) -> str:
        """See `ExtractedColumns.describe`."""
        return describe_mismatch(self.raw[column][row], self.types[column])

    def failed(self, column: int) -> np.ndarray:
        """See `ExtractedColumns.failed`."""
        nulls = np.asarray(self.arrays[column].is_null().to_numpy(zero_copy_only=False), dtype=bool)
        failed: np.ndarray = self.present(column) & nulls
        inner = self.inner_failures[column]
        return failed | inner if inner is not None else failed

    def present(self, column: int) -> np.ndarray:
        """See `ExtractedColumns.present`."""
        return np.fromiter(
            (x is not MISSING and x is not None for x in self.raw[column]), bool, len(self.raw[column])
        )


def parse_columns(values: pa.Array, columns: Sequence[ColumnSpec], *, documents: bool) -> ParsedColumns:
    """Columns through the per-record path (`documents=True` also keeps each parsed value)."""
    exact = [c.name for c in columns if holds_decimal(c)]
    read = ValueReader([c.name for c in columns], documents=documents, exact_numbers=exact).read(values)
    coerced = [coerce_column(raw, c) for raw, c in zip(read.raw_columns, columns, strict=True)]
    return ParsedColumns(
        [array for array, _ in coerced],
        read.errors,
        read.documents,
        read.raw_columns,
        tuple(c.type for c in columns),
        [inner for _, inner in coerced],
    )


@dataclass
class ScannedColumns:
    """Columns through the compiled scanner, with the per-record path for what it leaves."""

    arrays: list[pa.Array]
    errors: dict[int, str]
    documents: list[object] | None
    _buffer: np.ndarray
    _kinds: np.ndarray
    _starts: np.ndarray
    _ends: np.ndarray
    _fallback: dict[int, int]
    _parsed: ParsedColumns | None
    _types: tuple[ColumnType, ...]

    def failed(self, column: int) -> np.ndarray:
        """See `ExtractedColumns.failed` (scanned types have no inner values)."""
        nulls = np.asarray(self.arrays[column].is_null().to_numpy(zero_copy_only=False), dtype=bool)
        failed: np.ndarray = self.present(column) & nulls
        return failed

    def present(self, column: int) -> np.ndarray:
        """See `ExtractedColumns.present`."""
        kinds = self._kinds[column]
        present: np.ndarray = (kinds != js.MISSING) & (kinds != js.NULL)
        if self._fallback and self._parsed is not None:
            rows = np.fromiter(self._fallback, np.int64, len(self._fallback))
            present[rows] = self._parsed.present(column)[list(self._fallback.values())]
        return present

    def describe(self, column: int, row: int) -> str:
        """See `ExtractedColumns.describe`."""
        column_type = self._types[column]
        if row in self._fallback and self._parsed is not None:
            return self._parsed.describe(column, self._fallback[row])
        kind = int(self._kinds[column, row])
        if kind == js.MISSING:
            return "missing"
        if kind == js.NULL:
            return "null"
        if kind == js.CONTAINER:
            opening = chr(self._buffer[self._starts[column, row]])
            shown = "an object" if opening == "{" else "an array"
            return f"{shown} is not a valid {column_type.value}"
        text = self._buffer[self._starts[column, row] : self._ends[column, row]].tobytes().decode()
        if kind in (js.STRING, js.ESCAPED_STRING):
            text = f'"{text}"'
        if len(text) > 80:
            text = text[:77] + "..."
        return f"{text} is not a valid {column_type.value}{expected(column_type)}"


SCANNED_TYPES: frozenset[ColumnType] = frozenset(
    {
        ColumnType.BOOLEAN,
        ColumnType.INT,
        ColumnType.LONG,
        ColumnType.FLOAT,
        ColumnType.DOUBLE,
        ColumnType.STRING,
        ColumnType.BINARY,
        ColumnType.TIMESTAMP,
        ColumnType.DATE,
        ColumnType.TIMESTAMPTZ,
        ColumnType.DECIMAL,
    }
)
"""The column types the compiled scanner builds (the Go processor's scalars, and decimals, from their
tokens' exact text); a mapping with another type (nested, uuid) takes the per-record path."""


def scannable(column: ColumnSpec) -> bool:
    """Whether the compiled scanner builds `column` (`SCANNED_TYPES`)."""
    return column.type in SCANNED_TYPES


class ColumnScanner:
    """Builds a mapping's columns from record values with the compiled scanner; reusable per task."""

    def __init__(self, columns: Sequence[ColumnSpec]) -> None:
        """Raises ValueError for a column the scanner does not build (`scannable`)."""
        unscannable = [c.name for c in columns if not scannable(c)]
        if unscannable:
            raise ValueError(f"columns {unscannable} need the per-record path")
        self.columns = tuple(columns)
        encoded = [c.name.encode() for c in self.columns]
        self._names = np.frombuffer(b"".join(encoded), np.uint8) if encoded else np.zeros(0, np.uint8)
        self._name_offsets = np.cumsum([0, *(len(e) for e in encoded)]).astype(np.int64)

    def scan(self, values: pa.Array) -> ScannedColumns:
        """The columns of `values` (a binary array, nullable)."""
        count = len(values)
        buffer, starts, ends = _spans_of(values)
        status, kinds, token_starts, token_ends, integers = js.scan_values(
            buffer, starts, ends, self._names, self._name_offsets
        )
        fallback_rows = np.flatnonzero(status == js.FALLBACK)
        parsed = None
        errors: dict[int, str] = {}
        if fallback_rows.size:
            parsed = parse_columns(values.take(pa.array(fallback_rows)), self.columns, documents=False)
            errors = {int(fallback_rows[i]): reason for i, reason in parsed.errors.items()}
        arrays = []
        for c, column in enumerate(self.columns):
            tokens = _Tokens(buffer, kinds[c], token_starts[c], token_ends[c], integers[c])
            if column.type is ColumnType.DECIMAL:
                array = _decimals(tokens, column)
            else:
                array = _build(column.type, tokens, count)
            if parsed is not None:
                mask = np.zeros(count, bool)
                mask[fallback_rows] = True
                array = pc.replace_with_mask(array, pa.array(mask), parsed.arrays[c].cast(array.type))
            arrays.append(array)
        return ScannedColumns(
            arrays=arrays,
            errors=errors,
            documents=None,
            _buffer=buffer,
            _kinds=kinds,
            _starts=token_starts,
            _ends=token_ends,
            _fallback={int(r): i for i, r in enumerate(fallback_rows.tolist())},
            _parsed=parsed,
            _types=tuple(c.type for c in self.columns),
        )


def _spans_of(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The data buffer of a binary array and each value's [start, end) in it; start -1 for null."""
    count = len(values)
    _, offsets_buffer, data_buffer = values.buffers()
    buffer = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    offsets = np.frombuffer(offsets_buffer, np.int32, count + 1, values.offset * 4).astype(np.int64)
    starts = offsets[:-1].copy()
    ends = offsets[1:].copy()
    if values.null_count:
        starts[np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = -1
    return buffer, starts, ends


def _texts(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray) -> pa.Array:
    """A string array of the token spans where `valid` (null elsewhere); tokens are valid UTF-8."""
    offsets, data = js.gather_spans(buffer, starts, ends, valid)
    count = len(valid)
    null_count = count - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.StringArray.from_buffers(
        count, pa.py_buffer(offsets), pa.py_buffer(data), validity, null_count=null_count
    )


def _python_values(
    buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, *, string: bool
) -> list[object]:
    """Tokens at `rows` as Python values: decoded JSON strings, or numbers (int if integral grammar)."""
    out: list[object] = []
    for r in rows.tolist():
        raw = buffer[starts[r] : ends[r]].tobytes()
        if string:
            out.append(loads_like_go(b'"' + raw + b'"'))
        elif b"." in raw or b"e" in raw or b"E" in raw:
            out.append(float(raw))
        else:
            out.append(int(raw))
    return out


def _strings(buffer: np.ndarray, kinds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    array = _texts(buffer, starts, ends, kinds == js.STRING)
    escaped = np.flatnonzero(kinds == js.ESCAPED_STRING)
    if escaped.size:
        decoded = _python_values(buffer, starts, ends, escaped, string=True)
        mask = np.zeros(len(kinds), bool)
        mask[escaped] = True
        array = pc.replace_with_mask(array, pa.array(mask), pa.array(decoded, pa.string()))
    return array


def _patch(array: pa.Array, rows: np.ndarray, replacements: list[object]) -> pa.Array:
    if not rows.size:
        return array
    mask = np.zeros(len(array), bool)
    mask[rows] = True
    return pc.replace_with_mask(array, pa.array(mask), pa.array(replacements, array.type))


@dataclass(frozen=True)
class _Tokens:
    """One column's tokens across a batch: kinds, spans in `buffer`, and integer values."""

    buffer: np.ndarray
    kinds: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    integers: np.ndarray

    def integer_array(self) -> pa.Array:
        """int64 values of the `INTEGER` tokens, null elsewhere."""
        is_integer = self.kinds == js.INTEGER
        return pa.array(self.integers, pa.int64(), mask=~is_integer)

    def python_numbers(self) -> tuple[np.ndarray, list[object]]:
        """Rows holding `NUMBER` tokens, and those numbers as Python ints or floats."""
        rows = np.flatnonzero(self.kinds == js.NUMBER)
        return rows, _python_values(self.buffer, self.starts, self.ends, rows, string=False)

    def strings(self) -> pa.Array:
        """The string tokens as a string array (escapes decoded), null elsewhere."""
        return _strings(self.buffer, self.kinds, self.starts, self.ends)


def _decimals(tokens: _Tokens, column: ColumnSpec) -> pa.Array:
    """A `decimal(P,S)` column from the number tokens' exact text and numeric strings (no float)."""
    kinds = tokens.kinds
    numbers = _texts(tokens.buffer, tokens.starts, tokens.ends, (kinds == js.INTEGER) | (kinds == js.NUMBER))
    strings = tokens.strings()
    precision, scale = column.precision or 1, column.scale or 0
    fit = fit_decimal
    exact = decimal.Decimal  # a number token's text is JSON number grammar: Decimal reads it exactly
    values = [
        fit(exact(n), precision, scale)
        if n is not None
        else (None if t is None else decimal_of(t, precision, scale))
        for n, t in zip(numbers.to_pylist(), strings.to_pylist(), strict=True)
    ]
    return pa.array(values, column_arrow_type(column))


def _build(column_type: ColumnType, tokens: _Tokens, count: int) -> pa.Array:
    kinds = tokens.kinds
    if column_type is ColumnType.BOOLEAN:
        is_true = kinds == js.TRUE
        return pa.array(is_true, pa.bool_(), mask=~(is_true | (kinds == js.FALSE)))
    if column_type in (ColumnType.INT, ColumnType.LONG):
        low, high = INT32_RANGE if column_type is ColumnType.INT else INT64_RANGE
        ints = tokens.integer_array()
        if column_type is ColumnType.INT:
            ints = pc.if_else(pc.and_(pc.greater_equal(ints, low), pc.less_equal(ints, high)), ints, None)
        rows, numbers = tokens.python_numbers()
        ints = _patch(ints, rows, [integer_in_range(x, low, high) for x in numbers])
        return ints.cast(pa.int32() if column_type is ColumnType.INT else pa.int64())
    if column_type in (ColumnType.FLOAT, ColumnType.DOUBLE):
        numeric = (kinds == js.INTEGER) | (kinds == js.NUMBER)
        try:
            # Arrow's string -> double parsing rounds correctly, like Python's float().
            doubles = _texts(tokens.buffer, tokens.starts, tokens.ends, numeric).cast(pa.float64())
        except pa.ArrowInvalid:  # beyond double range (1e400): Python says inf
            rows = np.flatnonzero(numeric)
            numbers = _python_values(tokens.buffer, tokens.starts, tokens.ends, rows, string=False)
            doubles = _patch(pa.nulls(count, pa.float64()), rows, [float_or_none(x) for x in numbers])
        if column_type is ColumnType.FLOAT:
            return doubles.cast(pa.float32(), safe=False)
        return doubles
    if column_type in (ColumnType.STRING, ColumnType.BINARY):
        strings = tokens.strings()
        return strings if column_type is ColumnType.STRING else strings.cast(pa.binary())
    if column_type is ColumnType.TIMESTAMPTZ:
        return _build(ColumnType.TIMESTAMP, tokens, count).cast(pa.timestamp("us", "UTC"))
    if column_type is ColumnType.TIMESTAMP:
        micros, valid = parse_datetimes(tokens.strings(), require_time=True)
        result = pa.array(micros, pa.int64(), mask=~valid)
        if (kinds == js.INTEGER).any():
            millis = tokens.integer_array()
            in_range = pc.and_(
                pc.greater_equal(millis, READABLE_MILLIS[0]), pc.less_equal(millis, READABLE_MILLIS[1])
            )
            result = pc.coalesce(result, pc.if_else(in_range, pc.multiply(millis, 1000), None))
        rows, numbers = tokens.python_numbers()
        result = _patch(result, rows, [millis_to_micros(x) for x in numbers])
        return result.cast(pa.timestamp("us"))
    if column_type is ColumnType.DATE:
        micros, valid = parse_datetimes(tokens.strings(), require_time=False)
        days = np.floor_divide(micros, MICROS_PER_DAY)
        result = pa.array(days.astype(np.int32), pa.int32(), mask=~valid)
        if (kinds == js.INTEGER).any():
            numbers = tokens.integer_array()
            in_range = pc.and_(
                pc.greater_equal(numbers, READABLE_DAYS[0]), pc.less_equal(numbers, READABLE_DAYS[1])
            )
            result = pc.coalesce(result, pc.if_else(in_range, numbers, None).cast(pa.int32()))
        rows, others = tokens.python_numbers()
        result = _patch(result, rows, [days_from_number(x) for x in others])
        return result.cast(pa.date32())
    raise AssertionError(f"unhandled column type {column_type}")


__all__ = [
    "MISSING",
    "SCANNED_TYPES",
    "ColumnScanner",
    "ExtractedColumns",
    "ParsedColumns",
    "ScannedColumns",
    "parse_columns",
    "scannable",
]
