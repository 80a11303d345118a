"""The compiled scanner path gives exactly the columns of the per-record path, on any input."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafscale_iceberg.dataplane import json_scan as js
from kafscale_iceberg.dataplane.columns import SCANNED_TYPES, ColumnScanner, parse_columns
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType

# Every type the scanner builds (the types without parts, and decimals: a wide and a narrow one).
COLUMNS = (
    *(
        ColumnSpec(name=f"c_{t.value}", type=t)
        for t in ColumnType
        if t in SCANNED_TYPES and t is not ColumnType.DECIMAL
    ),
    ColumnSpec(name="c_decimal", type=ColumnType.DECIMAL, precision=38, scale=10),
    ColumnSpec(name="c_cents", type=ColumnType.DECIMAL, precision=5, scale=2),
)
NAMES = [c.name for c in COLUMNS]


def scan(values: list[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
    array = pa.array(values, pa.binary())
    names = b"".join(n.encode() for n in NAMES)
    offsets = np.cumsum([0, *(len(n) for n in NAMES)]).astype(np.int64)
    data = np.frombuffer(array.buffers()[2] or b"", np.uint8)
    bounds = np.frombuffer(array.buffers()[1], np.int32, len(values) + 1).astype(np.int64)
    starts = bounds[:-1].copy()
    starts[[v is None for v in values]] = -1
    status, kinds, _, _, _ = js.scan_values(
        data, starts, bounds[1:].copy(), np.frombuffer(names, np.uint8), offsets
    )
    return status, kinds


@pytest.mark.parametrize(
    ("value", "status"),
    [
        (b'{"a": [1, {"b": [true, false, null]}], "c": "\\u00e9\\n"}', js.OK),
        (b" { } ", js.OK),
        (b"{}", js.OK),
        (None, js.NO_VALUE),
        (b"", js.NO_VALUE),
        (b'{"a": 1,}', js.FALLBACK),
        (b'{"a": 01}', js.FALLBACK),
        (b'{"a": 1.}', js.FALLBACK),
        (b'{"a": -}', js.FALLBACK),
        (b'{"a": tru}', js.FALLBACK),
        (b'{"a": "\x01"}', js.FALLBACK),
        (b'{"a": "\\x"}', js.FALLBACK),
        (b'{"a": "\xff"}', js.FALLBACK),
        (b'{"a": "\xed\xa0\x80"}', js.FALLBACK),
        (b'{"a": [1 2]}', js.FALLBACK),
        (b'{"a": {"b" 1}}', js.FALLBACK),
        (b'{"a": 1} x', js.FALLBACK),
        (b'{"a": 1}}', js.FALLBACK),
        (b'{"a": [}', js.FALLBACK),
        (b"[1]", js.FALLBACK),
        (b"null", js.FALLBACK),
        (b"{" * 300 + b"}" * 300, js.FALLBACK),
        (b'{"\\u0061": 1}', js.FALLBACK),
        ('{"a": "ü€😀"}'.encode(), js.OK),
    ],
)
def test_the_scanner_validates_json_and_defers_what_it_does_not_settle(
    value: bytes | None, status: int
) -> None:
    assert scan([value])[0].tolist() == [status]


def test_the_scanner_finds_top_level_keys_only_and_the_last_duplicate() -> None:
    doc = {"x": {"c_long": 1}, "c_string": "a", "c_long": [1]}
    value = json.dumps(doc).encode()[:-1] + b', "c_long": 5}'
    status, kinds = scan([value])
    assert status.tolist() == [js.OK]
    row = dict(zip(NAMES, kinds[:, 0].tolist(), strict=True))
    assert row["c_long"] == js.INTEGER
    assert row["c_string"] == js.STRING
    assert row["c_int"] == js.MISSING


_NUMBER = "\x00number\x00"
"""Marks a string that `dumps` writes as the JSON number it holds (json.dumps has no exact numbers)."""
_NUMBER_TEXT = re.compile(r'"\\u0000number\\u0000(-?[0-9.eE+-]+)\\u0000number\\u0000"')


def dumps(value: object, *, ensure_ascii: bool = True) -> bytes:
    """`value` as JSON, the `_NUMBER`-marked strings as number tokens of their exact text."""
    return _NUMBER_TEXT.sub(r"\1", json.dumps(value, ensure_ascii=ensure_ascii)).encode()


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(
        [
            "2026-11-20T10:00:00Z",
            "1969-12-31T23:59:59.123456789-01:30",
            "2026-11-20",
            "2026-02-30",
            "2026-11-20t10:00:00z",
            "2024-01-04 12:28:13",
            "2024-01-04T12:28:13.5+0530",
            "2024-01-04 12:28:13-01:00",
            "12.5",
            "-0.001",
            "1e3",
            ".5",
        ]
    ),
    # Numbers whose float64 is not their value: the decimal columns read their exact text.
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(lambda d: f"{_NUMBER}{d}{_NUMBER}"),
    st.sampled_from(
        ["12345678901234567890.123", "-9999999999999999999999999999.9999999999", "1.50", "1E+3"]
    ).map(lambda d: f"{_NUMBER}{d}{_NUMBER}"),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
documents = st.dictionaries(st.sampled_from([*NAMES, "other", "c_"]), json_values, max_size=6)


def _mangle(data: bytes, draw_byte: int, where: int) -> bytes:
    if not data:
        return data
    where %= len(data)
    return data[:where] + bytes([draw_byte]) + data[where + 1 :]


values_strategy = st.one_of(
    documents.map(dumps),
    documents.map(lambda d: dumps(d, ensure_ascii=False)),
    st.tuples(documents, st.integers(0, 255), st.integers(0, 10_000)).map(
        lambda t: _mangle(dumps(t[0], ensure_ascii=False), t[1], t[2])
    ),
    json_values.map(dumps),
    st.binary(max_size=12),
    st.none(),
)


def _plain(array: pa.Array) -> list[object]:
    """Dates and timestamps as their numbers (Python's datetime cannot hold all of them)."""
    if pa.types.is_date32(array.type):
        return array.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(array.type):
        return array.cast(pa.int64()).to_pylist()
    return array.to_pylist()


def _same(a: pa.Array, b: pa.Array) -> bool:
    left, right = _plain(a), _plain(b)
    if len(left) != len(right):
        return False
    for x, y in zip(left, right, strict=True):
        if isinstance(x, float) and isinstance(y, float):
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                return False
        elif x != y:
            return False
    return True


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(values_strategy, min_size=1, max_size=12))
def test_scanned_columns_equal_parsed_columns(values: list[bytes | None]) -> None:
    array = pa.array(values, pa.binary())
    scanned = ColumnScanner(COLUMNS).scan(array)
    parsed = parse_columns(array, COLUMNS, documents=False)
    assert scanned.errors.keys() == parsed.errors.keys()
    for column, left, right in zip(COLUMNS, scanned.arrays, parsed.arrays, strict=True):
        assert left.type == right.type
        assert _same(left, right), (column.name, _plain(left), _plain(right), values)
    for c in range(len(COLUMNS)):
        # Conversion failures (present but null) are counted alike on both paths.
        kept = [row not in parsed.errors for row in range(len(values))]
        assert (scanned.present(c) & kept).tolist() == (parsed.present(c) & kept).tolist(), values
        nulls = parsed.arrays[c].is_null().to_pylist()
        for row in range(len(values)):
            if row in parsed.errors or not nulls[row]:
                continue
            ours, theirs = scanned.describe(c, row), parsed.describe(c, row)
            assert ours == theirs or ("not a valid" in ours and "not a valid" in theirs), (ours, theirs)


def test_a_sliced_batch_scans_like_a_fresh_one() -> None:
    values = [b'{"c_long": 1}', None, b'{"c_long": 2, "c_string": "x"}', b"{oops"]
    array = pa.array(values, pa.binary()).slice(1, 3)
    scanned = ColumnScanner(COLUMNS).scan(array)
    assert scanned.arrays[NAMES.index("c_long")].to_pylist() == [None, 2, None]
    assert scanned.arrays[NAMES.index("c_string")].to_pylist() == [None, "x", None]
    assert list(scanned.errors) == [2]
