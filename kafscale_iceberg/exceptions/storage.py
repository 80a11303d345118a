"""Objects in S3: segments, run documents and data files."""

from __future__ import annotations

from kafscale_iceberg.exceptions.base import KafscaleIcebergError, TransientError


class SegmentObjectMissingError(KafscaleIcebergError):
    """An object the caller expected is not in the bucket (not yet written, or expired by lifecycle)."""

    def __init__(self, bucket: str, key: str) -> None:
        self.bucket = bucket
        self.key = key
        super().__init__(f"s3://{bucket}/{key} does not exist")


class S3UnavailableError(TransientError):
    """S3 could not be reached or refused the request in a way a retry may fix."""


class DocumentMissingError(KafscaleIcebergError):
    """No document at the URI (a plan never written, a result a failed job never wrote)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(f"{uri} does not exist")


class DocumentStoreError(TransientError):
    """Reading or writing a document failed in a way a retry may fix."""


class DataFilePublishError(TransientError):
    """A finished data file could not be moved or uploaded to its URI (retrying the run may help)."""


class FileListingError(TransientError):
    """Files under a prefix could not be listed or deleted (names the URI; retry may help)."""
