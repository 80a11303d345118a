"""Reading KafScale LFS blobs: from S3 with boto3, or from a local folder holding a bucket's keys.

Errors are translated here, once, into the three outcomes the data plane tells apart: the blob does
not exist (`LfsBlobMissingError`: its record is dead-lettered), it is larger than allowed
(`LfsBlobTooLargeError`, raised from the object's length before its body is read), or it could not
be read now (`LfsBlobUnavailableError`, transient: throttling, 5xx, timeouts, refused connections,
access denied - the run fails and is retried, the record is never dead-lettered for it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.domain.runs import SegmentSource
from kafscale_iceberg.exceptions import LfsBlobMissingError, LfsBlobTooLargeError, LfsBlobUnavailableError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


class S3BlobReader:
    """Reads whole blobs with one GET each; thread-safe (one boto3 client shared by the fetch threads)."""

    def __init__(self, client: S3Client) -> None:
        self._s3 = client

    @classmethod
    def for_settings(cls, settings: S3Settings, *, concurrency: int) -> S3BlobReader:
        """A reader whose connection pool fits `concurrency` parallel GETs (credentials: default chain)."""
        config = Config(
            s3={"addressing_style": "path" if settings.path_style else "auto"},
            retries={"mode": "standard", "max_attempts": 5},
            max_pool_connections=max(10, concurrency),
        )
        client: S3Client = boto3.client(
            "s3",
            endpoint_url=settings.endpoint_url or None,
            region_name=settings.region or None,
            config=config,
        )
        return cls(client)

    def read_blob(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        """The blob's bytes; `LfsBlobTooLargeError` when its length exceeds `max_bytes` (body unread)."""
        try:
            response = self._s3.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise LfsBlobMissingError(bucket, key) from None
            raise LfsBlobUnavailableError(bucket, key, f"{code or 'error'}: {exc}") from exc
        except BotoCoreError as exc:
            raise LfsBlobUnavailableError(bucket, key, str(exc)) from exc
        body = response["Body"]
        try:
            length = int(response.get("ContentLength", 0))
            if length > max_bytes:
                raise LfsBlobTooLargeError(bucket, key, length, max_bytes)
            data = body.read()
        except (BotoCoreError, OSError) as exc:
            raise LfsBlobUnavailableError(bucket, key, f"reading the body: {exc}") from exc
        finally:
            body.close()
        if len(data) > max_bytes:
            raise LfsBlobTooLargeError(bucket, key, len(data), max_bytes)
        return data


class LocalBlobReader:
    """Reads blobs from a local folder holding the bucket's keys (`{root}/{key}`, any bucket)."""

    def __init__(self, root: str | Path) -> None:
        self._root = Path(root)

    def read_blob(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        """The blob's bytes; `LfsBlobTooLargeError` when its size exceeds `max_bytes` (file unread)."""
        path = self._root / key
        try:
            size = path.stat().st_size
            if size > max_bytes:
                raise LfsBlobTooLargeError(bucket, key, size, max_bytes)
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise LfsBlobMissingError(bucket, key) from None
        except OSError as exc:
            raise LfsBlobUnavailableError(bucket, key, str(exc)) from exc


def blob_reader_for(
    source: SegmentSource, settings: S3Settings, *, concurrency: int
) -> S3BlobReader | LocalBlobReader:
    """Where a plan's blobs are read: the segment folder for a local source, else S3 with `settings`."""
    if source.root is not None:
        return LocalBlobReader(source.root)
    return S3BlobReader.for_settings(settings, concurrency=concurrency)
