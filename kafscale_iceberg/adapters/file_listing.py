"""Listing and deleting the files under a storage prefix (`file://`, plain paths, `s3://`).

What orphan-file cleanup needs (`services/maintenance.py`): every file under the product's
run-scoped data prefixes with its size and modification time, and deleting the ones no snapshot
references. Local staging files (`.{name}.{pid}.inprogress`) are files too: a dead writer's are
orphans like any other once past the grace period.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.adapters.documents import local_path
from kafscale_iceberg.adapters.s3_segments import S3Settings, make_s3_client
from kafscale_iceberg.domain.maintenance import OrphanFile
from kafscale_iceberg.exceptions import FileListingError, KafscaleIcebergError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

_DELETE_BATCH = 1000


class StorageFileLister:
    """Lists and deletes files under local or S3 prefixes (the `FileLister` port)."""

    def __init__(self, s3: S3Settings | None = None, client: S3Client | None = None) -> None:
        self._settings = s3 or S3Settings()
        self._client = client

    def list_files(self, prefix: str) -> list[OrphanFile]:
        """Every file under `prefix` (recursively), as URIs of the prefix's own form."""
        path = local_path(prefix)
        if path is not None:
            found: list[OrphanFile] = []
            if not path.exists():
                return found
            scheme = "file://" if prefix.startswith("file://") else ""
            for folder, _dirs, names in os.walk(path):
                for name in names:
                    full = os.path.join(folder, name)
                    try:
                        stat = os.stat(full)
                    except FileNotFoundError:
                        continue
                    found.append(OrphanFile(f"{scheme}{full}", stat.st_size, int(stat.st_mtime * 1000)))
            return found
        bucket, key = _s3_location(prefix)
        files: list[OrphanFile] = []
        try:
            paginator = self._s3().get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=bucket, Prefix=key.rstrip("/") + "/"):
                for item in page.get("Contents", []):
                    modified = int(item["LastModified"].timestamp() * 1000)
                    files.append(OrphanFile(f"s3://{bucket}/{item['Key']}", int(item["Size"]), modified))
        except (ClientError, BotoCoreError) as exc:
            raise FileListingError(f"{prefix}: could not list the files: {exc}") from exc
        return files

    def delete_files(self, uris: Iterable[str]) -> int:
        """Delete `uris` (missing ones are fine); returns how many were asked for. Idempotent."""
        by_bucket: dict[str, list[str]] = {}
        count = 0
        for uri in uris:
            count += 1
            path = local_path(uri)
            if path is not None:
                path.unlink(missing_ok=True)
                continue
            bucket, key = _s3_location(uri)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            for start in range(0, len(keys), _DELETE_BATCH):
                batch: list[ObjectIdentifierTypeDef] = [
                    {"Key": k} for k in keys[start : start + _DELETE_BATCH]
                ]
                try:
                    self._s3().delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
                except (ClientError, BotoCoreError) as exc:
                    raise FileListingError(f"s3://{bucket}: could not delete files: {exc}") from exc
        return count

    def _s3(self) -> S3Client:
        if self._client is None:
            self._client = make_s3_client(self._settings)
        return self._client


def _s3_location(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise KafscaleIcebergError(f"{uri!r} is not an s3://bucket/key, file:// URI or local path")
    return parsed.netloc, parsed.path.lstrip("/")
