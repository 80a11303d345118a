"""KafScale segments and their LFS blobs: keys, bytes that do not decode, blobs missing or too large."""

from __future__ import annotations

from kafscale_iceberg.exceptions.base import KafscaleIcebergError, TransientError


class SegmentKeyError(KafscaleIcebergError):
    """An S3 key is not a KafScale segment or index key (or names an invalid topic)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"not a KafScale segment key: {key!r}: {problem}")


class SegmentFormatError(KafscaleIcebergError):
    """A segment or index file is corrupt or truncated.

    Names the object, the byte position where decoding failed and what was expected there. Terminal:
    the bytes will not change by retrying; repair or replace the object, or quarantine it by policy.
    """

    def __init__(self, source: str, position: int, problem: str) -> None:
        self.source = source
        self.position = position
        self.problem = problem
        super().__init__(
            f"{source}: byte {position}: {problem} "
            "(the object is corrupt or truncated: re-upload it from the broker, or set the "
            "corrupt-segment policy to 'quarantine' to record it in the dead-letter table and move on)"
        )


class TruncatedSegmentError(SegmentFormatError):
    """The data ends before a structure that must be complete (header, batch, footer, index entry)."""


class CrcMismatchError(SegmentFormatError):
    """A batch CRC-32C or the footer's body CRC-32C does not match the bytes."""


class UnsupportedCodecError(SegmentFormatError):
    """A record batch names a compression codec that Kafka does not define."""


class DecompressedSizeError(SegmentFormatError):
    """A compressed batch expands beyond the decoder's payload limit (corrupt, or a decompression bomb)."""


class LfsBlobMissingError(KafscaleIcebergError):
    """An LFS envelope's blob does not exist (deleted by lifecycle, never uploaded): its record is
    dead-lettered (`lfs_missing_blob`); the blob will not appear by retrying."""

    def __init__(self, bucket: str, key: str) -> None:
        self.bucket = bucket
        self.key = key
        super().__init__(f"LFS blob s3://{bucket}/{key} does not exist")


class LfsBlobTooLargeError(KafscaleIcebergError):
    """An LFS blob is larger than the mapping lets a value be (`lfs.max_inline_size`, or what one
    Parquet value can hold): its record is dead-lettered (`lfs_too_large`)."""

    def __init__(self, bucket: str, key: str, size: int, limit: int) -> None:
        self.bucket = bucket
        self.key = key
        self.size = size
        self.limit = limit
        super().__init__(f"LFS blob s3://{bucket}/{key} is {size} bytes, more than the limit of {limit}")


class LfsBlobUnavailableError(TransientError):
    """An LFS blob could not be read for a reason a retry (or a fix of the permissions) may cure:
    throttling, a 5xx, a timeout, a refused connection, access denied. The run fails and is
    retried; the record is never dead-lettered for it."""

    def __init__(self, bucket: str, key: str, problem: str) -> None:
        self.bucket = bucket
        self.key = key
        self.problem = problem
        super().__init__(
            f"LFS blob s3://{bucket}/{key} could not be read: {problem} (the run is retried; if this "
            "persists, check that the job's role may s3:GetObject on the bucket - template.yaml "
            "LfsBlobBuckets - and that the bucket is reachable)"
        )
