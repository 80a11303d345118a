"""The KafScale cluster metadata snapshot (`/kafscale/metadata/snapshot` in etcd), as a topic filter.

The operator and brokers write Go's `encoding/json` of `metadata.ClusterMetadata`: no json tags, so
the keys are Go field names (`Topics`, `ErrorCode`, `Topic`, `Partitions`, `Partition`, ...), and Go
reads them back case-insensitively; so do we. Like the Go processor's discovery filter, a topic or
partition with a non-zero `ErrorCode` is left out, and so is a topic with no name or no usable
partition. Older KafScale releases named the fields `Name` and `PartitionIndex`; those are accepted
when the current names are absent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kafscale_iceberg.exceptions import CheckpointDataError


@dataclass(frozen=True)
class ClusterMetadata:
    """Which partitions of which topics the cluster reports as healthy (ErrorCode 0)."""

    partitions_by_topic: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "partitions_by_topic", MappingProxyType(dict(sorted(self.partitions_by_topic.items())))
        )

    def partitions(self, topic: str) -> frozenset[int]:
        """The topic's healthy partitions; empty if the snapshot does not list the topic."""
        return self.partitions_by_topic.get(topic, frozenset())


def _field(obj: Mapping[str, object], *names: str) -> object:
    """Go's rule: an exact key match wins, else a case-insensitive one; then the next alias."""
    for name in names:
        if name in obj:
            return obj[name]
        folded = name.casefold()
        found: object = None
        matched = False
        for key, value in obj.items():
            if key.casefold() == folded:
                found, matched = value, True
        if matched:
            return found
    return None


def _int(value: object, where: str, key: str) -> int:
    if value is None:
        return 0  # Go leaves a missing or null integer at zero
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointDataError(key, f"{where} must be an integer, got {value!r}")
    return value


def _list(value: object, where: str, key: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CheckpointDataError(key, f"{where} must be a list, got {type(value).__name__}")
    return value


def _object(value: object, where: str, key: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise CheckpointDataError(key, f"{where} must be an object, got {type(value).__name__}")
    return value


def parse_metadata_snapshot(raw: bytes, *, key: str) -> ClusterMetadata:
    """Parse the snapshot JSON into a topic -> healthy partitions filter.

    Raises `CheckpointDataError` naming `key` and the JSON path when the value is not a snapshot.
    """
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointDataError(key, f"metadata snapshot is not JSON: {exc}") from exc
    root = _object(document, "the snapshot", key)
    partitions_by_topic: dict[str, frozenset[int]] = {}
    for t_index, topic_value in enumerate(_list(_field(root, "Topics"), "Topics", key)):
        where = f"Topics[{t_index}]"
        topic = _object(topic_value, where, key)
        if _int(_field(topic, "ErrorCode"), f"{where}.ErrorCode", key) != 0:
            continue
        name = _field(topic, "Topic", "Name")
        if name is not None and not isinstance(name, str):
            raise CheckpointDataError(key, f"{where}.Topic must be a string, got {name!r}")
        if not name:
            continue
        healthy: set[int] = set()
        partition_values = _list(_field(topic, "Partitions"), f"{where}.Partitions", key)
        for p_index, partition_value in enumerate(partition_values):
            p_where = f"{where}.Partitions[{p_index}]"
            partition = _object(partition_value, p_where, key)
            if _int(_field(partition, "ErrorCode"), f"{p_where}.ErrorCode", key) != 0:
                continue
            healthy.add(_int(_field(partition, "Partition", "PartitionIndex"), f"{p_where}.Partition", key))
        if healthy:
            partitions_by_topic[name] = partitions_by_topic.get(name, frozenset()) | healthy
    return ClusterMetadata(partitions_by_topic=partitions_by_topic)
