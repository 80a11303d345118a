"""Record values as JSON, and mapping columns extracted from them with exact coercions.

Parsing is per record with msgspec: without validation it decodes straight into a struct of the
mapping's columns (other keys are checked for syntax and skipped without building objects), with
validation into whole documents for `jsonschema`. What msgspec refuses but Go's `encoding/json`
accepts (invalid UTF-8 or an unpaired `\\uD800` escape inside a string) is re-parsed with the
standard library and becomes U+FFFD per invalid byte / escape, as in Go; `NaN`/`Infinity` are not
JSON. Everything after parsing is a list comprehension or an Arrow kernel per column.

Coercions, column by column (the top-level key with the column's name; anything else is null, and
null in a required column makes the record invalid):

- `boolean`: JSON `true`/`false` only.
- `int` / `long`: JSON integers, parsed as integers (no float64 detour, so longs above 2^53 are
  exact), range-checked (`int` is 32-bit); a number written with a fraction or exponent counts only
  when it is integral and at most 2^53 in magnitude (`1.0`, `1e3`). The Go processor truncates
  `1.9` to 1 and rounds large longs through float64: here both are null.
- `float` / `double`: any JSON number (`float` is rounded to 32 bits; beyond its range it is ±inf).
- `string`: JSON strings only. `binary`: a JSON string, as its UTF-8 bytes (as the Go processor).
- `timestamp` (Iceberg `timestamp`, microseconds, UTC wall time): a date-time string
  `YYYY-MM-DD{T| }HH:MM:SS[.fraction][offset]` - RFC 3339 and the forms people write
  (`2024-01-04 12:28:13`, as in the Kafka Connect sink's pizza events): the offset is `Z`, `+05:30`
  or `+0530` (converted to UTC), or absent (read as UTC wall time, as the Kafka Connect Iceberg sink
  does); any number of fraction digits (digits beyond microseconds are truncated); or a JSON number
  of epoch **milliseconds** (how the Go processor reads numbers; a fraction is rounded to the nearest
  microsecond). The Go processor stores milliseconds in the microsecond column (a 1000x error); this
  does not. Only instants from 0001-01-01 to 9999-12-31 (UTC) convert: what readers can read.
- `date`: `YYYY-MM-DD`, one of those date-times (the UTC date of that instant, correct before 1970;
  the wall date when there is no offset), or a JSON integer number of days since 1970-01-01; years
  0001 to 9999. (`datetimes.py` has these rules, the same for every record format.)

- `timestamptz` (Iceberg `timestamptz`): as `timestamp`, stored as a UTC instant.
- `time` (Iceberg `time`, microseconds since midnight): a string `HH:MM[:SS[.fraction]]` without an
  offset (an offset, a date or a number is not a time of day: null and counted).
- `decimal(P,S)`: a JSON number or a numeric string, read from its exact text (never through a
  binary float: `12345678901234567890.123` lands exact in `decimal(38,10)`), when the column holds
  it exactly (`domain/decimals.fit_decimal`: never rounded, so more fraction digits than S or more
  than P-S integer digits is a conversion failure). Columns with a decimal anywhere inside are read
  with every non-integer number as its exact `Decimal`; their other number parts take it as a float.
- `uuid`: a string `uuid.UUID` reads (canonical `8-4-4-4-12` hex, any case, hyphens optional).
- `struct`: a JSON object, field by field; `list`: a JSON array, element by element; `map`: a JSON
  object, its keys as strings and values converted. Inner values follow the same rules; a mistyped
  inner value is null and counts as a conversion failure of the top-level column.

A value that is present (not missing, not JSON null) but does not convert is null in its column and
counted as a conversion failure of that column (`conversion.py`); it is never silently null.
"""

from __future__ import annotations

import decimal
import json
import re
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final

import msgspec
import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.datetimes import expected, json_dates, json_times, json_timestamps
from kafscale_iceberg.dataplane.schemas import arrow_type, column_arrow_type
from kafscale_iceberg.domain.decimals import decimal_from_text, fit_decimal
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NO_VALUE: Final = _Sentinel("NO_VALUE")
"""The document of a record whose value is null, empty or not JSON: nothing to validate."""
MISSING: Final = msgspec.UNSET
"""A column's raw value when the document has no such top-level key (or is not an object)."""

