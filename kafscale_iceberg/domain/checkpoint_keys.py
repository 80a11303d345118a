"""Where leases, offsets and watermarks live in etcd, under `offsets.key_prefix` (default `processors`).

The offsets and watermark keys are the KafScale Go processor's, byte for byte, so a user can switch
from it to this product (or back) without reprocessing. The lease key is ours: one per *topic*
(`{prefix}/leases/{topic}`) where the Go processor has one per partition (`{prefix}/leases/{topic}/{p}`);
the two never collide because a Kafka topic name cannot contain `/`.

The prefix is used exactly as configured, like the Go processor does (no leading slash is added, no
trailing slash is stripped). The SQLite store uses the same key strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KAFSCALE_METADATA_SNAPSHOT_KEY = "/kafscale/metadata/snapshot"
"""The KafScale operator's cluster metadata snapshot (JSON, Go field names)."""

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_PARTITION = re.compile(r"0|[1-9][0-9]{0,9}")
MAX_PARTITION = 2**31 - 1


def check_topic(topic: str) -> str:
    """Return `topic` if it is a legal Kafka topic name (so it cannot escape its key), else ValueError."""
    if not _TOPIC.fullmatch(topic) or topic in {".", ".."}:
        raise ValueError(f"invalid topic name {topic!r}: expected 1-249 characters of [A-Za-z0-9._-]")
    return topic


def check_partition(partition: int) -> int:
    """Return `partition` if it is a Kafka partition number (0..2^31-1), else ValueError."""
    if isinstance(partition, bool) or not 0 <= partition <= MAX_PARTITION:
        raise ValueError(f"invalid partition {partition!r}: expected 0..{MAX_PARTITION}")
    return partition


def parse_partition(text: str) -> int | None:
    """The partition number a key suffix names (`"12"` -> 12), or None if it is not a plain decimal."""
    if not _PARTITION.fullmatch(text):
        return None
    value = int(text)
    return value if value <= MAX_PARTITION else None


@dataclass(frozen=True)
class CheckpointKeys:
    """Key builders for one key prefix. Every builder validates the topic and partition it embeds."""

    prefix: str

    def __post_init__(self) -> None:
        if not self.prefix:
            raise ValueError("the checkpoint key prefix (offsets.key_prefix) must not be empty")

    @property
    def leases_prefix(self) -> str:
        """Every lease key, ours (`…/leases/{topic}`) and the Go processor's (`…/leases/{topic}/{p}`)."""
        return f"{self.prefix}/leases/"

    def lease(self, topic: str) -> str:
        """`{prefix}/leases/{topic}`: this product's per-topic lease."""
        return f"{self.prefix}/leases/{check_topic(topic)}"

    def go_partition_leases_prefix(self, topic: str) -> str:
        """`{prefix}/leases/{topic}/`: the KafScale Go processor's per-partition leases of a topic."""
        return f"{self.lease(topic)}/"

    def offsets_prefix(self, topic: str) -> str:
        """`{prefix}/offsets/{topic}/`: every committed-offset key of a topic."""
        return f"{self.prefix}/offsets/{check_topic(topic)}/"

    def offsets(self, topic: str, partition: int) -> str:
        """`{prefix}/offsets/{topic}/{partition}`: the last processed offset of a partition (inclusive)."""
        return f"{self.offsets_prefix(topic)}{check_partition(partition)}"

    def partition_watermarks_prefix(self, topic: str) -> str:
        """`{prefix}/watermarks/{topic}/`: every partition watermark key of a topic."""
        return f"{self.prefix}/watermarks/{check_topic(topic)}/"

    def partition_watermark(self, topic: str, partition: int) -> str:
        """`{prefix}/watermarks/{topic}/{partition}`: same value as the partition's offsets key."""
        return f"{self.partition_watermarks_prefix(topic)}{check_partition(partition)}"

    def topic_watermark(self, topic: str) -> str:
        """`{prefix}/watermarks/{topic}`: the partition watermark with the smallest offset."""
        return f"{self.prefix}/watermarks/{check_topic(topic)}"


def prefix_range_end(prefix: str) -> str:
    """The exclusive end of the key range holding exactly the keys that start with `prefix`.

    Our prefixes end with `/`, so incrementing the last character never carries.
    """
    if not prefix or prefix[-1] == "\U0010ffff":
        raise ValueError(f"cannot build a range end for prefix {prefix!r}")
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
