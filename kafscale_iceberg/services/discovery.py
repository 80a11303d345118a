"""Which topics and partitions to look at: the Go processor's discovery modes.

Segments always come from the S3 listing; KafScale's etcd metadata snapshot only *filters* which
(topic, partition) pairs count, exactly as the Go processor does:

- `s3`: no filter;
- `etcd`: only topics and partitions the snapshot lists healthy (ErrorCode 0); an unreadable or
  missing snapshot fails the pass (the caller retries next tick) rather than widening it;
- `auto` (the default): like `etcd` when etcd endpoints are configured, falling back to `s3` when the
  snapshot can't be read or doesn't exist; like `s3` without endpoints.

Only mapped topics are ever returned: an unmapped topic is not this product's to ingest.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field

from kafscale_iceberg.domain.cluster_metadata import ClusterMetadata
from kafscale_iceberg.exceptions import DiscoveryError, KafscaleIcebergError
from kafscale_iceberg.ports import MetadataSource, TopicLister

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovered:
    """One discovery pass: the mapped topics to look at, and each one's allowed partitions."""

    topics: tuple[str, ...]
    source: str
    """`s3`, `etcd`, or `s3 (fallback: ...)` when `auto` could not use the snapshot."""
    metadata: ClusterMetadata | None = field(default=None, repr=False)

    def partitions(self, topic: str) -> frozenset[int] | None:
        """The topic's allowed partitions; None when every partition in S3 is allowed."""
        return None if self.metadata is None else self.metadata.partitions(topic)


class TopicDiscovery:
    """Discovery per `discovery.mode` (see the module docstring)."""

    def __init__(
        self,
        mode: str,
        mapped: Collection[str],
        topics: TopicLister,
        metadata: MetadataSource | None,
    ) -> None:
        if mode not in {"auto", "etcd", "s3"}:
            raise ValueError(f"discovery mode must be auto, etcd or s3, got {mode!r}")
        if mode == "etcd" and metadata is None:
            raise ValueError("discovery mode etcd needs etcd endpoints")
        self._mode = mode
        self._mapped = frozenset(mapped)
        self._topics = topics
        self._metadata = metadata

    def discover(self) -> Discovered:
        """The mapped topics present in S3, filtered by the snapshot per the mode. Raises
        `DiscoveryError` in `etcd` mode when the snapshot is unreadable or missing."""
        metadata, source = self._read_metadata()
        present = [t for t in self._topics.list_topics() if t in self._mapped]
        if metadata is not None:
            present = [t for t in present if metadata.partitions(t)]
        return Discovered(topics=tuple(sorted(present)), source=source, metadata=metadata)

    def partitions(self, topic: str) -> frozenset[int] | None:
        """One topic's allowed partitions now (the launcher's filter); None = all partitions in S3."""
        metadata, _ = self._read_metadata()
        return None if metadata is None else metadata.partitions(topic)

    def _read_metadata(self) -> tuple[ClusterMetadata | None, str]:
        if self._mode == "s3" or self._metadata is None:
            return None, "s3"
        try:
            metadata = self._metadata.read_cluster_metadata()
        except KafscaleIcebergError as exc:
            if self._mode == "etcd":
                raise DiscoveryError(
                    f"discovery.mode etcd: the metadata snapshot can't be read: {exc}"
                ) from exc
            logger.warning(
                "metadata snapshot unreadable; discovering from S3 alone", extra={"error": str(exc)}
            )
            return None, f"s3 (fallback: {exc})"
        if metadata is None:
            if self._mode == "etcd":
                raise DiscoveryError(
                    "discovery.mode etcd: KafScale's metadata snapshot does not exist in etcd; is the "
                    "operator running against these endpoints? (mode auto falls back to the S3 listing)"
                )
            return None, "s3 (fallback: no metadata snapshot)"
        return metadata, "etcd"