INT32_RANGE: Final = (-(2**31), 2**31 - 1)
INT64_RANGE: Final = (-(2**63), 2**63 - 1)
_EXACT_FLOAT_INT: Final = 2**53


@dataclass(frozen=True)
class ReadValues:
    """What `ValueReader.read` found in a batch of values.

    `raw_columns[c][i]` is record `i`'s value of column `c`: `MISSING`, None (JSON null) or the JSON
    value. `errors` maps records whose value is not JSON (or, when there are columns, not a JSON
    object) to the reason. `documents` (only when asked for) holds each parsed value, `NO_VALUE`
    for null, empty and erroneous values.
    """

    raw_columns: list[list[object]]
    errors: dict[int, str]
    documents: list[object] | None


class ValueReader:
    """Parses record values as JSON for a fixed set of top-level column names.

    The columns named in `exact_numbers` get every non-integer JSON number as the `Decimal` of its
    text instead of a float (what `decimal` columns, at any depth, need); the others, and the
    documents kept for validation, get floats.
    """

    def __init__(
        self, column_names: Sequence[str], *, documents: bool, exact_numbers: Collection[str] = ()
    ) -> None:
        self._names = tuple(column_names)
        self._documents = documents
        self._exact = [i for i, name in enumerate(self._names) if name in exact_numbers]
        # In rows, an exact column's value is kept as its raw JSON text, then decoded exactly.
        fields = [
            (f"c{i}", msgspec.Raw if i in self._exact and not documents else Any, msgspec.UNSET)
            for i in range(len(self._names))
        ]
        rename = {f"c{i}": name for i, name in enumerate(self._names)}
        self._row_type: Any = msgspec.defstruct("MappedColumns", fields, rename=rename, gc=False)
        self._empty_row = self._row_type()
        self._getters = [attrgetter(f"c{i}") for i in range(len(self._names))]
        self._struct_decoder: Any = msgspec.json.Decoder(self._row_type)
        self._any_decoder: Any = msgspec.json.Decoder()
        self._exact_decoder: Any = msgspec.json.Decoder(float_hook=decimal.Decimal)
        # With documents, the exact columns are read again from the values by a rows reader of their own.
        self._exact_rows = (
            ValueReader([self._names[i] for i in self._exact], documents=False, exact_numbers=exact_numbers)
            if documents and self._exact
            else None
        )

    def read(self, values: pa.Array) -> ReadValues:
        """Parse every value of `values` (binary, nullable); see `ReadValues`."""
        if self._documents:
            return self._read_documents(values.to_pylist())
        return self._read_rows(values.to_pylist())

    def _read_rows(self, values: list[bytes | None]) -> ReadValues:
        decode = self._struct_decoder.decode
        failure = (msgspec.DecodeError, UnicodeDecodeError)
        empty = self._empty_row
        rows: list[Any] = []
        append = rows.append
        errors: dict[int, str] = {}
        fallback: dict[int, dict[str, object]] = {}
        for index, value in enumerate(values):
            if not value:
                append(empty)
                continue
            try:
                append(decode(value))
            except failure:
                append(empty)
                document = self._fallback(index, value, errors)
                if type(document) is dict:
                    fallback[index] = document
        raw_columns = []
        exact_fallback = {i: _exact_document(values[i]) for i in fallback} if self._exact else {}
        for c, (name, getter) in enumerate(zip(self._names, self._getters, strict=True)):
            raw: list[object] = list(map(getter, rows))
            exact = c in self._exact
            if exact:
                raw = [MISSING if x is MISSING else self._decode_exactly(x) for x in raw]
            for index, document in (exact_fallback if exact else fallback).items():
                raw[index] = document.get(name, MISSING)
            raw_columns.append(raw)
        return ReadValues(raw_columns, errors, None)

    def _read_documents(self, values: list[bytes | None]) -> ReadValues:
        decode = self._any_decoder.decode
        failure = (msgspec.DecodeError, UnicodeDecodeError)
        documents: list[object] = []
        append = documents.append
        errors: dict[int, str] = {}
        for index, value in enumerate(values):
            if not value:
                append(NO_VALUE)
                continue
            try:
                append(decode(value))
            except failure:
                document = self._fallback(index, value, errors)
                append(NO_VALUE if index in errors else document)
        if self._names:
            for index, document in enumerate(documents):
                if document is not NO_VALUE and document is not None and type(document) is not dict:
                    errors[index] = _not_an_object(document)
        objects = [d if type(d) is dict else _NO_KEYS for d in documents]
        raw_columns: list[list[object]] = [[o.get(name, MISSING) for o in objects] for name in self._names]
        if self._exact_rows is not None:
            exact = self._exact_rows._read_rows(values)
            for c, column in zip(self._exact, exact.raw_columns, strict=True):
                raw_columns[c] = [
                    MISSING if type(o) is not dict else x for o, x in zip(objects, column, strict=True)
                ]
        return ReadValues(raw_columns, errors, documents)

    def _decode_exactly(self, raw: Any) -> object:
        """An exact column's raw JSON text (syntax already checked) as a value with exact numbers."""
        try:
            return self._exact_decoder.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):  # invalid UTF-8 in a string: as Go reads it
            return loads_like_go(bytes(raw), exact_numbers=True)

    def _fallback(self, index: int, value: bytes, errors: dict[int, str]) -> object:
        """Parse what msgspec refused; record an error unless it is a JSON object or null."""
        try:
            document = loads_like_go(value)
        except ValueError as exc:
            errors[index] = f"value is not JSON: {exc}"
            return NO_VALUE
        if self._names and document is not None and type(document) is not dict:
            errors[index] = _not_an_object(document)
        return document


