"""S3 access to KafScale segments with boto3: listing after an offset, footers by ranged GET, bytes.

Works against AWS and any S3 endpoint (moto server, MinIO): endpoint, region and path-style come
from configuration. Errors from botocore are translated here, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.domain.planning import ListedSegment
from kafscale_iceberg.exceptions import (
    KafscaleIcebergError,
    S3UnavailableError,
    SegmentObjectMissingError,
)
from kafscale_iceberg.segments.keys import (
    SegmentObjectKind,
    format_segment_key,
    match_segment_key,
    partition_prefix,
    topic_prefix,
)
from kafscale_iceberg.segments.layout import FOOTER_SIZE, SegmentFooter, parse_footer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectTypeDef

_MISSING = {"NoSuchKey", "404", "NotFound"}


@dataclass(frozen=True)
class S3Settings:
    """How to reach S3: a custom endpoint (MinIO, moto), region and path-style addressing."""

    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False


def make_s3_client(settings: S3Settings) -> S3Client:
    """A boto3 S3 client for `settings` (credentials from the environment's default chain)."""
    config = Config(
        s3={"addressing_style": "path" if settings.path_style else "auto"},
        retries={"mode": "standard", "max_attempts": 5},
        # Planning lists partitions, and tasks fetch segments, many at once over one client.
        max_pool_connections=32,
    )
    client: S3Client = boto3.client(
        "s3", endpoint_url=settings.endpoint_url or None, region_name=settings.region or None, config=config
    )
    return client


class S3SegmentStore:
    """Reads the segments of one bucket and namespace."""

    def __init__(self, client: S3Client, bucket: str, namespace: str) -> None:
        self._s3 = client
        self.bucket = bucket
        self.namespace = namespace

    def read_footer(self, key: str) -> SegmentFooter:
        """The footer of a `.kfs` from a 16-byte ranged GET.

        Raises `SegmentObjectMissingError` when the object does not exist and `SegmentFormatError`
        when it does not end in `END!` (a segment the broker never finished, or not a segment).
        """
        return self.read_footer_and_size(key)[0]

    def read_footer_and_size(self, key: str) -> tuple[SegmentFooter, int]:
        """`read_footer`, and the object's size in bytes from the same answer (its `Content-Range`
        total): no extra request. Raises like `read_footer`."""
        response = self._get_object(key, byte_range=f"bytes=-{FOOTER_SIZE}")
        body: bytes = response["Body"]
        total = str(response.get("ContentRange", "")).rpartition("/")[2]
        size = int(total) if total.isdigit() else int(response.get("ContentLength", len(body)))
        return parse_footer(body, source=f"s3://{self.bucket}/{key}"), size

    def exists(self, key: str) -> bool:
        """True when `key` exists (a HEAD request)."""
        try:
            self._s3.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in _MISSING:
                return False
            raise _translate(exc, self.bucket, key) from exc
        except BotoCoreError as exc:
            raise _translate(exc, self.bucket, key) from exc
        return True

    def list_topics(self) -> list[str]:
        """Topics present under the namespace (one delimiter listing)."""
        ns = self.namespace.strip("/")
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in self._child_prefixes(f"{ns}/" if ns else "")]

    def list_partitions(self, topic: str) -> list[int]:
        """Partitions present for `topic`, as numbers (non-numeric children such as `lfs/` are ignored)."""
        children = self._child_prefixes(topic_prefix(self.namespace, topic))
        names = (p.rstrip("/").rsplit("/", 1)[-1] for p in children)
        return sorted(int(n) for n in names if n.isdigit() and (n == "0" or not n.startswith("0")))

    def list_segments(self, topic: str, partition: int, after_offset: int | None) -> list[ListedSegment]:
        """Segments of a partition, starting after the segment based at `after_offset` (all when None).

        One `ListObjectsV2` page per 1000 keys, starting after the zero-padded key: the cost is the
        number of *new* segments. Objects that are not segments are skipped; malformed segment keys
        raise `SegmentKeyError`.
        """
        prefix = partition_prefix(self.namespace, topic, partition)
        start_after = None
        if after_offset is not None and after_offset >= 0:
            # `.kfs` sorts after `.index` for the same base, so this skips both objects of that base.
            start_after = format_segment_key(self.namespace, topic, partition, after_offset)
        by_base: dict[int, dict[str, ObjectTypeDef]] = {}
        for obj in self._iter_objects(prefix, start_after):
            parsed = match_segment_key(obj["Key"], self.namespace)
            if parsed is None:
                continue
            entry = by_base.setdefault(parsed.segment.base_offset, {})
            entry[parsed.kind.value] = obj
        listed = []
        for base, objects in sorted(by_base.items()):
            kfs = objects.get(SegmentObjectKind.SEGMENT.value)
            if kfs is None:
                continue  # an index without its segment: the segment has not landed yet
            listed.append(
                ListedSegment(
                    partition=partition,
                    base_offset=base,
                    key=kfs["Key"],
                    size_bytes=int(kfs["Size"]),
                    has_index=SegmentObjectKind.INDEX.value in objects,
                    last_modified_ms=int(kfs["LastModified"].timestamp() * 1000),
                )
            )
        return listed

    def _iter_objects(self, prefix: str, start_after: str | None) -> Iterator[ObjectTypeDef]:
        paginator = self._s3.get_paginator("list_objects_v2")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after:
            kwargs["StartAfter"] = start_after
        try:
            for page in paginator.paginate(**kwargs):
                yield from page.get("Contents", [])
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, self.bucket, prefix) from exc

    def _child_prefixes(self, prefix: str) -> list[str]:
        paginator = self._s3.get_paginator("list_objects_v2")
        prefixes: list[str] = []
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                prefixes.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, self.bucket, prefix) from exc
        return prefixes

    def _get(self, key: str, byte_range: str | None = None) -> bytes:
        body: bytes = self._get_object(key, byte_range)["Body"]
        return body

    def _get_object(self, key: str, byte_range: str | None = None) -> dict[str, Any]:
        """The GET's answer, its `Body` read into bytes."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if byte_range:
            kwargs["Range"] = byte_range
        try:
            response = self._s3.get_object(**kwargs)
            return {**response, "Body": response["Body"].read()}
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, self.bucket, key) from exc


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _translate(exc: Exception, bucket: str, key: str) -> KafscaleIcebergError:
    if isinstance(exc, ClientError):
        code = _error_code(exc)
        if code in _MISSING:
            return SegmentObjectMissingError(bucket, key)
        if code in {"AccessDenied", "NoSuchBucket", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
            return KafscaleIcebergError(
                f"s3://{bucket}/{key}: {code}: check the bucket name, region and the credentials' permissions"
            )
    return S3UnavailableError(f"s3://{bucket}/{key}: {exc} (will be retried)")
