"""Committed offsets: values, their stored JSON (the KafScale Go processor's, byte for byte), watermarks.

`offset` is the offset of the last processed record, *inclusive* (KafScale's convention, not Kafka's
next-offset one); a partition without a stored value has committed nothing (`NO_OFFSET`, -1).

Stored value, compact JSON in exactly this key order:
`{"offset":41,"last_timestamp_ms":1700000000123,"updated_at":1700000000456}`.
`last_timestamp_ms` is the newest record timestamp committed for the partition (the Go processor writes
wall-clock time there; both read back the same), `updated_at` the wall clock at commit, Unix ms.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kafscale_iceberg.domain.checkpoint_keys import check_partition, check_topic, parse_partition
from kafscale_iceberg.domain.runs import NO_OFFSET
from kafscale_iceberg.exceptions import CheckpointDataError, OffsetRegressionError

__all__ = [
    "NO_OFFSET",
    "CommittedOffsets",
    "OffsetState",
    "OffsetUpdate",
    "OffsetWrite",
    "decode_offset_state",
    "decode_partition_states",
    "encode_offset_state",
    "plan_offset_write",
    "topic_watermark",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_FIELDS = ("offset", "last_timestamp_ms", "updated_at")


def _check_int64(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{name} must be a 64-bit integer, got {value!r}")


@dataclass(frozen=True)
class OffsetState:
    """What is stored for one partition: last processed offset (inclusive) and when/what it was."""

    offset: int
    last_timestamp_ms: int
    updated_at_ms: int

    def __post_init__(self) -> None:
        _check_int64("offset", self.offset)
        _check_int64("last_timestamp_ms", self.last_timestamp_ms)
        _check_int64("updated_at_ms", self.updated_at_ms)
        if self.offset < NO_OFFSET:
            raise ValueError(f"offset must be >= {NO_OFFSET}, got {self.offset}")


@dataclass(frozen=True)
class OffsetUpdate:
    """What a commit (or a reset) asks to store for one partition; the store adds `updated_at`."""

    offset: int
    last_timestamp_ms: int

    def __post_init__(self) -> None:
        _check_int64("offset", self.offset)
        _check_int64("last_timestamp_ms", self.last_timestamp_ms)
        if self.offset < NO_OFFSET:
            raise ValueError(f"offset must be >= {NO_OFFSET}, got {self.offset}")


@dataclass(frozen=True)
class CommittedOffsets:
    """The committed offsets of one topic, by partition. A partition not in `states` is at -1."""

    topic: str
    states: Mapping[int, OffsetState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "states", MappingProxyType(dict(sorted(self.states.items()))))

    def offset(self, partition: int) -> int:
        """The last processed offset of `partition`, inclusive; `NO_OFFSET` (-1) if none is stored."""
        state = self.states.get(partition)
        return NO_OFFSET if state is None else state.offset

    def state(self, partition: int) -> OffsetState | None:
        """The stored state of `partition`, or None if nothing is stored."""
        return self.states.get(partition)


@dataclass(frozen=True)
class OffsetWrite:
    """Everything one commit writes, in one transaction: offsets + partition watermarks + topic watermark."""

    topic: str
    states: Mapping[int, OffsetState]
    """Written to both `offsets/{topic}/{p}` and `watermarks/{topic}/{p}`."""
    topic_watermark: OffsetState
    """Written to `watermarks/{topic}`."""


def encode_offset_state(state: OffsetState) -> bytes:
    """The stored JSON, byte-identical to the Go processor's `json.Marshal(offsetState)`."""
    document = {
        "offset": state.offset,
        "last_timestamp_ms": state.last_timestamp_ms,
        "updated_at": state.updated_at_ms,
    }
    return json.dumps(document, separators=(",", ":")).encode("ascii")


def decode_offset_state(raw: bytes, *, key: str) -> OffsetState:
    """Parse a stored offsets or watermark value (ours or the Go processor's).

    Unknown extra fields are ignored, as Go's decoder does. Raises `CheckpointDataError` naming the
    key when the value is not a JSON object with the three integer fields.
    """
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointDataError(key, f"not JSON ({exc}): {raw[:120]!r}") from exc
    if not isinstance(document, dict):
        raise CheckpointDataError(key, f"expected a JSON object with {', '.join(_FIELDS)}: {raw[:120]!r}")
    values: list[int] = []
    for name in _FIELDS:
        value = document.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckpointDataError(key, f"field {name!r} must be an integer, got {value!r}: {raw[:120]!r}")
        values.append(value)
    try:
        return OffsetState(offset=values[0], last_timestamp_ms=values[1], updated_at_ms=values[2])
    except ValueError as exc:
        raise CheckpointDataError(key, str(exc)) from exc


def decode_partition_states(items: Iterable[tuple[str, bytes]], *, prefix: str) -> dict[int, OffsetState]:
    """Decode `{prefix}{partition}` -> value pairs (an offsets or partition-watermark listing).

    Raises `CheckpointDataError` for a key under the prefix that does not end in a partition number.
    """
    states: dict[int, OffsetState] = {}
    for key, raw in items:
        suffix = key[len(prefix) :] if key.startswith(prefix) else key
        partition = parse_partition(suffix)
        if partition is None:
            raise CheckpointDataError(key, f"expected {prefix}<partition number>")
        states[partition] = decode_offset_state(raw, key=key)
    return states


def topic_watermark(partition_watermarks: Mapping[int, OffsetState]) -> OffsetState | None:
    """The partition watermark with the smallest offset, as the Go processor picks it.

    Go scans the keys in etcd (byte) order - partition "10" before "2" - and keeps the first strictly
    smaller offset, so ties go to the lexicographically smallest partition number.
    """
    best: OffsetState | None = None
    for partition in sorted(partition_watermarks, key=str):
        state = partition_watermarks[partition]
        if best is None or state.offset < best.offset:
            best = state
    return best


def plan_offset_write(
    topic: str,
    *,
    committed: Mapping[int, OffsetState],
    partition_watermarks: Mapping[int, OffsetState],
    updates: Mapping[int, OffsetUpdate],
    now_ms: int,
    allow_rewind: bool,
) -> OffsetWrite:
    """Decide what one commit writes, from what is stored now.

    Raises `OffsetRegressionError` (for the first offending partition) when an update would move a
    committed offset backwards and `allow_rewind` is false; an equal offset is accepted (a replayed
    commit). The topic watermark is computed over *all* the topic's partition watermarks: the stored
    ones overlaid with this write's.
    """
    check_topic(topic)
    if not updates:
        raise ValueError(f"no partitions to commit for topic {topic!r}")
    states: dict[int, OffsetState] = {}
    for partition, update in sorted(updates.items()):
        check_partition(partition)
        current = committed.get(partition)
        if not allow_rewind and current is not None and update.offset < current.offset:
            raise OffsetRegressionError(topic, partition, current.offset, update.offset)
        states[partition] = OffsetState(
            offset=update.offset, last_timestamp_ms=update.last_timestamp_ms, updated_at_ms=now_ms
        )
    merged = {**partition_watermarks, **states}
    watermark = topic_watermark(merged) or states[min(states)]  # never None: `states` is not empty
    return OffsetWrite(topic=topic, states=MappingProxyType(states), topic_watermark=watermark)