_NO_KEYS: Final[dict[str, object]] = {}


def _not_an_object(document: object) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return f"value is {kinds.get(type(document), 'not an object')}, not a JSON object: columns need an object"


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


def loads_like_go(value: bytes, *, exact_numbers: bool = False) -> object:
    """Parse JSON as Go does where msgspec refuses: invalid UTF-8 and unpaired surrogate escapes
    inside strings become U+FFFD; with `exact_numbers`, non-integer numbers are `Decimal`s of their
    text. Raises ValueError for what is not JSON."""
    text = value.decode("utf-8", "surrogateescape")
    parse_float = decimal.Decimal if exact_numbers else float
    document = json.loads(text, parse_constant=_reject_constant, parse_float=parse_float)
    return _replace_lone_surrogates(document)


def _exact_document(value: bytes | None) -> dict[str, object]:
    """A value msgspec refused, parsed with exact numbers (it parsed before, as an object)."""
    document = loads_like_go(value, exact_numbers=True) if value else None
    return document if type(document) is dict else _NO_KEYS


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_lone_surrogates(document: object) -> object:
    if isinstance(document, str):
        return _LONE_SURROGATE.sub("\ufffd", document)
    if isinstance(document, dict):
        return {_replace_lone_surrogates(k): _replace_lone_surrogates(v) for k, v in document.items()}
    if isinstance(document, list):
        return [_replace_lone_surrogates(v) for v in document]
    return document


def coerce(raw: Sequence[object], column_type: ColumnType) -> pa.Array:
    """The column of `column_type` from raw JSON values: null where missing, null or mistyped."""
    return _COERCERS[column_type](raw)


_SHOW_EXACT: Final = msgspec.json.Encoder(decimal_format="number", enc_hook=str)


def describe_mismatch(value: object, column_type: ColumnType) -> str:
    """Why `value` did not become a `column_type` (for dead-letter error text)."""
    if value is MISSING:
        return "missing"
    if value is None:
        return "null"
    try:
        shown = json.dumps(value, ensure_ascii=False)
    except TypeError:  # exact numbers (`Decimal`), shown as the numbers they are
        shown = _SHOW_EXACT.encode(value).decode()
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{shown} is not a valid {column_type.value}{expected(column_type)}"


