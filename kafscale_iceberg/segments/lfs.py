"""KafScale LFS envelopes: detection, decoding, checksums and blob keys, as KafScale's `pkg/lfs` has them.

KafScale's LFS proxy stores a large record value as an S3 blob (`{ns}/{topic}/lfs/YYYY/MM/DD/obj-{uuid}`)
and produces a small JSON *envelope* in its place. Everything here follows the Go code's observable
behaviour (`IsLfsEnvelope`, `DecodeEnvelope`, `EnvelopeChecksum`, `ComputeChecksum`, the proxy's
`EncodeEnvelope` of `json.Marshal` and `buildObjectKey`), so envelopes produced by the proxy read the
same here as in the Go processor. Standard library only: the generator and the router may import it.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final
from uuid import UUID, uuid4

from kafscale_iceberg.exceptions import EnvelopeError

ENVELOPE_MARKER: Final = b'"kfs_lfs"'
MIN_ENVELOPE_BYTES: Final = 15
MARKER_WINDOW: Final = 50
_INT64 = (-(2**63), 2**63 - 1)


def is_lfs_envelope(value: bytes | None) -> bool:
    """`IsLfsEnvelope`: starts with `{`, at least 15 bytes, `"kfs_lfs"` within the first 50 bytes."""
    if value is None or len(value) < MIN_ENVELOPE_BYTES or value[:1] != b"{":
        return False
    return ENVELOPE_MARKER in value[:MARKER_WINDOW]


class ChecksumAlg(StrEnum):
    """Checksum algorithms of LFS envelopes (`checksum_alg`); empty means sha256."""

    SHA256 = "sha256"
    MD5 = "md5"
    CRC32 = "crc32"
    NONE = "none"


@dataclass(frozen=True)
class Envelope:
    """An LFS envelope (`lfs.Envelope`): where the blob is, its size and checksums, and proxy details."""

    version: int
    bucket: str
    key: str
    sha256: str
    size: int = 0
    checksum: str = ""
    checksum_alg: str = ""
    content_type: str = ""
    original_headers: Mapping[str, str] = field(default_factory=dict)
    created_at: str = ""
    proxy_id: str = ""


# JSON name -> (attribute, kind) in Go's field order (what json.Marshal writes).
_FIELDS: Final = (
    ("kfs_lfs", "version", "int"),
    ("bucket", "bucket", "str"),
    ("key", "key", "str"),
    ("size", "size", "int"),
    ("sha256", "sha256", "str"),
    ("checksum", "checksum", "str"),
    ("checksum_alg", "checksum_alg", "str"),
    ("content_type", "content_type", "str"),
    ("original_headers", "original_headers", "map"),
    ("created_at", "created_at", "str"),
    ("proxy_id", "proxy_id", "str"),
)
_BY_NAME: Final = {name: (attribute, kind) for name, attribute, kind in _FIELDS}
_BY_FOLDED: Final = {name.casefold(): name for name, _, _ in _FIELDS}
_OMIT_EMPTY: Final = frozenset(
    {"checksum", "checksum_alg", "content_type", "original_headers", "created_at", "proxy_id"}
)


def decode_envelope(data: bytes) -> Envelope:
    """`DecodeEnvelope`: Go's `json.Unmarshal` into the envelope, then the required-field check.

    As Go: keys match field names exactly or else case-insensitively, the last duplicate wins, unknown
    keys are ignored, `null` leaves a field empty, integers must be whole JSON numbers in int64 range,
    invalid UTF-8 inside strings reads as U+FFFD. Raises `EnvelopeError` saying what is wrong.
    """
    try:
        document = json.loads(data.decode("utf-8", errors="replace"), object_pairs_hook=_Pairs)
    except ValueError as exc:
        raise EnvelopeError(f"not JSON: {exc}") from None
    if not isinstance(document, _Pairs):
        raise EnvelopeError(f"not a JSON object but {_json_kind(document)}")
    values: dict[str, Any] = {}
    for raw_name, raw in document:
        name = raw_name if raw_name in _BY_NAME else _BY_FOLDED.get(raw_name.casefold())
        if name is None or raw is None:
            continue
        attribute, kind = _BY_NAME[name]
        values[attribute] = _field_value(name, kind, raw)
    envelope = Envelope(
        version=values.pop("version", 0),
        bucket=values.pop("bucket", ""),
        key=values.pop("key", ""),
        sha256=values.pop("sha256", ""),
        **values,
    )
    missing = [
        name
        for name, present in (
            ("kfs_lfs", envelope.version != 0),
            ("bucket", bool(envelope.bucket)),
            ("key", bool(envelope.key)),
            ("sha256", bool(envelope.sha256)),
        )
        if not present
    ]
    if missing:
        raise EnvelopeError(f"missing required field(s) {', '.join(missing)} (kfs_lfs must be non-zero)")
    return envelope


def _field_value(name: str, kind: str, raw: Any) -> Any:
    if kind == "str":
        if not isinstance(raw, str):
            raise EnvelopeError(f"field {name!r} must be a string, got {_json_kind(raw)}")
        return raw
    if kind == "int":
        if type(raw) is not int:
            raise EnvelopeError(f"field {name!r} must be a whole number, got {json.dumps(raw)[:40]}")
        if not _INT64[0] <= raw <= _INT64[1]:
            raise EnvelopeError(f"field {name!r} is out of the int64 range: {raw}")
        return raw
    if not isinstance(raw, _Pairs):
        raise EnvelopeError(f"field {name!r} must be an object of strings, got {_json_kind(raw)}")
    headers: dict[str, str] = {}
    for key, value in raw:
        if value is None:
            continue
        if not isinstance(value, str):
            raise EnvelopeError(f"field {name!r}: header {key!r} must be a string, got {_json_kind(value)}")
        headers[key] = value
    return headers


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (name, value) pairs in document order (duplicates kept)."""


