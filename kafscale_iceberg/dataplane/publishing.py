"""Finished data files published in the background while the task goes on (uploads overlap the work).

`ConcurrentPublisher` is a `FileSink` in front of another one: `publish` hands the staged file to a
small thread pool and returns at once; `wait` blocks until every file handed over is published and
raises the first error. A task calls `wait` before it reports its files, so a reported file is
always in place.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from kafscale_iceberg.ports import FileSink

DEFAULT_MAX_UPLOADS = 4


class ConcurrentPublisher:
    """Publishes through `sink` on up to `max_uploads` threads. Not thread-safe itself (one task)."""

    def __init__(self, sink: FileSink, *, max_uploads: int = DEFAULT_MAX_UPLOADS) -> None:
        self._sink = sink
        self._max_uploads = max_uploads
        self._executor: ThreadPoolExecutor | None = None
        self._futures: list[Future[None]] = []

    def staging_path(self, uri: str) -> str:
        """The wrapped sink's staging path for `uri`."""
        return self._sink.staging_path(uri)

    def publish(self, staging_path: str, uri: str) -> None:
        """Start publishing the staged file to `uri`; errors surface in `wait`. Idempotent per file."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._max_uploads, thread_name_prefix="publish")
        self._futures.append(self._executor.submit(self._sink.publish, staging_path, uri))

    def wait(self, *, raise_errors: bool = True) -> None:
        """Block until every file handed over is published; raise the first error (when asked)."""
        futures, self._futures = self._futures, []
        first: BaseException | None = None
        for future in futures:
            error = future.exception()
            if error is not None and first is None:
                first = error
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if first is not None and raise_errors:
            raise first
