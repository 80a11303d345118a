"""The `headers` column exactly as KafScale's Go processor writes it.

The Go processor stores `json.Marshal([]struct{Key, Value string})` of the record headers, with each
value converted `string([]byte)`; `""` (never null) when a record has no headers. Go's encoder:

- separators without spaces, fields in the order `key`, `value`; a null header value is `""`;
- `"` and `\\` escaped; `\\b \\f \\n \\r \\t` short escapes; other bytes below 0x20 as `\\u00xx`
  (lower-case hex); DEL and all other characters as they are;
- HTML-safe: `<`, `>`, `&` as `\\u003c`, `\\u003e`, `\\u0026`; U+2028 and U+2029 escaped;
- every byte that is not part of valid UTF-8 as the escape `\\ufffd` (one per byte), while a valid
  U+FFFD in the input stays a raw character.

Python's `json` with `ensure_ascii=False` produces the same control escapes; the rest is one
`str.translate`. Invalid bytes survive decoding as lone surrogates (`surrogateescape`, one per
byte, which is exactly Go's per-byte rule) and are translated to `\\ufffd`.
"""

from __future__ import annotations

import json
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)
_GO_ESCAPES: Final = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
        **{chr(0xDC00 + b): "\\ufffd" for b in range(0x80, 0x100)},
    }
)


def empty_strings(count: int) -> pa.Array:
    """`count` empty (non-null) strings, without a Python object per row."""
    offsets = pa.py_buffer(np.zeros(count + 1, np.int32))
    return pa.StringArray.from_buffers(count, offsets, pa.py_buffer(b""))


def go_headers_json(headers: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The Go processor's `headers` string of each record (list<struct<key, value>> in).

    Vectorized for headers of printable ASCII (the usual case); a record with any other byte in a
    header key or value is encoded in Python, byte-exactly as Go does.
    """
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks() if headers.num_chunks != 1 else headers.chunk(0)
    count = len(headers)
    if headers.null_count:
        headers = pc.fill_null(headers, pa.scalar([], type=headers.type))
    lengths = np.asarray(pc.list_value_length(headers).to_numpy(zero_copy_only=False), dtype=np.int64)
    if count == 0 or not lengths.any():
        return empty_strings(count)
    flat = pc.list_flatten(headers)
    keys = flat.field("key").cast(pa.binary())
    values = flat.field("value").fill_null(b"")
    key_unusual, key_special = _scan_bytes(keys)
    value_unusual, value_special = _scan_bytes(values)
    unusual = key_unusual | value_unusual
    parents = np.asarray(pc.list_parent_indices(headers).to_numpy(), dtype=np.int64)
    slow = np.zeros(count, bool)
    slow[parents[unusual]] = True
    if unusual.any():
        mask = pa.array(unusual)
        keys = pc.if_else(mask, b"", keys)
        values = pc.if_else(mask, b"", values)
    keys = _escape_ascii(keys) if key_special else keys.cast(pa.string())
    values = _escape_ascii(values) if value_special else values.cast(pa.string())
    pairs = pc.binary_join_element_wise('{"key":"', keys, '","value":"', values, '"}', "")
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    lists = pa.ListArray.from_arrays(pa.array(offsets), pairs)
    encoded = pc.binary_join_element_wise("[", pc.binary_join(lists, ","), "]", "")
    encoded = pc.if_else(pa.array(lengths == 0), "", encoded)
    if slow.any():
        encoded = pc.replace_with_mask(encoded, pa.array(slow), pa.array(_encode_records(headers, slow)))
    return encoded


# Byte classes: 0 printable ASCII as it is, 1 anything the fast path leaves to Python (control
# characters, non-ASCII), 2 printable ASCII that needs an escape.
_BYTE_CLASS = np.zeros(256, np.uint8)
_BYTE_CLASS[:0x20] = 1
_BYTE_CLASS[0x7F:] = 1
_BYTE_CLASS[[ord(c) for c in '\\"<>&']] = 2


def _scan_bytes(array: pa.Array) -> tuple[np.ndarray, bool]:
    """Per element: does it hold a byte outside printable ASCII? And: does any element need escapes?"""
    count = len(array)
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32, count + 1, array.offset * 4)
    flags = np.zeros(count, bool)
    if data_buffer is None or offsets[-1] == offsets[0]:
        return flags, False
    classes = _BYTE_CLASS[np.frombuffer(data_buffer, np.uint8)[offsets[0] : offsets[-1]]]
    positions = np.flatnonzero(classes == 1) + offsets[0]
    if positions.size:
        flags[np.searchsorted(offsets, positions, side="right") - 1] = True
    return flags, bool((classes == 2).any())


def _escape_ascii(array: pa.Array) -> pa.Array:
    text = array.cast(pa.string())
    for raw, escaped in (("\\", "\\\\"), ('"', '\\"'), ("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = pc.replace_substring(text, raw, escaped)
    return text


def _encode_records(headers: pa.Array, which: np.ndarray) -> list[str]:
    encode = _ENCODER.encode
    out: list[str] = []
    for record in headers.filter(pa.array(which)).to_pylist():
        pairs = [
            {
                "key": h["key"],
                "value": (h["value"] or b"").decode("utf-8", "surrogateescape"),
            }
            for h in record
        ]
        out.append(encode(pairs).translate(_GO_ESCAPES))
    return out