def _booleans(raw: Sequence[object]) -> pa.Array:
    return pa.array([x if x is True or x is False else None for x in raw], pa.bool_())


def integer_from_float(x: float, low: int, high: int) -> int | None:
    """`x` as an integer in [low, high] when it is integral and exact (at most 2^53), else None."""
    if x.is_integer() and abs(x) <= _EXACT_FLOAT_INT:
        value = int(x)
        return value if low <= value <= high else None
    return None


def integer_in_range(x: object, low: int, high: int) -> int | None:
    """A JSON number as an integer in [low, high]: an int in range, or an integral float (at most
    2^53, `integer_from_float`); None otherwise."""
    if type(x) is int:
        return x if low <= x <= high else None
    if type(x) is float:
        return integer_from_float(x, low, high)
    return None


def _integers(low: int, high: int, arrow: pa.DataType) -> Callable[[Sequence[object]], pa.Array]:
    def convert(raw: Sequence[object]) -> pa.Array:
        return pa.array([integer_in_range(x, low, high) for x in raw], arrow)

    return convert


def float_or_none(x: object) -> float | None:
    """A JSON number as a float; None for an integer beyond float64's range."""
    try:
        return float(x)  # type: ignore[arg-type]
    except OverflowError:  # an integer beyond float64 (only reachable through the stdlib fallback)
        return None


def _floats(arrow: pa.DataType) -> Callable[[Sequence[object]], pa.Array]:
    def convert(raw: Sequence[object]) -> pa.Array:
        return pa.array(
            [x if type(x) is float else (float_or_none(x) if type(x) is int else None) for x in raw],
            arrow,
        )

    return convert


def _strings(raw: Sequence[object]) -> pa.Array:
    return pa.array([x if type(x) is str else None for x in raw], pa.string())


def _binaries(raw: Sequence[object]) -> pa.Array:
    return pa.array([x.encode() if type(x) is str else None for x in raw], pa.binary())


_COERCERS: dict[ColumnType, Callable[[Sequence[object]], pa.Array]] = {
    ColumnType.BOOLEAN: _booleans,
    ColumnType.INT: _integers(*INT32_RANGE, arrow_type(ColumnType.INT)),
    ColumnType.LONG: _integers(*INT64_RANGE, arrow_type(ColumnType.LONG)),
    ColumnType.FLOAT: _floats(arrow_type(ColumnType.FLOAT)),
    ColumnType.DOUBLE: _floats(arrow_type(ColumnType.DOUBLE)),
    ColumnType.STRING: _strings,
    ColumnType.BINARY: _binaries,
    ColumnType.TIMESTAMP: json_timestamps,
    ColumnType.DATE: json_dates,
    ColumnType.TIME: json_times,
}


# -- columns of types the compiled scanner does not build: per value, in Python ---------------------

_FAILED: Final = _Sentinel("FAILED")


def holds_decimal(column: ColumnSpec) -> bool:
    """Whether `column` is a decimal or has one inside (it is then read with exact numbers)."""
    parts = [*column.fields, column.element, column.value]
    return column.type is ColumnType.DECIMAL or any(holds_decimal(p) for p in parts if p is not None)


def coerce_column(raw: Sequence[object], column: ColumnSpec) -> tuple[pa.Array, np.ndarray | None]:
    """The column `column` from raw JSON values, and (for nested types) the rows where an *inner*
    value did not convert (None when no row has one); see the module docstring for each type."""
    if column.type in _COERCERS:
        return _COERCERS[column.type](raw), None
    if column.type is ColumnType.TIMESTAMPTZ:
        return json_timestamps(raw).cast(pa.timestamp("us", "UTC")), None
    convert = _converter(column)
    values: list[object] = []
    inner = np.zeros(len(raw), bool)
    for row, x in enumerate(raw):
        if x is None or x is MISSING:
            values.append(None)
            continue
        failures: list[bool] = []
        value = convert(x, failures)
        values.append(None if value is _FAILED else value)
        if failures:
            inner[row] = True
    arrow = column_arrow_type(column)
    built = pa.array(values, column_arrow_type(column, storage=True))  # uuids as binary(16), then cast
    return (built if built.type == arrow else built.cast(arrow)), (inner if inner.any() else None)


