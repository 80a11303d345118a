"""S3 keys of KafScale segments: `{namespace}/{topic}/{partition}/segment-{baseOffset:020d}.kfs|.index`.

Other objects share the prefix (LFS blobs, `.kfst` time-index sidecars, manifests); they are not
segments and `match_segment_key` returns None for them. A key that *is* named like a segment but is
malformed (unpadded base offset, invalid topic, wrong depth) is an error, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from urllib.parse import unquote_plus

from kafscale_iceberg.exceptions import SegmentKeyError

MAX_TOPIC_LENGTH = 249
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_PARTITION = re.compile(r"0|[1-9][0-9]{0,9}")
_SEGMENT_NAME = re.compile(r"segment-(?P<digits>[0-9]+)\.(?P<ext>kfs|index)")


class SegmentObjectKind(Enum):
    """Which of the two objects of a segment a key names."""

    SEGMENT = "kfs"
    INDEX = "index"


@dataclass(frozen=True, order=True)
class SegmentId:
    """One segment of one partition: where its `.kfs` and `.index` live."""

    namespace: str
    topic: str
    partition: int
    base_offset: int

    @property
    def partition_prefix(self) -> str:
        """The S3 prefix holding every segment of this partition (ends with `/`)."""
        return partition_prefix(self.namespace, self.topic, self.partition)

    @property
    def segment_key(self) -> str:
        """The `.kfs` key."""
        return format_segment_key(self.namespace, self.topic, self.partition, self.base_offset)

    @property
    def index_key(self) -> str:
        """The `.index` key."""
        return format_segment_key(
            self.namespace, self.topic, self.partition, self.base_offset, SegmentObjectKind.INDEX
        )


@dataclass(frozen=True)
class SegmentObject:
    """A parsed segment-object key: the segment it belongs to and which of its two objects it is."""

    segment: SegmentId
    kind: SegmentObjectKind


def normalize_namespace(namespace: str) -> str:
    """Strip surrounding slashes: `"/prod/"` -> `"prod"`; the empty namespace is the bucket root."""
    return namespace.strip("/")


def validate_topic(topic: str) -> str:
    """Return `topic` if it is a valid Kafka topic name, else raise `SegmentKeyError`."""
    if not _TOPIC.fullmatch(topic) or topic in {".", ".."}:
        raise SegmentKeyError(
            topic,
            f"topic names are 1-{MAX_TOPIC_LENGTH} characters of [A-Za-z0-9._-] and not '.' or '..'",
        )
    return topic


def partition_prefix(namespace: str, topic: str, partition: int) -> str:
    """`{namespace}/{topic}/{partition}/` (no leading slash; empty namespace = bucket root)."""
    return f"{topic_prefix(namespace, topic)}{partition}/"


def topic_prefix(namespace: str, topic: str) -> str:
    """`{namespace}/{topic}/` (no leading slash; empty namespace = bucket root)."""
    validate_topic(topic)
    ns = normalize_namespace(namespace)
    return f"{ns}/{topic}/" if ns else f"{topic}/"


def format_segment_key(
    namespace: str,
    topic: str,
    partition: int,
    base_offset: int,
    kind: SegmentObjectKind = SegmentObjectKind.SEGMENT,
) -> str:
    """The key the broker writes, with the base offset zero-padded to 20 digits."""
    if not 0 <= partition <= MAX_PARTITION:
        raise SegmentKeyError(f"{topic}/{partition}", f"partition {partition} is outside 0..{MAX_PARTITION}")
    if not 0 <= base_offset <= MAX_OFFSET:
        raise SegmentKeyError(f"{topic}/{partition}", f"base offset {base_offset} is outside 0..2^63-1")
    return f"{partition_prefix(namespace, topic, partition)}segment-{base_offset:020d}.{kind.value}"


def decode_event_key(key: str) -> str:
    """Decode a key as S3 event notifications carry it (URL-encoded, `+` for space)."""
    return unquote_plus(key)


def match_segment_key(key: str, namespace: str) -> SegmentObject | None:
    """Parse `key` if it names a segment object under `namespace`.

    Returns None for objects that are not segments (outside the namespace, LFS blobs, `.kfst`
    sidecars, manifests). Raises `SegmentKeyError` for a key named like a segment that is malformed.
    """
    ns = normalize_namespace(namespace)
    if ns:
        if not key.startswith(ns + "/"):
            return None
        rest = key[len(ns) + 1 :]
    else:
        rest = key
    parts = rest.split("/")
    name_match = _SEGMENT_NAME.fullmatch(parts[-1])
    if name_match is None:
        return None
    if len(parts) != 3:
        raise SegmentKeyError(
            key, f"expected {{namespace}}/{{topic}}/{{partition}}/segment-N with namespace {ns!r}"
        )
    topic, partition_text, _ = parts
    try:
        validate_topic(topic)
    except SegmentKeyError as exc:
        raise SegmentKeyError(key, f"invalid topic {topic!r}: {exc.problem}") from None
    if not _PARTITION.fullmatch(partition_text) or int(partition_text) > MAX_PARTITION:
        raise SegmentKeyError(key, f"partition {partition_text!r} is not a decimal in 0..{MAX_PARTITION}")
    digits = name_match["digits"]
    if len(digits) != 20:
        raise SegmentKeyError(key, "base offset must be zero-padded to 20 digits, as KafScale writes it")
    base_offset = int(digits)
    if base_offset > MAX_OFFSET:
        raise SegmentKeyError(key, "base offset exceeds 2^63-1")
    return SegmentObject(
        segment=SegmentId(ns, topic, int(partition_text), base_offset),
        kind=SegmentObjectKind(name_match["ext"]),
    )


def parse_segment_key(key: str, namespace: str) -> SegmentObject:
    """Parse `key` as a segment object under `namespace`, or raise `SegmentKeyError` naming it."""
    parsed = match_segment_key(key, namespace)
    if parsed is None:
        raise SegmentKeyError(
            key,
            f"expected {{namespace}}/{{topic}}/{{partition}}/segment-{{20 digits}}.kfs|.index "
            f"under namespace {normalize_namespace(namespace)!r}",
        )
    return parsed


def infer_segment_key(path: str) -> SegmentObject | None:
    """Parse the last three path components as `{topic}/{partition}/segment-N.ext`, namespace unknown.

    For tooling that is handed a file path or key without its namespace; None when it does not fit.
    """
    parts = path.replace("\\", "/").split("/")
    if len(parts) < 3:
        return None
    try:
        parsed = match_segment_key("/".join(parts[-3:]), "")
    except SegmentKeyError:
        return None
    if parsed is None:
        return None
    namespace = normalize_namespace("/".join(parts[:-3]))
    return SegmentObject(segment=replace(parsed.segment, namespace=namespace), kind=parsed.kind)
