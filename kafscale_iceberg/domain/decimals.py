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
# Enough digits for any exponent a fitting value can have: the quantize below never rounds silently.
_CONTEXT: Final = decimal.Context(prec=100_000, traps=[decimal.InvalidOperation, decimal.Inexact])
_MAX_EXPONENT_SPAN: Final = 1000


def decimal_from_text(text: str) -> decimal.Decimal | None:
    """The exact value of a numeric text (`-1.50`, `1e3`, `.5`; a JSON number's or a string's), or None."""
    if not _NUMERIC_TEXT.fullmatch(text):
        return None
    return decimal.Decimal(text)


def from_unscaled(unscaled: int, scale: int) -> decimal.Decimal:
    """`unscaled * 10**-scale` exactly (Avro, Protobuf and Connect decimals carry this pair)."""
    return decimal.Decimal(unscaled).scaleb(
        -scale, context=_CONTEXT
    )  # the default context rounds at 28 digits


def fit_decimal(value: decimal.Decimal | int, precision: int, scale: int) -> decimal.Decimal | None:
    """`value` as a `decimal(precision, scale)` value (exponent `-scale`), exactly; None when the
    column cannot hold it (not finite, more fraction digits than `scale` that are not zeros, or
    more than `precision - scale` integer digits). Never rounds."""
    number = decimal.Decimal(value) if type(value) is int else value
    if not isinstance(number, decimal.Decimal) or not number.is_finite():
        return None
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    if abs(exponent) > _MAX_EXPONENT_SPAN and not number.is_zero():
        return None  # `1e-99999` or `1e99999`: never a value a 38-digit column holds
    try:
        exact = number.quantize(decimal.Decimal(1).scaleb(-scale), context=_CONTEXT)
    except (decimal.InvalidOperation, decimal.Inexact):
        return None
    if len(exact.as_tuple().digits) > precision:
        return None
    return exact