_Convert = Callable[[object, list[bool]], object]


def _converter(column: ColumnSpec) -> _Convert:
    """A function from a JSON value to the Python value Arrow builds `column`'s type from, `_FAILED`
    when it does not convert at this level; failures below it are nulled and noted in the list."""
    kind = column.type
    if kind is ColumnType.STRUCT:
        parts = [(f.name, _nullable(_converter(f))) for f in column.fields]

        def struct(x: object, failures: list[bool]) -> object:
            if type(x) is not dict:
                return _FAILED
            return {name: part(x.get(name), failures) for name, part in parts}

        return struct
    if kind is ColumnType.LIST and column.element is not None:
        element = _nullable(_converter(column.element))

        def array(x: object, failures: list[bool]) -> object:
            if type(x) is not list:
                return _FAILED
            return [element(e, failures) for e in x]

        return array
    if kind is ColumnType.MAP and column.value is not None:
        entry = _nullable(_converter(column.value))

        def mapping(x: object, failures: list[bool]) -> object:
            if type(x) is not dict:
                return _FAILED
            return [(key, entry(v, failures)) for key, v in x.items()]

        return mapping
    if kind is ColumnType.DECIMAL:
        return _decimal_converter(column.precision or 1, column.scale or 0)
    if kind is ColumnType.UUID:
        return _uuid
    scalar = _scalar_converter(kind)
    return lambda x, failures: scalar(x)


def _nullable(convert: _Convert) -> _Convert:
    """`convert` inside a nested value: null stays null, a failure becomes null and is noted."""

    def inner(x: object, failures: list[bool]) -> object:
        if x is None or x is MISSING:
            return None
        value = convert(x, failures)
        if value is _FAILED:
            failures.append(True)
            return None
        return value

    return inner


def _scalar_converter(kind: ColumnType) -> Callable[[object], object]:
    """One value of a scalar type by the same rules as the column coercions above."""
    if kind in (ColumnType.TIMESTAMP, ColumnType.TIMESTAMPTZ, ColumnType.DATE):
        physical = pa.int32() if kind is ColumnType.DATE else pa.int64()
        column_kind = ColumnType.DATE if kind is ColumnType.DATE else ColumnType.TIMESTAMP

        def moment(x: object) -> object:
            if type(x) is decimal.Decimal:
                x = float(x)
            value = _COERCERS[column_kind]([x]).cast(physical)[0].as_py()
            return _FAILED if value is None else value

        return moment
    coerce_one = _COERCERS[kind]

    def scalar(x: object) -> object:
        if type(x) is decimal.Decimal:  # beside a decimal, in a column read with exact numbers
            x = float(x)
        value = coerce_one([x])[0].as_py()
        return _FAILED if value is None else value

    return scalar


def decimal_of(x: object, precision: int, scale: int) -> decimal.Decimal | None:
    """A JSON value (an exact number: int or `Decimal`, or a numeric string) as a `decimal(P,S)`
    value, exactly (`domain.decimals.fit_decimal`); None when it is not one or does not fit."""
    if type(x) is decimal.Decimal or type(x) is int:
        number: decimal.Decimal | int | None = x
    elif type(x) is str:
        number = decimal_from_text(x)
    else:
        return None  # a float never arrives here: decimal columns are read without floats
    return None if number is None else fit_decimal(number, precision, scale)


def _decimal_converter(precision: int, scale: int) -> _Convert:
    def convert(x: object, failures: list[bool]) -> object:
        fitted = decimal_of(x, precision, scale)
        return _FAILED if fitted is None else fitted

    return convert


def _uuid(x: object, failures: list[bool]) -> object:
    if type(x) is not str:
        return _FAILED
    try:
        return uuid.UUID(x).bytes
    except ValueError:
        return _FAILED
