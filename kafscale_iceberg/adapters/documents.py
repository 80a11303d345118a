"""Small documents (run plans, run results) at URIs: `s3://bucket/key`, `file:///path` or a plain path.

The launcher writes plans, the Spark job reads them and writes results, the commit step reads both;
all through this one module, so the three agree on how a URI is read.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.adapters.s3_segments import S3Settings, make_s3_client
from kafscale_iceberg.config.base import DEFAULT_RUNS_DIRECTORY
from kafscale_iceberg.domain.tickets import join_uri
from kafscale_iceberg.exceptions import (
    ConfigError,
    DocumentMissingError,
    DocumentStoreError,
    KafscaleIcebergError,
)

__all__ = ["DocumentMissingError", "DocumentStore", "DocumentStoreError", "join_uri", "local_path"]

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def refused_or_failed(uri: str, exc: ClientError) -> KafscaleIcebergError:
    """`ConfigError` (terminal) when S3 denied access to a run document: a missing permission, or
    `runs.location` inside a table bucket (Amazon S3 Tables, SeaweedFS), which refuses every object
    but its tables' files; else `DocumentStoreError` (transient)."""
    if exc.response.get("Error", {}).get("Code") in {"AccessDenied", "403"}:
        return ConfigError(
            "runs.location",
            f"S3 denied access to {uri} ({exc}). Give the role s3:GetObject/PutObject on runs.location; "
            "if it is in a table bucket (Amazon S3 Tables, SeaweedFS: iceberg.warehouse's default puts "
            f"it at {{warehouse}}/{DEFAULT_RUNS_DIRECTORY}), set runs.location to a normal bucket: a table "
            "bucket holds tables only",
        )
    return DocumentStoreError(f"{uri}: {exc}")


def local_path(uri: str) -> Path | None:
    """The filesystem path of a `file://` URI or a plain path; None for other schemes."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "":
        return Path(uri)
    return None


class DocumentStore:
    """Reads and writes whole documents at URIs; the S3 client is made on first S3 use.

    Thread-safe: tasks read segments from several threads at once (boto3 clients are thread-safe;
    making one is not, so that is done under a lock).
    """

    def __init__(self, s3: S3Settings | None = None, client: S3Client | None = None) -> None:
        self._settings = s3 or S3Settings()
        self._client = client
        self._client_lock = threading.Lock()

    def read_bytes(self, uri: str) -> bytes:
        """The document's bytes. Raises `DocumentMissingError` or `DocumentStoreError`."""
        path = local_path(uri)
        if path is not None:
            try:
                return path.read_bytes()
            except FileNotFoundError:
                raise DocumentMissingError(uri) from None
            except OSError as exc:
                raise DocumentStoreError(f"{uri}: {exc}") from exc
        bucket, key = _s3_location(uri)
        try:
            body: bytes = self._s3().get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise DocumentMissingError(uri) from None
            raise refused_or_failed(uri, exc) from exc
        except BotoCoreError as exc:
            raise DocumentStoreError(f"{uri}: {exc}") from exc
        return body

    def read_range(self, uri: str, start: int, end_inclusive: int | None) -> bytes:
        """Bytes `start..end_inclusive` of the document (to its end when None); errors as `read_bytes`."""
        path = local_path(uri)
        if path is not None:
            try:
                with path.open("rb") as handle:
                    handle.seek(start)
                    return handle.read(-1 if end_inclusive is None else end_inclusive - start + 1)
            except FileNotFoundError:
                raise DocumentMissingError(uri) from None
            except OSError as exc:
                raise DocumentStoreError(f"{uri}: {exc}") from exc
        bucket, key = _s3_location(uri)
        wanted = f"bytes={start}-{'' if end_inclusive is None else end_inclusive}"
        try:
            body: bytes = self._s3().get_object(Bucket=bucket, Key=key, Range=wanted)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise DocumentMissingError(uri) from None
            raise refused_or_failed(uri, exc) from exc
        except BotoCoreError as exc:
            raise DocumentStoreError(f"{uri} ({wanted}): {exc}") from exc
        return body

    def read_text(self, uri: str) -> str:
        """The document as UTF-8 text."""
        return self.read_bytes(uri).decode("utf-8")

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write (replace) the document atomically: readers see the old or the new bytes. Idempotent."""
        path = local_path(uri)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as handle:
                handle.write(data)
            os.replace(handle.name, path)
            return
        bucket, key = _s3_location(uri)
        try:
            self._s3().put_object(Bucket=bucket, Key=key, Body=data)
        except ClientError as exc:
            raise refused_or_failed(uri, exc) from exc
        except BotoCoreError as exc:
            raise DocumentStoreError(f"{uri}: {exc}") from exc

    def write_text(self, uri: str, text: str) -> None:
        """Write (replace) the document as UTF-8 text. Idempotent."""
        self.write_bytes(uri, text.encode("utf-8"))

    def exists(self, uri: str) -> bool:
        """True when a document is at `uri`."""
        try:
            self.read_bytes(uri)
        except DocumentMissingError:
            return False
        return True

    def _s3(self) -> S3Client:
        with self._client_lock:
            if self._client is None:
                self._client = make_s3_client(self._settings)
            return self._client


def _s3_location(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
        raise KafscaleIcebergError(f"{uri!r} is not an s3://bucket/key, file:// URI or local path")
    return parsed.netloc, parsed.path.lstrip("/")
