"""Publishing finished data files: a local file moved into place, or uploaded to S3 (multipart).

Files are staged on local disk while pyarrow writes them, so an S3 destination never holds a
half-written object and memory stays flat however large the file. Publishing replaces any object of
the same name, which is what makes a retried run's deterministic file names idempotent.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.adapters.documents import local_path
from kafscale_iceberg.adapters.s3_segments import S3Settings, make_s3_client
from kafscale_iceberg.exceptions import DataFilePublishError, KafscaleIcebergError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# Files over 16 MiB go up in 8 MiB parts, 8 at a time: on S3 one PUT stream is bandwidth-bound per
# connection, so a 128 MiB file uploads about 8x faster in parallel parts (AWS's own guidance).
MULTIPART_THRESHOLD = 16 * 1024 * 1024
MULTIPART_CHUNK = 8 * 1024 * 1024
_TRANSFER = TransferConfig(
    multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_CHUNK, max_concurrency=8
)


class StagedFileStore:
    """Stages data files on local disk and publishes them to `file://`, plain-path or `s3://` URIs.

    Picklable (the client is made lazily, per process), so a Spark job can ship one to its
    executors; thread-safe, so a task can publish several files at once.
    """

    def __init__(self, s3: S3Settings | None = None, staging_dir: str | None = None) -> None:
        self._settings = s3 or S3Settings()
        self._staging_dir = staging_dir
        self._client: S3Client | None = None
        self._client_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state["_client_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client_lock = threading.Lock()

    def staging_path(self, uri: str) -> str:
        """A local path to write `uri` to: beside the destination when local, else a temp file."""
        path = local_path(uri)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            return str(path.with_name(f".{path.name}.{os.getpid()}.inprogress"))
        handle, name = tempfile.mkstemp(suffix=".parquet", dir=self._staging_dir)
        os.close(handle)
        return name

    def publish(self, staging_path: str, uri: str) -> None:
        """Move or upload the staged file to `uri`, replacing what is there. Idempotent."""
        path = local_path(uri)
        if path is not None:
            try:
                os.replace(staging_path, path)
            except OSError as exc:
                raise DataFilePublishError(
                    f"{uri}: could not move the staged file into place: {exc}"
                ) from exc
            return
        parsed = urlparse(uri)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise KafscaleIcebergError(f"{uri!r} is not an s3://bucket/key, file:// URI or local path")
        try:
            self._s3().upload_file(staging_path, parsed.netloc, parsed.path.lstrip("/"), Config=_TRANSFER)
        except (ClientError, BotoCoreError, S3UploadFailedError, OSError) as exc:
            raise DataFilePublishError(f"{uri}: upload failed: {exc}") from exc
        finally:
            Path(staging_path).unlink(missing_ok=True)

    def _s3(self) -> S3Client:
        with self._client_lock:
            if self._client is None:
                self._client = make_s3_client(self._settings)
            return self._client
