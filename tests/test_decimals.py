"""Decimal columns hold a value exactly or not at all: the one rule every record format converts with."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale_iceberg.domain.decimals import decimal_from_text, fit_decimal, from_unscaled


@pytest.mark.parametrize(
    ("value", "precision", "scale", "expected"),
    [
        (Decimal("12345678901234567890.123"), 38, 10, Decimal("12345678901234567890.1230000000")),
        (
            Decimal("-9999999999999999999999999999.9999999999"),
            38,
            10,
            Decimal("-9999999999999999999999999999.9999999999"),
        ),
        (Decimal("1.50"), 3, 1, Decimal("1.5")),  # trailing zeros beyond the scale are not digits lost
        (Decimal("1E+3"), 6, 2, Decimal("1000.00")),
        (Decimal("-0.0"), 5, 2, Decimal("0.00")),
        (12, 2, 0, Decimal("12")),
        (99999999999999999999999999999999999999, 38, 0, Decimal("99999999999999999999999999999999999999")),
    ],
)
def test_a_value_the_column_holds_lands_exactly(
    value: Decimal | int, precision: int, scale: int, expected: Decimal
) -> None:
    fitted = fit_decimal(value, precision, scale)
    assert fitted == expected
    assert fitted is not None
    assert fitted.as_tuple().exponent == -scale


@pytest.mark.parametrize(
    ("value", "precision", "scale"),
    [
        (Decimal("1.005"), 8, 2),  # a third fraction digit: Connect and Spark round HALF_UP, we refuse
        (Decimal("10000000000000000000000000000"), 38, 10),  # 29 integer digits where 28 fit
        (100, 2, 0),
        (Decimal("Infinity"), 38, 0),
        (Decimal("NaN"), 38, 0),
        (Decimal("1E-100000"), 38, 10),
        (Decimal("1E+100000"), 38, 0),
    ],
)
def test_a_value_the_column_cannot_hold_is_refused_never_rounded(
    value: Decimal | int, precision: int, scale: int
) -> None:
    assert fit_decimal(value, precision, scale) is None


def test_a_float_is_never_taken_for_a_decimal() -> None:
    assert fit_decimal(1.5, 38, 10) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("-1.50", Decimal("-1.50")), ("1e3", Decimal("1E+3")), (".5", Decimal("0.5")), ("+2", Decimal("2"))],
)
def test_numeric_text_reads_exactly(text: str, expected: Decimal) -> None:
    assert decimal_from_text(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "NaN", "Infinity", "1e", "0x10", " 1"])
def test_text_that_is_not_a_number_reads_as_none(text: str) -> None:
    assert decimal_from_text(text) is None


def test_unscaled_integers_with_their_scale_read_exactly() -> None:
    assert from_unscaled(-123456789012345678901234567890, 10) == Decimal("-12345678901234567890.1234567890")


@settings(max_examples=500, deadline=None)
@given(
    st.decimals(allow_nan=False, allow_infinity=False),
    st.integers(min_value=1, max_value=38),
    st.integers(min_value=0, max_value=38),
)
def test_a_value_fits_exactly_when_its_scaled_value_is_an_integer_of_at_most_p_digits(
    value: Decimal, precision: int, scale: int
) -> None:
    scale = min(scale, precision)
    scaled = Fraction(value) * 10**scale
    fits = scaled.denominator == 1 and abs(scaled.numerator) < 10**precision
    fitted = fit_decimal(value, precision, scale)
    assert (fitted is not None) == fits
    if fitted is not None:
        assert fitted == value
