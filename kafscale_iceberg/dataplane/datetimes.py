"""Dates and timestamps: one rule for what a value means and which values a table may hold.

**What a number means.** A plain number (no unit of its own) in a `timestamp`/`timestamptz` column
is epoch **milliseconds** (a fraction rounded to the nearest microsecond), whatever the record format:
JSON (`values.py`, `columns.py`), and an Avro `long`, Protobuf `int64`, JSON Schema `integer` or
Connect `int64` field projected onto such a column (`temporal_column`, called by
`formats/decoding.conform_array`). That is Kafka's convention for record timestamps, and what the
Iceberg Kafka Connect sink's `RecordConverter` does with a `Number` (`convertOffsetDateTime`,
`convertLocalDateTime`: `millis * 1000` microseconds, apache/iceberg `kafka-connect`). In a `date`
column a plain integer is days since 1970-01-01 (the sink's `convertDateValue` too). A field that
carries its unit keeps it: Avro `timestamp-millis`/`-micros`, Connect `Timestamp`, Protobuf
`Timestamp`, Debezium's types arrive typed and are only range-checked here.

**Which instants a table may hold: `READABLE_MICROS`, 0001-01-01T00:00:00 to
9999-12-31T23:59:59.999999 UTC, and the dates in it (`READABLE_DAYS`)**, the SQL standard's range.
Iceberg's int64 microseconds reach about year 294,247, but readers do not (measured here, see
`docs/configuration.md`, "Column types"): pyarrow's `as_py`/`to_pylist` (so pyiceberg's rows) raise
`OverflowError` on year 10000, `to_pandas()` raises `ValueError`, Spark prints `+10000-01-01` but its
`collect()` into Python raises, and Python's `datetime` stops at 9999. A value
outside is a conversion failure of its column, counted (`lenient`) or failing the run (`strict`),
never written: ISO strings, JSON numbers and every decoder's fields take the same check, so a
microsecond value sent as milliseconds (year ~50,000) is caught, not landed.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.domain.runs import ColumnType

MICROS_PER_DAY: Final = 86_400_000_000
READABLE_MICROS: Final = (-62_135_596_800_000_000, 253_402_300_799_999_999)
"""Epoch microseconds of 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999 (see the docstring)."""
READABLE_DAYS: Final = (-719_162, 2_932_896)
"""Days since 1970-01-01 of 0001-01-01 and 9999-12-31."""
READABLE_MILLIS: Final = (READABLE_MICROS[0] // 1000, READABLE_MICROS[1] // 1000)
"""The epoch milliseconds whose microseconds are in `READABLE_MICROS`."""
_INSTANT: Final = "a date-time or epoch milliseconds, 0001-01-01T00:00:00 to 9999-12-31T23:59:59.999999 UTC"
_EXPECTED: Final = {
    ColumnType.TIMESTAMP: _INSTANT,
    ColumnType.TIMESTAMPTZ: _INSTANT,
    ColumnType.DATE: "a date or days since 1970-01-01, 0001-01-01 to 9999-12-31",
}
_UNIT_MICROS: Final = {"s": 1_000_000, "ms": 1000, "us": 1}
# RFC 3339 plus what people write: a space for the `T`, no offset (UTC wall time), `+0530` without
# the colon. The date alone matches too (date columns take it; timestamp columns require the time).
_DATETIME: Final = (
    r"^(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})"
    r"(?:[Tt ](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?P<f>\.\d+)?(?P<z>[Zz]|[+-]\d{2}:?\d{2})?)?$"
)
# On a string `_DATETIME` matched, whether it ends in an offset (a date alone never does).
_ENDS_IN_OFFSET: Final = r"(?:[Zz]|[+-]\d{2}:?\d{2})$"


def expected(column_type: ColumnType) -> str:
    """What a column of `column_type` takes, for the text of a conversion failure (`""` if nothing
    to add to the type's name)."""
    found = _EXPECTED.get(column_type)
    return f" ({found})" if found else ""


def readable_micros(micros: np.ndarray) -> np.ndarray:
    """Per value: whether epoch microseconds are in `READABLE_MICROS`."""
    low, high = READABLE_MICROS
    return np.asarray((micros >= low) & (micros <= high), bool)


def readable_days(days: np.ndarray) -> np.ndarray:
    """Per value: whether days since 1970-01-01 are in `READABLE_DAYS`."""
    low, high = READABLE_DAYS
    return np.asarray((days >= low) & (days <= high), bool)


def millis_to_micros(x: object) -> int | None:
    """A JSON number of epoch milliseconds as epoch microseconds (None if not a number or outside
    `READABLE_MICROS`; a fraction is rounded to the nearest microsecond)."""
    if type(x) is int:
        micros = x * 1000
    elif type(x) is float and abs(x) <= READABLE_MILLIS[1] + 1:  # NaN and inf fail the comparison
        micros = int(x) * 1000 if x.is_integer() else round(x * 1000)
    else:
        return None
    return micros if READABLE_MICROS[0] <= micros <= READABLE_MICROS[1] else None


def days_from_number(x: object) -> int | None:
    """A JSON number of days since 1970-01-01, when integral and in `READABLE_DAYS`, else None."""
    low, high = READABLE_DAYS
    if type(x) is int:
        return x if low <= x <= high else None
    if type(x) is float and x.is_integer() and low <= x <= high:
        return int(x)
    return None


def json_timestamps(raw: Sequence[object]) -> pa.Array:
    """A `timestamp` column from raw JSON values: date-time strings or epoch milliseconds."""
    strings = pa.array([x if type(x) is str else None for x in raw], pa.string())
    micros, valid = parse_datetimes(strings, require_time=True)
    from_strings = pa.array(micros, pa.int64(), mask=~valid)
    if _has_numbers(raw):
        from_numbers = pa.array([millis_to_micros(x) for x in raw], pa.int64())
        from_strings = pc.coalesce(from_strings, from_numbers)
    return from_strings.cast(pa.timestamp("us"))


def _has_numbers(raw: Sequence[object]) -> bool:
    return any(type(x) is int or type(x) is float for x in raw)


def json_dates(raw: Sequence[object]) -> pa.Array:
    """A `date` column from raw JSON values: dates, date-times (their UTC date) or days."""
    strings = pa.array([x if type(x) is str else None for x in raw], pa.string())
    micros, valid = parse_datetimes(strings, require_time=False)
    days = np.floor_divide(micros, MICROS_PER_DAY)
    from_strings = pa.array(days.astype(np.int32, copy=False), pa.int32(), mask=~valid)
    if _has_numbers(raw):
        from_numbers = pa.array([days_from_number(x) for x in raw], pa.int32())
        from_strings = pc.coalesce(from_strings, from_numbers)
    return from_strings.cast(pa.date32())


def json_times(raw: Sequence[object]) -> pa.Array:
    """A `time` column from raw JSON values: `HH:MM[:SS[.fraction]]` strings."""
    return pa.array([time_of_day_micros(x) for x in raw], pa.int64()).cast(pa.time64("us"))


def parse_datetimes(strings: pa.Array, *, require_time: bool) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized date-time (and, unless `require_time`, `YYYY-MM-DD`) parsing to UTC epoch µs.

    Accepted: `YYYY-MM-DD{T|t| }HH:MM:SS[.fraction][Z|z|+HH:MM|+HHMM]`; without an offset the value
    is UTC wall time. Returns `(micros, valid)`; `micros` is meaningless where `valid` is False
    (null, no match, an impossible date/time such as February 30, hour 24, second 60 or an
    offset hour of 24, or an instant outside `READABLE_MICROS`, e.g. `0000-12-31` or
    `9999-12-31T23:00:00-05:00`).

    The usual case takes Arrow's ISO-8601 cast on the strings the strict pattern matched (Arrow
    refuses the same impossible values): one cast for the values with an offset, one for those
    without (only when there are such values). When a cast refuses anything (more than 6 fraction
    digits, lower-case `t`/`z`, an impossible date), the whole batch takes the exact slow path.
    """
    count = len(strings)
    if strings.null_count == count:  # also when empty
        return np.zeros(count, np.int64), np.zeros(count, bool)
    parsed = _parse_datetimes_with_arrow(strings, require_time=require_time)
    if parsed is None:
        parsed = _parse_datetimes_exactly(strings, require_time=require_time)
    micros, valid = parsed
    return micros, valid & readable_micros(micros)


def _flags(array: pa.Array) -> np.ndarray:
    return np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _parse_datetimes_with_arrow(
    strings: pa.Array, *, require_time: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    valid = _flags(pc.match_substring_regex(strings, _DATETIME))
    lengths = np.asarray(pc.utf8_length(strings).fill_null(0).to_numpy(zero_copy_only=False))
    date_only = valid & (lengths == 10)
    if require_time:
        valid &= ~date_only
        date_only[:] = False
    try:
        if date_only.any():
            if not np.array_equal(date_only, valid):
                return None
            days = pc.cast(pc.if_else(pa.array(valid), strings, None), pa.date32()).cast(pa.int32())
            micros = np.asarray(days.fill_null(0).to_numpy(), dtype=np.int64) * MICROS_PER_DAY
            return micros, valid
        if not valid.any():
            return np.zeros(len(strings), np.int64), valid
        parsed = _parse_zoned_and_wall(strings, valid)
    except pa.ArrowInvalid:
        return None
    micros = np.asarray(parsed.fill_null(0).to_numpy(), dtype=np.int64)
    return micros, valid


def _parse_zoned_and_wall(strings: pa.Array, valid: np.ndarray) -> pa.Array:
    """Epoch µs of the `valid` date-times, the ones with an offset and the ones without (UTC wall
    time) cast apart, as Arrow's parser takes one kind per cast. Raises `pa.ArrowInvalid`.

    Which kind a value is, is decided before casting: a cast that fails costs 100x one that does
    not (Arrow's error path), so no cast is ever tried on the wrong kind. `Z` (the usual RFC 3339
    ending) is one cheap suffix test; only the others take the offset pattern.
    """
    zoned = valid & _flags(pc.ends_with(strings, "Z"))
    others = valid & ~zoned
    if others.any():
        zoned |= others & _flags(pc.match_substring_regex(strings, _ENDS_IN_OFFSET))
    wall = valid & ~zoned
    parsed = pa.nulls(len(strings), pa.int64())
    if zoned.any():
        parsed = pc.cast(pc.if_else(pa.array(zoned), strings, None), pa.timestamp("us", "UTC")).cast(
            pa.int64()
        )
    if wall.any():
        walls = pc.cast(pc.if_else(pa.array(wall), strings, None), pa.timestamp("us")).cast(pa.int64())
        parsed = pc.coalesce(parsed, walls)
    return parsed


def _parse_datetimes_exactly(strings: pa.Array, *, require_time: bool) -> tuple[np.ndarray, np.ndarray]:
    parts = pc.extract_regex(strings, _DATETIME)
    valid = np.asarray(parts.is_valid().to_numpy(zero_copy_only=False), dtype=bool)

    def number(name: str, default: str = "0") -> np.ndarray:
        field = pc.struct_field(parts, name).fill_null(default)
        field = pc.if_else(pc.equal(field, ""), default, field)
        return np.asarray(field.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)

    year, month, day = number("y"), number("mo", "1"), number("d", "1")
    hour, minute, second = number("h"), number("mi"), number("s")
    if require_time:
        valid &= _flags(pc.not_equal(pc.struct_field(parts, "h").fill_null(""), ""))
    fraction = pc.utf8_rpad(pc.utf8_slice_codeunits(pc.struct_field(parts, "f").fill_null(""), 1, 7), 6, "0")
    micros_of_second = np.asarray(fraction.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    # `+HH:MM`, `+HHMM`, `Z` or nothing (UTC wall time), all as `+HHMM`.
    zone = pc.replace_substring(pc.struct_field(parts, "z").fill_null(""), ":", "")
    zone = pc.if_else(pc.or_(pc.equal(zone, ""), pc.equal(pc.utf8_upper(zone), "Z")), "+0000", zone)
    zone_sign = np.where(np.asarray(pc.starts_with(zone, "-").to_numpy(zero_copy_only=False)), -1, 1)
    zone_hours = np.asarray(pc.utf8_slice_codeunits(zone, 1, 3).cast(pa.int64()).to_numpy(), dtype=np.int64)
    zone_minutes = np.asarray(pc.utf8_slice_codeunits(zone, 3, 5).cast(pa.int64()).to_numpy(), dtype=np.int64)

    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_index = np.clip(month, 1, 12) - 1
    days_in_month = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)[month_index]
    days_in_month = days_in_month + ((month == 2) & leap)
    valid &= (month >= 1) & (month <= 12) & (day >= 1) & (day <= days_in_month)
    valid &= (hour < 24) & (minute < 60) & (second < 60) & (zone_hours < 24) & (zone_minutes < 60)

    days = days_from_civil(year, month, day)
    offset_minutes = zone_sign * (zone_hours * 60 + zone_minutes)
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60
    return seconds * 1_000_000 + micros_of_second, valid


def days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm, vectorized)."""
    y = year - (month <= 2)
    era = np.floor_divide(y, 400)
    year_of_era = y - era * 400
    day_of_year = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    result: np.ndarray = era * 146_097 + day_of_era - 719_468
    return result


