"""JSON record values -> mapping columns: parsing, and the coercion of each column type."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale_iceberg.dataplane.columns import parse_columns
from kafscale_iceberg.dataplane.datetimes import parse_datetimes
from kafscale_iceberg.dataplane.values import (
    MISSING,
    NO_VALUE,
    ValueReader,
    coerce,
    describe_mismatch,
)
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType

EPOCH = dt.datetime(1970, 1, 1)


def read(values: list[bytes | None], names: tuple[str, ...] = ("a",), *, documents: bool = False) -> Any:
    return ValueReader(names, documents=documents).read(pa.array(values, pa.binary()))


def column(raw: list[object], column_type: ColumnType) -> list[Any]:
    return coerce(raw, column_type).to_pylist()


@pytest.mark.parametrize("documents", [False, True])
def test_columns_are_the_top_level_keys_of_a_json_object(documents: bool) -> None:
    values = [b'{"a": 1, "b": "x", "nested": {"a": 2}}', b'{"b": null}', None, b"", b"null"]
    result = read(values, ("a", "b"), documents=documents)
    assert result.raw_columns == [
        [1, MISSING, MISSING, MISSING, MISSING],
        ["x", None, MISSING, MISSING, MISSING],
    ]
    assert result.errors == {}


@pytest.mark.parametrize("documents", [False, True])
def test_values_that_are_not_json_objects_are_errors_when_there_are_columns(documents: bool) -> None:
    result = read([b'{"a":', b"[1]", b'"text"', b"NaN", b'{"a": 1} trailing'], documents=documents)
    assert set(result.errors) == {0, 1, 2, 3, 4}
    assert "not JSON" in result.errors[0]
    assert "an array" in result.errors[1]
    assert "a string" in result.errors[2]
    assert "not JSON" in result.errors[3]


def test_without_columns_any_json_document_is_fine() -> None:
    result = read([b"[1]", b'"s"', b"{}"], (), documents=True)
    assert result.errors == {}
    assert result.documents == [[1], "s", {}]


def test_documents_of_null_and_empty_values_are_no_value() -> None:
    result = read([None, b"", b"{}"], (), documents=True)
    assert result.documents == [NO_VALUE, NO_VALUE, {}]


@pytest.mark.parametrize("documents", [False, True])
def test_invalid_utf8_and_lone_surrogate_escapes_become_replacement_characters_as_in_go(
    documents: bool,
) -> None:
    result = read([b'{"a": "x\xffy\xe2\x82z"}', b'{"a": "\\ud800!"}'], documents=documents)
    assert result.errors == {}
    assert result.raw_columns == [["x\ufffdy\ufffd\ufffdz", "\ufffd!"]]


def test_integers_keep_full_precision_above_2_pow_53() -> None:
    result = read([b'{"a": 9007199254740993}', b'{"a": -9223372036854775808}'])
    assert column(result.raw_columns[0], ColumnType.LONG) == [9007199254740993, -(2**63)]


@pytest.mark.parametrize(
    ("raw", "column_type", "expected"),
    [
        ([True, False, 1, "true", None, MISSING], ColumnType.BOOLEAN, [True, False, None, None, None, None]),
        ([1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1], ColumnType.INT, [1, 2**31 - 1, None, -(2**31), None]),
        (
            [2**63 - 1, 2**63, 1.0, 1e3, 1.5, 2.0**60, True, "1"],
            ColumnType.LONG,
            [2**63 - 1, None, 1, 1000, None, None, None, None],
        ),
        ([1, 1.5, 1e39, "1", False], ColumnType.FLOAT, [1.0, 1.5, float("inf"), None, None]),
        ([1, 1.5, 10**400, "1", None], ColumnType.DOUBLE, [1.0, 1.5, None, None, None]),
        (["x", 1, None, ["x"]], ColumnType.STRING, ["x", None, None, None]),
        (["é", 1], ColumnType.BINARY, ["é".encode(), None]),
    ],
)
def test_scalar_coercions(raw: list[object], column_type: ColumnType, expected: list[Any]) -> None:
    assert column(raw, column_type) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-20T10:30:00Z", dt.datetime(2026, 11, 20, 10, 30)),
        ("2026-11-20T10:30:00.123456789+01:00", dt.datetime(2026, 11, 20, 9, 30, 0, 123456)),
        ("2026-11-20t10:30:00.5z", dt.datetime(2026, 11, 20, 10, 30, 0, 500000)),
        ("1969-12-31T23:59:59.999999-00:30", dt.datetime(1970, 1, 1, 0, 29, 59, 999999)),
        ("1900-02-28T12:00:00Z", dt.datetime(1900, 2, 28, 12)),
        ("2024-02-29T00:00:00Z", dt.datetime(2024, 2, 29)),
        ("2023-02-29T00:00:00Z", None),
        ("2026-11-20T24:00:00Z", None),
        ("2026-11-20T23:59:60Z", None),
        ("2026-11-20T10:30:00+24:00", None),
        ("2026-11-20", None),
        # As people write them (the Kafka Connect sink's pizza events): no offset = UTC wall time.
        ("2024-01-04 12:28:13", dt.datetime(2024, 1, 4, 12, 28, 13)),
        ("2024-01-04T12:28:13", dt.datetime(2024, 1, 4, 12, 28, 13)),
        ("2024-01-04 12:28:13.25", dt.datetime(2024, 1, 4, 12, 28, 13, 250000)),
        ("2024-01-04T12:28:13.1234567", dt.datetime(2024, 1, 4, 12, 28, 13, 123456)),
        ("2026-11-20 10:30:00Z", dt.datetime(2026, 11, 20, 10, 30)),
        ("2026-11-20T10:30:00+0530", dt.datetime(2026, 11, 20, 5, 0)),
        ("2026-11-20 10:30:00-0130", dt.datetime(2026, 11, 20, 12, 0)),
        ("2026-11-20T10:30:00+05", None),
        ("2026-11-20T10:30:00+053", None),
        ("2026-11-20  10:30:00", None),
        ("2026-11-20 10:30", None),
        ("2026-11-20 24:00:00", None),
        ("2026-02-30 10:00:00", None),
        (1_795_132_800_123, dt.datetime(2026, 11, 20, 0, 0, 0, 123000)),
        (1_795_132_800_123.4567, dt.datetime(2026, 11, 20, 0, 0, 0, 123457)),
        (-1, dt.datetime(1969, 12, 31, 23, 59, 59, 999000)),
        (1.7e305, None),
        (10**20, None),
        (True, None),
    ],
)
def test_timestamps_are_microseconds_from_date_times_or_epoch_milliseconds(
    value: object, expected: Any
) -> None:
    assert column([value], ColumnType.TIMESTAMP) == [expected]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-20", dt.date(2026, 11, 20)),
        ("1969-12-31", dt.date(1969, 12, 31)),
        ("1969-12-31T23:00:00Z", dt.date(1969, 12, 31)),
        ("1970-01-01T00:30:00+01:00", dt.date(1969, 12, 31)),
        ("2026-02-30", None),
        ("20261120", None),
        ("2024-01-04 12:28:13", dt.date(2024, 1, 4)),
        ("2024-01-04T23:59:59.999", dt.date(2024, 1, 4)),
        ("2024-01-04T01:00:00+0200", dt.date(2024, 1, 3)),
        ("2024-01-04 12:28", None),
        (20_777, dt.date(2026, 11, 20)),
        (-1, dt.date(1969, 12, 31)),
        (1.5, None),
    ],
)
def test_dates_from_iso_dates_rfc3339_instants_or_day_numbers(value: object, expected: Any) -> None:
    assert column([value], ColumnType.DATE) == [expected]


def test_a_batch_mixing_forms_takes_each_value_by_its_own_rule() -> None:
    raw: list[object] = ["2026-11-20T00:00:00.1234567Z", 0, "x", MISSING, "2026-11-20T00:00:00Z"]
    assert column(raw, ColumnType.TIMESTAMP) == [
        dt.datetime(2026, 11, 20, 0, 0, 0, 123456),
        EPOCH,
        None,
        None,
        dt.datetime(2026, 11, 20),
    ]
    assert column(["2026-11-20", "2026-11-20T23:00:00-02:00", 3], ColumnType.DATE) == [
        dt.date(2026, 11, 20),
        dt.date(2026, 11, 21),
        dt.date(1970, 1, 4),
    ]
    # Dates beside date-times without offset or with `+HHMM` (the exact path takes such a batch).
    assert column(["2026-11-20", "2024-01-04 23:28:13", "2024-01-04T01:00:00+0200"], ColumnType.DATE) == [
        dt.date(2026, 11, 20),
        dt.date(2024, 1, 4),
        dt.date(2024, 1, 3),
    ]
    # Values with and without an offset in one timestamp batch: each by its own rule.
    assert column(
        ["2024-01-04 12:28:13", "2024-01-04T12:28:13+0100", "2024-01-04T12:28:13Z"], ColumnType.TIMESTAMP
    ) == [
        dt.datetime(2024, 1, 4, 12, 28, 13),
        dt.datetime(2024, 1, 4, 11, 28, 13),
        dt.datetime(2024, 1, 4, 12, 28, 13),
    ]


@st.composite
def date_time(draw: st.DrawFn) -> tuple[str, int]:
    moment = draw(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)))
    offset = draw(st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59))
    digits = draw(st.integers(min_value=0, max_value=9))
    zone_form = draw(st.sampled_from(["Z", "colon", "no colon", "none"]))
    if zone_form == "none" or (zone_form == "Z" and offset != 0):
        offset = 0
    sign = "-" if offset < 0 else "+"
    zone = {
        "Z": "Z",
        "colon": f"{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}",
        "no colon": f"{sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}",
        "none": "",
    }[zone_form]
    separator = draw(st.sampled_from("T "))
    fraction = f"{moment.microsecond:06d}000"[:digits]
    clock = f"{moment:%H:%M:%S}{'.' + fraction if digits else ''}"
    text = f"{moment.year:04d}-{moment:%m-%d}{separator}{clock}{zone}"
    micros = int(fraction[:6].ljust(6, "0")) if digits else 0
    instant = moment.replace(microsecond=micros) - dt.timedelta(minutes=offset)
    return text, (instant - EPOCH) // dt.timedelta(microseconds=1)


@settings(max_examples=300, deadline=None)
@given(st.lists(date_time(), min_size=1, max_size=20))
def test_date_time_parsing_agrees_with_the_datetime_module(cases: list[tuple[str, int]]) -> None:
    micros, valid = parse_datetimes(pa.array([text for text, _ in cases]), require_time=True)
    assert valid.all()
    assert micros.tolist() == [expected for _, expected in cases]
    # Lower-case separators force the exact (non-Arrow) path: same answers.
    lowered = [text.replace("T", "t").replace("Z", "z") for text, _ in cases]
    micros, valid = parse_datetimes(pa.array(lowered), require_time=True)
    assert valid.all()
    assert micros.tolist() == [expected for _, expected in cases]


def test_nothing_parses_from_nulls() -> None:
    micros, valid = parse_datetimes(pa.array([None, None], pa.string()), require_time=False)
    assert not valid.any()
    assert isinstance(micros, np.ndarray)


@pytest.mark.parametrize(
    ("value", "text"),
    [(MISSING, "missing"), (None, "null"), ("12", '"12" is not a valid long'), ([1] * 40, "...")],
)
def test_mismatches_are_described_for_dead_letter_rows(value: object, text: str) -> None:
    assert text in describe_mismatch(value, ColumnType.LONG)


EXACT = b'{"d": 12345678901234567890.123, "x": 0.1, "s": {"d": 0.30000000000000004441, "x": 2.5}}'
DECIMALS = (
    ColumnSpec(name="d", type=ColumnType.DECIMAL, precision=38, scale=10),
    ColumnSpec(name="x", type=ColumnType.DOUBLE),
    ColumnSpec(
        name="s",
        type=ColumnType.STRUCT,
        fields=(
            ColumnSpec(name="d", type=ColumnType.DECIMAL, precision=38, scale=20),
            ColumnSpec(name="x", type=ColumnType.DOUBLE),
        ),
    ),
)


@pytest.mark.parametrize(
    ("value", "documents"),
    [
        (EXACT, False),
        (EXACT, True),  # validation on: documents for jsonschema, decimals from the exact text
        (EXACT[:-1] + b', "bad": "\xff"}', False),  # invalid UTF-8 elsewhere: the stdlib fallback
    ],
)
def test_decimal_columns_take_a_json_numbers_exact_text_at_any_depth(value: bytes, documents: bool) -> None:
    parsed = parse_columns(pa.array([value], pa.binary()), DECIMALS, documents=documents)
    [d], [x], [s] = (array.to_pylist() for array in parsed.arrays)
    assert d == decimal.Decimal("12345678901234567890.123")  # float64 would give ...567000
    assert s == {"d": decimal.Decimal("0.30000000000000004441"), "x": 2.5}
    assert x == 0.1  # the other columns still read numbers as floats
    assert not any(parsed.failed(c)[0] for c in range(3))


def test_a_decimal_the_column_cannot_hold_is_a_counted_failure_never_rounded() -> None:
    values = [
        b'{"d": 1.00000000001}',
        b'{"d": 99999999999999999999999999999}',
        b'{"d": 1e400}',
        b'{"d": 1.5}',
    ]
    parsed = parse_columns(pa.array(values, pa.binary()), DECIMALS, documents=False)
    assert parsed.arrays[0].to_pylist() == [None, None, None, decimal.Decimal("1.5")]
    assert parsed.failed(0).tolist() == [True, True, True, False]
    assert parsed.describe(0, 0) == "1.00000000001 is not a valid decimal"