def _json_kind(value: object) -> str:
    if isinstance(value, _Pairs):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "null"


def normalize_checksum_alg(raw: str) -> ChecksumAlg:
    """`NormalizeChecksumAlg`: trimmed, lower-cased; empty means sha256. Raises `EnvelopeError` otherwise."""
    text = raw.strip().lower()
    if not text:
        return ChecksumAlg.SHA256
    try:
        return ChecksumAlg(text)
    except ValueError:
        raise EnvelopeError(f"checksum_alg {raw!r} is not supported (sha256, md5, crc32 or none)") from None


@dataclass(frozen=True)
class ExpectedChecksum:
    """What a blob is checked against (`EnvelopeChecksum`): `verify` False means nothing to check."""

    alg: ChecksumAlg
    value: str
    verify: bool


def envelope_checksum(envelope: Envelope) -> ExpectedChecksum:
    """`EnvelopeChecksum`: the envelope's algorithm and checksum, the `sha256` field as fallback.

    md5 or crc32 without a `checksum` fall back to the `sha256` field (checked as sha256), as Go does
    for backward compatibility. Raises `EnvelopeError` for an unsupported algorithm.
    """
    alg = normalize_checksum_alg(envelope.checksum_alg)
    if alg is ChecksumAlg.NONE:
        return ExpectedChecksum(alg, "", verify=False)
    if envelope.checksum:
        return ExpectedChecksum(alg, envelope.checksum, verify=True)
    if envelope.sha256:
        return ExpectedChecksum(ChecksumAlg.SHA256, envelope.sha256, verify=True)
    return ExpectedChecksum(alg, "", verify=False)


def compute_checksum(alg: ChecksumAlg, data: bytes | bytearray | memoryview) -> str:
    """`ComputeChecksum`: lower-case hex of sha256 / md5 / crc32 (IEEE, big-endian); "" for none."""
    if alg is ChecksumAlg.NONE:
        return ""
    if alg is ChecksumAlg.CRC32:
        return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"
    return hashlib.new(alg.value, data).hexdigest()


# -- what the proxy writes ------------------------------------------------------------------------------

_GO_HTML_ESCAPES: Final = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _go_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).translate(_GO_HTML_ESCAPES)


def encode_envelope(envelope: Envelope) -> bytes:
    """The proxy's `EncodeEnvelope`: Go's `json.Marshal` of the envelope (field order, omitempty, HTML-safe).

    Raises `EnvelopeError` when a required field is empty, as Go refuses to encode it.
    """
    if not (envelope.version and envelope.bucket and envelope.key and envelope.sha256):
        raise EnvelopeError("invalid envelope: kfs_lfs, bucket, key and sha256 are required")
    parts: list[str] = []
    for name, attribute, kind in _FIELDS:
        value = getattr(envelope, attribute)
        if name in _OMIT_EMPTY and not value:
            continue
        if kind == "int":
            text = str(int(value))
        elif kind == "str":
            text = _go_string(value)
        else:  # Go marshals maps with sorted keys
            text = "{" + ",".join(f"{_go_string(k)}:{_go_string(value[k])}" for k in sorted(value)) + "}"
        parts.append(f"{_go_string(name)}:{text}")
    return ("{" + ",".join(parts) + "}").encode("utf-8")


