"""Go's `json.Marshal(string(raw))`, written character by character from Go's rules.

The oracle `tests/test_dataplane_headers.py` checks the vectorized `dataplane.headers` encoder
against; it shares none of that module's code, so a mistake there is not repeated here.
"""

from __future__ import annotations

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HTML_SAFE = {"<", ">", "&", "\u2028", "\u2029"}


def go_json_string(raw: bytes) -> str:
    """One byte string as Go writes it (quotes included): every byte that is not part of valid UTF-8
    as `\\ufffd` (one per byte), short escapes for `"`, `\\` and `\\b \\f \\n \\r \\t`, other control
    characters and the HTML-unsafe `< > &`, U+2028, U+2029 as `\\u00xx` (lower-case hex)."""
    out = ['"']
    for char in raw.decode("utf-8", "surrogateescape"):
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # an invalid byte, kept by surrogateescape
            out.append("\\ufffd")
        elif char in _SHORT:
            out.append(_SHORT[char])
        elif code < 0x20 or char in _HTML_SAFE:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)
