"""The storage clients a run's driver and tasks use, made once per process where they run."""

from __future__ import annotations

import functools

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3Settings


@functools.cache
def worker_stores(s3: S3Settings) -> tuple[DocumentStore, StagedFileStore]:
    """One reader and one sink per process and S3 settings (an S3 client is costly to make)."""
    return DocumentStore(s3), StagedFileStore(s3)
