"""Exact decimal values for `decimal(P,S)` columns: the one rule every record format converts with.

A value lands in a `decimal(P,S)` column only when the column holds it exactly: at most `S`
fraction digits once trailing zeros are dropped (`1.50` fits a scale of 1, `1.05` does not) and at
most `P - S` integer digits. Anything else is not rounded, clamped or nulled silently: the caller
counts it as a conversion failure of the column (or a dead letter where the column is required).

Other writers round: the Kafka Connect Iceberg sink rescales with `HALF_UP` (`RecordConverter.
convertDecimal`) and Spark's `from_json`/`CAST` round `HALF_UP` to the scale too; both fail (Spark
under ANSI: error; otherwise null) when the integer digits do not fit. Here a value with more
fraction digits than the scale is a counted failure instead, because a table of record values must
hold what the producer wrote; declare the scale the data has (or widen it) to keep such values.

The input is always exact: a JSON number's text, a numeric string, an integer, or an Avro /
Protobuf / Connect unscaled integer with its scale (`from_unscaled`). A binary float never is (the
float64 of `12345678901234567890.123` is `12345678901234567000`), so no float is accepted here.
"""

from __future__ import annotations

import decimal
import re
from typing import Final

_NUMERIC_TEXT: Final = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
MAX_PRECISION: Final = 38
"""Iceberg's widest decimal."""
# A fitting value has at most MAX_PRECISION digits, so this context never rounds one: it only
# signals (trapped) when digits would be lost or the result would be wider.
_CONTEXT: Final = decimal.Context(prec=MAX_PRECISION, traps=[decimal.InvalidOperation, decimal.Inexact])
_QUANTA: Final = tuple(decimal.Decimal((0, (1,), -scale)) for scale in range(MAX_PRECISION + 1))


def decimal_from_text(text: str) -> decimal.Decimal | None:
    """The exact value of a numeric text (`-1.50`, `1e3`, `.5`; a JSON number's or a string's), or None."""
    if not _NUMERIC_TEXT.fullmatch(text):
        return None
    return decimal.Decimal(text)


def from_unscaled(unscaled: int, scale: int) -> decimal.Decimal:
    """`unscaled * 10**-scale` exactly (Avro, Protobuf and Connect decimals carry this pair)."""
    sign, digits, _ = decimal.Decimal(unscaled).as_tuple()
    return decimal.Decimal((sign, digits, -scale))


def fit_decimal(value: decimal.Decimal | int, precision: int, scale: int) -> decimal.Decimal | None:
    """`value` as a `decimal(precision, scale)` value (exponent `-scale`), exactly; None when the
    column cannot hold it (not finite, more fraction digits than `scale` that are not zeros, or
    more than `precision - scale` integer digits). Never rounds."""
    number = decimal.Decimal(value) if type(value) is int else value
    if (
        type(number) is not decimal.Decimal
        or not number.is_finite()
        or not 0 <= scale <= precision <= MAX_PRECISION
    ):
        return None
    # `adjusted()` is the exponent of the leading digit: integer digits = adjusted() + 1 (zero has none).
    if number and number.adjusted() >= precision - scale:
        return None
    try:
        return number.quantize(_QUANTA[scale], context=_CONTEXT)
    except (decimal.InvalidOperation, decimal.Inexact):
        return None  # a fraction digit beyond the scale that is not zero