def time_of_day_micros(x: object) -> int | None:
    """A JSON string `HH:MM[:SS[.fraction]]` as microseconds since midnight, else None."""
    if type(x) is not str:
        return None
    try:
        moment = datetime.time.fromisoformat(x)
    except ValueError:
        return None
    if moment.tzinfo is not None:
        return None
    return ((moment.hour * 60 + moment.minute) * 60 + moment.second) * 1_000_000 + moment.microsecond


TEMPORAL_TYPES: Final = frozenset({ColumnType.TIMESTAMP, ColumnType.TIMESTAMPTZ, ColumnType.DATE})
"""The column types whose values `temporal_column` makes from decoded fields."""


def temporal_column(source: pa.Array, kind: ColumnType, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """A decoded field (`source`, typed by the record's schema) as a `timestamp`, `timestamptz` or
    `date` column (`kind`, Arrow type `target`), and per value whether a present value did not
    convert (it is then null): the module's rule for every record format.

    An integer field is epoch milliseconds (days in a `date` column), a floating one too (rounded to
    the microsecond, as JSON's numbers); a timestamp or date field keeps its unit; text is a
    date-time (or, in a `date` column, a date) read as JSON's are (`parse_datetimes`). A value
    outside `READABLE_MICROS` (`READABLE_DAYS`), or of any other type, does not convert.
    """
    if _already_readable(source, kind):  # the usual case: a typed field, every value in range
        return source.cast(target), np.zeros(len(source), bool)
    valid = np.asarray(source.is_valid().to_numpy(zero_copy_only=False), bool)
    micros, converted = _decoded_micros(source, date=kind is ColumnType.DATE)
    converted &= valid
    if kind is ColumnType.DATE:
        days = np.floor_divide(micros, MICROS_PER_DAY)
        converted &= readable_days(days)
        column = pa.array(days.astype(np.int32), pa.int32(), mask=~converted).cast(target)
    else:
        converted &= readable_micros(micros)
        column = pa.array(micros, pa.int64(), mask=~converted).cast(target)
    return column, valid & ~converted


def _already_readable(source: pa.Array, kind: ColumnType) -> bool:
    """Whether `source` is microseconds (days, for a date) whose values are all readable: one
    min/max pass instead of a conversion."""
    if kind is ColumnType.DATE:
        if not pa.types.is_date32(source.type):
            return False
        low, high = READABLE_DAYS
    elif pa.types.is_timestamp(source.type) and source.type.unit == "us":
        low, high = READABLE_MICROS
    else:
        return False
    if source.null_count == len(source):
        return True
    extremes = pc.min_max(source.view(pa.int32() if kind is ColumnType.DATE else pa.int64()))
    return bool(low <= extremes["min"].as_py() and extremes["max"].as_py() <= high)


def _decoded_micros(source: pa.Array, *, date: bool) -> tuple[np.ndarray, np.ndarray]:
    """Epoch microseconds of a decoded field's values, and per value whether it is one (a value
    whose microseconds would leave `READABLE_MICROS` far behind is not: nothing wraps)."""
    kind = source.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return parse_datetimes(source, require_time=False)
    if pa.types.is_integer(kind):
        return _scaled(source, MICROS_PER_DAY if date else 1000, integral=True)
    if pa.types.is_floating(kind):
        return _scaled(source, MICROS_PER_DAY if date else 1000, integral=date)
    if pa.types.is_date32(kind):
        return _scaled(source.cast(pa.int32()), MICROS_PER_DAY, integral=True)
    if pa.types.is_date64(kind):
        return _scaled(source.cast(pa.int64()), 1000, integral=True)
    if pa.types.is_timestamp(kind):
        raw = source.cast(pa.int64())
        if kind.unit == "ns":
            nanos = np.asarray(raw.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
            return np.floor_divide(nanos, 1000), np.ones(len(source), bool)
        return _scaled(raw, _UNIT_MICROS[kind.unit], integral=True)
    return np.zeros(len(source), np.int64), np.zeros(len(source), bool)


def _scaled(numbers: pa.Array, per_unit: int, *, integral: bool) -> tuple[np.ndarray, np.ndarray]:
    """Numbers of a unit worth `per_unit` microseconds as microseconds, where they stay near
    `READABLE_MICROS` (decided on their float64 values before multiplying, so nothing wraps; the
    bounds are far below 2^53, where float64 is exact). Integral values are multiplied exactly;
    with `integral` a fraction does not convert, else it is rounded to the microsecond."""
    as_float = np.asarray(numbers.cast(pa.float64(), safe=False).fill_null(0).to_numpy(zero_copy_only=False))
    bound = READABLE_MICROS[1] // per_unit + 1  # the larger magnitude: exact bounds come after
    fits = (as_float >= -bound) & (as_float <= bound)  # NaN and inf fail the comparisons
    whole = np.floor(np.where(fits, as_float, 0.0)) == np.where(fits, as_float, 0.0)
    if integral:
        fits &= whole
    if pa.types.is_floating(numbers.type):
        kept = np.where(fits, as_float, 0.0)
        exact = kept.astype(np.int64) * per_unit
        micros = np.where(whole, exact, np.round(kept * per_unit).astype(np.int64))
        return micros, fits
    as_int = np.asarray(numbers.cast(pa.int64(), safe=False).fill_null(0).to_numpy(zero_copy_only=False))
    return np.where(fits, as_int, 0) * per_unit, fits
