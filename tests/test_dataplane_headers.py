"""The `headers` column is byte-for-byte what KafScale's Go processor's `json.Marshal` writes."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale_iceberg.dataplane.headers import go_headers_json
from kafscale_iceberg.segments.decode import HEADERS_TYPE
from tests.support.go_json import go_json_string

# Produced by Go's encoding/json (go1.19 on this machine) from []struct{Key, Value string} with the
# values converted string([]byte). Go >= 1.22, which KafScale builds with, writes \b and \f short;
# none of these cases contains them.
GO_GOLDEN: list[tuple[list[tuple[str, bytes | None]], str]] = [
    ([("k", b"v")], '[{"key":"k","value":"v"}]'),
    ([("a<b", b'&>"\\')], '[{"key":"a\\u003cb","value":"\\u0026\\u003e\\"\\\\"}]'),
    ([("ctl", b"\x01\x1f\x7f\t\n\r")], '[{"key":"ctl","value":"\\u0001\\u001f\x7f\\t\\n\\r"}]'),
    (
        [("utf8", "café \u2028 \u2029 \ufffd".encode())],
        '[{"key":"utf8","value":"café \\u2028 \\u2029 \ufffd"}]',
    ),
    (
        [("bad", b"\xff\xe2\x82A\xed\xa0\x80")],
        '[{"key":"bad","value":"\\ufffd\\ufffd\\ufffdA\\ufffd\\ufffd\\ufffd"}]',
    ),
    ([("n", None), ("two", b"x")], '[{"key":"n","value":""},{"key":"two","value":"x"}]'),
]


def headers_array(records: list[list[tuple[str, bytes | None]]]) -> pa.Array:
    return pa.array([[{"key": k, "value": v} for k, v in r] for r in records], HEADERS_TYPE)


def test_matches_go_on_golden_cases() -> None:
    records = [headers for headers, _ in GO_GOLDEN]
    assert go_headers_json(headers_array(records)).to_pylist() == [text for _, text in GO_GOLDEN]


def test_each_record_is_encoded_alone_whatever_its_neighbours() -> None:
    records = [headers for headers, _ in GO_GOLDEN]
    for index, (headers, text) in enumerate(GO_GOLDEN):
        assert go_headers_json(headers_array([headers])).to_pylist() == [text]
        sliced = headers_array(records).slice(index, 1)
        assert go_headers_json(sliced).to_pylist() == [text]


def test_no_headers_is_the_empty_string_never_null() -> None:
    array = pa.array([[], None, [{"key": "k", "value": b"v"}], []], HEADERS_TYPE)
    assert go_headers_json(array).to_pylist() == ["", "", '[{"key":"k","value":"v"}]', ""]
    assert go_headers_json(pa.array([[], []], HEADERS_TYPE)).to_pylist() == ["", ""]


def test_control_characters_b_and_f_use_the_short_escapes_of_current_go() -> None:
    assert go_json_string(b"\x08\x0c") == '"\\b\\f"'


def test_the_oracle_writes_the_golden_cases_as_go_does() -> None:
    for headers, text in GO_GOLDEN:
        pairs = [
            f'{{"key":{go_json_string(k.encode())},"value":{go_json_string(v or b"")}}}' for k, v in headers
        ]
        assert "[" + ",".join(pairs) + "]" == text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=3),
        min_size=1,
        max_size=8,
    )
)
def test_the_vectorized_path_agrees_with_the_per_record_encoding(
    records: list[list[tuple[str, bytes | None]]],
) -> None:
    expected = [
        (
            "["
            + ",".join(
                f'{{"key":{go_json_string(k.encode())},"value":{go_json_string(v or b"")}}}' for k, v in r
            )
            + "]"
        )
        if r
        else ""
        for r in records
    ]
    assert go_headers_json(headers_array(records)).to_pylist() == expected
