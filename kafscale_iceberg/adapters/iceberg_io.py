"""pyiceberg's PyArrow FileIO with one request per small S3 write (`py-io-impl` of every catalog here).

A commit writes a manifest, a manifest list and a metadata JSON, each far smaller than one multipart
part. Arrow opens an S3 output stream with `CreateMultipartUpload` and ends it with `UploadPart` +
`CompleteMultipartUpload`: three requests (three first-byte latencies on S3) per file. With
`allow_delayed_open` Arrow waits for the first full part before starting an upload, and a stream
closed before that is ONE `PutObject`. Larger files still go up in parts. Nothing else changes.
"""

from __future__ import annotations

from pyarrow.fs import FileSystem
from pyiceberg.io import S3_RETRY_STRATEGY_IMPL
from pyiceberg.io.pyarrow import PyArrowFileIO


class SinglePutFileIO(PyArrowFileIO):
    """`PyArrowFileIO` whose S3 file system opens writes lazily (a small file is one `PutObject`)."""

    def _initialize_s3_fs(self, netloc: str | None) -> FileSystem:
        filesystem = super()._initialize_s3_fs(netloc)
        if self.properties.get(S3_RETRY_STRATEGY_IMPL):
            return filesystem  # a custom retry strategy does not survive the rebuild below: keep pyiceberg's
        # pyiceberg builds the S3FileSystem itself; its pickling form carries every option it set.
        rebuild, (options,) = filesystem.__reduce__()
        rebuilt: FileSystem = rebuild({**options, "allow_delayed_open": True})
        return rebuilt
