"""pyiceberg's PyArrow FileIO with one request per small write (`py-io-impl` of every catalog here).

A commit writes a manifest, a manifest list and a metadata JSON, each far smaller than one multipart
part. Two things cost requests there, each a first-byte latency on S3:

- Arrow opens an S3 output stream with `CreateMultipartUpload` and ends it with `UploadPart` +
  `CompleteMultipartUpload`: three requests per file. With `allow_delayed_open` Arrow waits for the
  first full part before starting an upload, and a stream closed before that is ONE `PutObject`.
  Larger files still go up in parts.
- pyiceberg checks that a metadata JSON does not exist before writing it (a HEAD, and on S3 a LIST
  for a "directory" of that name). Its name holds a fresh UUID, and the check is not atomic anyway
  (pyiceberg says so): the catalog's commit is what decides which metadata file wins. Skipped.
- pyiceberg records a manifest's length by asking the store for the file's size just after writing
  it (a HEAD). An Avro file (manifest, manifest list) written here knows its length when it is
  closed: the stream's position, counted by Arrow as the bytes went out. Other files (Parquet data
  files, written by maintenance) keep Arrow's own stream and the HEAD.
"""

from __future__ import annotations

from types import TracebackType

from pyarrow.fs import FileSystem
from pyiceberg.io import S3_RETRY_STRATEGY_IMPL, OutputStream
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO


class SinglePutFileIO(PyArrowFileIO):
    """`PyArrowFileIO` whose small writes are one request each (see the module docstring)."""

    def new_output(self, location: str) -> PyArrowFile:
        """The file at `location`, created without a prior existence check."""
        file = super().new_output(location)
        return _UncheckedNewFile(
            fs=file._filesystem, location=location, path=file._path, buffer_size=file._buffer_size
        )

    def _initialize_s3_fs(self, netloc: str | None) -> FileSystem:
        filesystem = super()._initialize_s3_fs(netloc)
        if self.properties.get(S3_RETRY_STRATEGY_IMPL):
            return filesystem  # a custom retry strategy does not survive the rebuild below: keep pyiceberg's
        # pyiceberg builds the S3FileSystem itself; its pickling form carries every option it set.
        rebuild, (options,) = filesystem.__reduce__()
        rebuilt: FileSystem = rebuild({**options, "allow_delayed_open": True})
        return rebuilt


class _UncheckedNewFile(PyArrowFile):
    _written: int | None = None
    """The file's length once an Avro stream opened here was closed (None: ask the store)."""

    def create(self, overwrite: bool = False) -> OutputStream:
        """Open the file for writing; every file pyiceberg creates has a fresh name (see module)."""
        stream = super().create(overwrite=True)
        if not self.location.endswith(".avro"):
            return stream
        return _LengthRecordingStream(stream, self)

    def __len__(self) -> int:
        """The length this process wrote, when known; else the store's size (a HEAD)."""
        return super().__len__() if self._written is None else self._written

    def wrote(self, length: int) -> None:
        self._written = length


class _LengthRecordingStream:
    """An Arrow output stream that tells its file how many bytes it held when closed (`AvroOutputFile`
    uses `write`, `tell` and `close`)."""

    def __init__(self, stream: OutputStream, file: _UncheckedNewFile) -> None:
        self._stream = stream
        self._file = file

        self._closed = False

    def write(self, data: bytes) -> int:
        return self._stream.write(data)

    def tell(self) -> int:
        return self._stream.tell()

    def close(self) -> None:
        if self._closed:
            return
        length = self._stream.tell()
        self._stream.close()  # the upload happens here: the length counts only once it succeeded
        self._closed = True
        self._file.wrote(length)

    def __enter__(self) -> _LengthRecordingStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