# The headers the proxy copies into `original_headers` (its allow-list, compared lower-cased).
SAFE_HEADERS: Final = frozenset(
    {
        "content-type",
        "content-encoding",
        "correlation-id",
        "message-id",
        "x-correlation-id",
        "x-request-id",
        "traceparent",
        "tracestate",
    }
)


def blob_key(namespace: str, topic: str, *, at: datetime | None = None, object_id: UUID | None = None) -> str:
    """The proxy's `buildObjectKey`: `{ns}/{topic}/lfs/YYYY/MM/DD/obj-{uuid}` (ns "default" when empty)."""
    when = (at or datetime.now(UTC)).astimezone(UTC)
    ns = namespace.strip() or "default"
    return f"{ns}/{topic}/lfs/{when:%Y/%m/%d}/obj-{object_id or uuid4()}"


@dataclass(frozen=True)
class ProxiedValue:
    """A record value as the LFS proxy rewrites it: the envelope for the record, the blob for S3."""

    envelope: Envelope
    value: bytes
    blob_key: str
    blob: bytes


def proxy_value(
    payload: bytes,
    *,
    bucket: str,
    key: str,
    checksum_alg: ChecksumAlg = ChecksumAlg.SHA256,
    headers: Mapping[str, str] | None = None,
    created_at: datetime | None = None,
    proxy_id: str = "kafscale-iceberg",
) -> ProxiedValue:
    """What the proxy produces for `payload` stored at `bucket`/`key` (`rewriteProduceRecords` + `Upload`).

    `sha256` is always the payload's SHA-256; `checksum` is the chosen algorithm's (absent for none);
    `content_type` from a `content-type` header; `original_headers` the allow-listed headers.
    """
    headers = dict(headers or {})
    sha = compute_checksum(ChecksumAlg.SHA256, payload)
    checksum = compute_checksum(checksum_alg, payload)
    kept = {name: value for name, value in headers.items() if name.lower() in SAFE_HEADERS}
    stamp = (created_at or datetime.now(UTC)).astimezone(UTC)
    envelope = Envelope(
        version=1,
        bucket=bucket,
        key=key,
        size=len(payload),
        sha256=sha,
        checksum=checksum,
        checksum_alg=checksum_alg.value,
        content_type=headers.get("content-type", ""),
        original_headers=kept,
        created_at=stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        proxy_id=proxy_id,
    )
    return ProxiedValue(envelope, encode_envelope(envelope), key, payload)


def envelope_metadata(envelope: Envelope) -> dict[str, object]:
    """The `lfs_*` columns of a referenced envelope (`lfsMetadataFromEnvelope`): the envelope's own
    values; without a `checksum`, the `sha256` field (and `sha256` as algorithm when none is named)."""
    checksum, alg = envelope.checksum, envelope.checksum_alg
    if not checksum:
        checksum = envelope.sha256
        alg = alg or ChecksumAlg.SHA256.value
    return {
        "lfs_content_type": envelope.content_type,
        "lfs_blob_size": envelope.size,
        "lfs_checksum": checksum,
        "lfs_checksum_alg": alg,
        "lfs_bucket": envelope.bucket,
        "lfs_key": envelope.key,
    }


def resolved_metadata(envelope: Envelope, expected: ExpectedChecksum, blob_size: int) -> dict[str, object]:
    """The `lfs_*` columns of a resolved blob (`lfsMetadataFromResolved`): the blob's real size, the
    checksum it was checked against (the `sha256` field when the algorithm is none)."""
    checksum, alg = expected.value, expected.alg.value
    if not checksum:
        checksum = envelope.sha256
    return {
        "lfs_content_type": envelope.content_type,
        "lfs_blob_size": blob_size,
        "lfs_checksum": checksum,
        "lfs_checksum_alg": alg,
        "lfs_bucket": envelope.bucket,
        "lfs_key": envelope.key,
    }
