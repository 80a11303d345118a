"""KafScale LFS envelopes in a task: detect, decode, resolve blobs in parallel with bounded memory.

The Go processor's four modes (`mappings[].lfs.mode`), applied to one segment's records before they
are converted (`LfsStage.parts`):

- `resolve`: fetch the envelope's blob, verify its checksum, write the blob as the record's value;
  `max_inline_size` > 0 caps the blob's size;
- `reference`: keep the envelope as the value;
- `skip`: leave the record out (counted `skipped_lfs`; its offset is committed);
- `hybrid`: resolve when `0 < size <= max_inline_size`, else reference.

Values that are not envelopes (`is_lfs_envelope`) pass unchanged in every mode. Where the Go
processor drops a record, this stage rejects it instead, and the converter makes it a dead-letter
row with the reason (`lfs_decode`, `lfs_missing_blob`, `lfs_checksum`, `lfs_too_large`) and the blob
key. A blob that cannot be read *now* (throttling, 5xx, timeout, access denied) raises
`LfsBlobUnavailableError`: the task fails and the run is retried; nothing is dead-lettered for it.

Memory: blobs are fetched `resolve_concurrency` at a time, in order, while the bytes in flight stay
under `inflight_bytes` (one blob is always allowed, whatever its size); resolved records are handed
on in *parts* of about `part_bytes`, each converted and written before the next is assembled. So a
task holds at most about `part_bytes + inflight_bytes` plus one blob, whatever the segment holds.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.domain.runs import (
    LFS_DURATION_BUCKETS,
    LFS_METADATA_COLUMNS,
    LfsCounts,
    LfsMode,
    LfsSettings,
)
from kafscale_iceberg.exceptions import EnvelopeError, LfsBlobMissingError, LfsBlobTooLargeError
from kafscale_iceberg.ports import BlobReader
from kafscale_iceberg.segments.lfs import (
    ENVELOPE_MARKER,
    MARKER_WINDOW,
    MIN_ENVELOPE_BYTES,
    Envelope,
    ExpectedChecksum,
    compute_checksum,
    decode_envelope,
    envelope_checksum,
    envelope_metadata,
    resolved_metadata,
)

DEFAULT_PART_BYTES = 64 * 1024 * 1024
DEFAULT_INFLIGHT_BYTES = 64 * 1024 * 1024
MAX_BLOB_BYTES = 1536 * 1024 * 1024
"""The largest blob written as a value: one Arrow binary array (and Parquet value) holds < 2 GiB."""

DECODE = "decode"
MISSING_BLOB = "missing_blob"
CHECKSUM = "checksum"
TOO_LARGE = "too_large"
REASONS = (DECODE, MISSING_BLOB, CHECKSUM, TOO_LARGE)
"""`lfs_resolution_errors_total{reason}`; the dead-letter `error_kind` is `lfs_{reason}`."""


@dataclass(frozen=True)
class LfsPart:
    """Records ready to convert: values resolved, skipped envelopes left out.

    `rejected` maps a row of `records` to `(error_kind, message)`: a dead-letter row, never a table
    row. `metadata` holds the `lfs_*` columns over `records` (null for rows that are not envelopes)
    when `store_metadata` is on, else None.
    """

    records: pa.Table
    rejected: dict[int, tuple[str, str]] = field(default_factory=dict)
    metadata: dict[str, pa.Array] | None = None


@dataclass
class _Fetched:
    payload: bytes | None = None
    metadata: dict[str, object] | None = None
    rejection: tuple[str, str] | None = None
    seconds: float = 0.0


@dataclass
class _Tally:
    skipped: int = 0
    resolved: int = 0
    resolved_bytes: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    counts: list[int] = field(default_factory=lambda: [0] * (len(LFS_DURATION_BUCKETS) + 1))
    sums: list[float] = field(default_factory=lambda: [0.0] * (len(LFS_DURATION_BUCKETS) + 1))

    def error(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1

    def observe(self, seconds: float, size: int) -> None:
        self.resolved += 1
        self.resolved_bytes += size
        index = bisect.bisect_left(LFS_DURATION_BUCKETS, seconds)
        self.counts[index] += 1
        self.sums[index] += seconds

    def counts_model(self) -> LfsCounts:
        if not (self.resolved or self.errors):
            return LfsCounts()
        return LfsCounts(
            resolved=self.resolved,
            resolved_bytes=self.resolved_bytes,
            errors=dict(self.errors),
            duration_counts=tuple(self.counts),
            duration_sums=tuple(self.sums),
        )


def envelope_rows(values: pa.Array) -> np.ndarray:
    """Indices of the values that are LFS envelopes (`is_lfs_envelope`, vectorized)."""
    if len(values) == 0:
        return np.empty(0, np.int64)
    long_enough = pc.greater_equal(pc.binary_length(values), MIN_ENVELOPE_BYTES)
    opens = pc.starts_with(values, "{")
    marked = pc.match_substring(pc.binary_slice(values, 0, MARKER_WINDOW), ENVELOPE_MARKER.decode())
    candidate = pc.fill_null(pc.and_(pc.and_(long_enough, opens), marked), False)
    return np.flatnonzero(np.asarray(candidate.to_numpy(zero_copy_only=False), dtype=bool))


class LfsStage:
    """Applies a mapping's LFS settings to a task's records; one per task (it owns the fetch threads).

    `close()` stops the threads (idempotent); counts accumulate until `take_counts()`.
    """

    def __init__(
        self,
        settings: LfsSettings,
        *,
        reader: BlobReader | None = None,
        part_bytes: int = DEFAULT_PART_BYTES,
        inflight_bytes: int = DEFAULT_INFLIGHT_BYTES,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings
        self._reader = reader
        self._part_bytes = part_bytes
        self._inflight_bytes = inflight_bytes
        self._clock = clock
        self._pool: ThreadPoolExecutor | None = None
        self._tally = _Tally()

    def close(self) -> None:
        """Stop the fetch threads, dropping fetches not started. Idempotent."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def take_counts(self) -> tuple[int, LfsCounts]:
        """`(skipped, counts)` since the last call."""
        tally, self._tally = self._tally, _Tally()
        return tally.skipped, tally.counts_model()

    def parts(self, records: pa.Table) -> Iterator[LfsPart]:
        """`records` (one segment's, in offset order) as parts ready to convert, in order.

        Raises `LfsBlobUnavailableError` when a blob cannot be read now (the caller fails the task).
        """
        mode = self.settings.mode
        if mode is LfsMode.OFF or records.num_rows == 0:
            yield LfsPart(records, metadata=self._metadata(records.num_rows, {}))
            return
        values = _values(records)
        rows = envelope_rows(values)
        if mode is LfsMode.SKIP:
            if len(rows):
                keep = np.ones(records.num_rows, bool)
                keep[rows] = False
                records = records.filter(pa.array(keep))
                self._tally.skipped += len(rows)
            yield LfsPart(records, metadata=self._metadata(records.num_rows, {}))
            return
        rejected: dict[int, tuple[str, str]] = {}
        metadata: dict[int, dict[str, object]] = {}
        fetches: list[tuple[int, Envelope, ExpectedChecksum]] = []
        for row in rows.tolist():
            self._classify(row, values[row].as_py(), rejected, metadata, fetches)
        if not fetches:
            yield LfsPart(records, rejected, self._metadata(records.num_rows, metadata))
            return
        yield from self._resolve(records, values, fetches, rejected, metadata)

    # -- classification ------------------------------------------------------------------------------

    def _classify(
        self,
        row: int,
        raw: bytes,
        rejected: dict[int, tuple[str, str]],
        metadata: dict[int, dict[str, object]],
        fetches: list[tuple[int, Envelope, ExpectedChecksum]],
    ) -> None:
        settings = self.settings
        try:
            envelope = decode_envelope(raw)
        except EnvelopeError as exc:
            self._reject(
                rejected, row, DECODE, f"LFS envelope could not be decoded: {exc}; envelope: {_excerpt(raw)}"
            )
            return
        fetch = settings.mode is LfsMode.RESOLVE or (
            settings.mode is LfsMode.HYBRID and 0 < envelope.size <= settings.max_inline_size
        )
        if not fetch:
            if settings.store_metadata:
                metadata[row] = envelope_metadata(envelope)
            return
        where = f"s3://{envelope.bucket}/{envelope.key}"
        if settings.buckets and envelope.bucket not in settings.buckets:
            self._reject(
                rejected,
                row,
                MISSING_BLOB,
                f"LFS blob {where} is in bucket {envelope.bucket!r}, which this mapping does not read blobs "
                f"from ({', '.join(settings.buckets)}); add it to mappings[].lfs.blob_buckets (and the job "
                "role's LfsBlobBuckets) and replay the range",
            )
            return
        try:
            expected = envelope_checksum(envelope)
        except EnvelopeError as exc:
            self._reject(rejected, row, DECODE, f"LFS envelope of {where}: {exc}")
            return
        fetches.append((row, envelope, expected))

    def _reject(self, rejected: dict[int, tuple[str, str]], row: int, reason: str, message: str) -> None:
        rejected[row] = (f"lfs_{reason}", message)
        self._tally.error(reason)

    # -- resolution ----------------------------------------------------------------------------------

    def _resolve(
        self,
        records: pa.Table,
        values: pa.Array,
        fetches: list[tuple[int, Envelope, ExpectedChecksum]],
        rejected: dict[int, tuple[str, str]],
        metadata: dict[int, dict[str, object]],
    ) -> Iterator[LfsPart]:
        if self._reader is None:
            raise ValueError(
                f"lfs mode {self.settings.mode.value!r} reads blobs, but no blob reader was given"
            )
        concurrency = self.settings.resolve_concurrency
        pending: deque[tuple[int, Future[_Fetched], int]] = deque()
        payloads: dict[int, bytes] = {}
        inflight = held = start = 0
        try:
            queue = iter(fetches)
            upcoming = next(queue, None)
            while upcoming is not None or pending:
                if upcoming is not None:
                    row, envelope, expected = upcoming
                    estimate = max(envelope.size, 0)
                    room = len(pending) < concurrency and (
                        not pending or inflight + estimate <= self._inflight_bytes
                    )
                    if room:
                        pending.append((row, self._submit(envelope, expected), estimate))
                        inflight += estimate
                        upcoming = next(queue, None)
                        continue
                row, future, estimate = pending.popleft()
                inflight -= estimate
                fetched = future.result()  # LfsBlobUnavailableError propagates: the task fails
                if fetched.rejection is not None:
                    reason, message = fetched.rejection
                    self._reject(rejected, row, reason, message)
                else:
                    assert fetched.payload is not None
                    payloads[row] = fetched.payload
                    held += len(fetched.payload)
                    self._tally.observe(fetched.seconds, len(fetched.payload))
                    if self.settings.store_metadata and fetched.metadata is not None:
                        metadata[row] = fetched.metadata
                if held >= self._part_bytes and row + 1 < records.num_rows:
                    yield self._part(records, values, start, row + 1, payloads, rejected, metadata)
                    start, held = row + 1, 0
        finally:
            for _, future, _ in pending:
                future.cancel()
        yield self._part(records, values, start, records.num_rows, payloads, rejected, metadata)

    def _submit(self, envelope: Envelope, expected: ExpectedChecksum) -> Future[_Fetched]:
        """The fetch, on a pool thread; with `resolve_concurrency` 1 in this thread (no hand-offs)."""
        if self.settings.resolve_concurrency == 1:
            future: Future[_Fetched] = Future()
            try:
                future.set_result(self._fetch(envelope, expected))
            except Exception as exc:  # re-raised by future.result(), as from a pool thread
                future.set_exception(exc)
            return future
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.settings.resolve_concurrency, thread_name_prefix="lfs-fetch")
        return self._pool.submit(self._fetch, envelope, expected)

    def _fetch(self, envelope: Envelope, expected: ExpectedChecksum) -> _Fetched:
        """One blob: read (size-capped), verify. Runs in a fetch thread."""
        assert self._reader is not None
        begin = self._clock()
        cap = self.settings.max_inline_size
        limit = min(cap, MAX_BLOB_BYTES) if cap > 0 else MAX_BLOB_BYTES
        where = f"s3://{envelope.bucket}/{envelope.key}"
        try:
            data = self._reader.read_blob(envelope.bucket, envelope.key, max_bytes=limit)
        except LfsBlobMissingError:
            return _Fetched(
                rejection=(MISSING_BLOB, f"LFS blob {where} does not exist (envelope size {envelope.size})")
            )
        except LfsBlobTooLargeError as exc:
            what = "lfs.max_inline_size" if cap > 0 and limit == cap else "the largest value a row can hold"
            return _Fetched(
                rejection=(TOO_LARGE, f"LFS blob {where} is {exc.size} bytes, more than {what} ({limit})")
            )
        if self.settings.validate_checksum and expected.verify:
            computed = compute_checksum(expected.alg, data)
            if computed != expected.value:
                return _Fetched(
                    rejection=(
                        CHECKSUM,
                        f"LFS blob {where}: {expected.alg.value} checksum mismatch: the envelope says "
                        f"{expected.value}, the blob's is {computed}",
                    )
                )
        return _Fetched(
            payload=data,
            metadata=resolved_metadata(envelope, expected, len(data)),
            seconds=self._clock() - begin,
        )

    def _part(
        self,
        records: pa.Table,
        values: pa.Array,
        start: int,
        stop: int,
        payloads: dict[int, bytes],
        rejected: dict[int, tuple[str, str]],
        metadata: dict[int, dict[str, object]],
    ) -> LfsPart:
        """Rows `[start, stop)` with their resolved values; takes their payloads out of `payloads`."""
        count = stop - start
        part = records.slice(start, count) if (start, stop) != (0, records.num_rows) else records
        rows = sorted(r for r in payloads if start <= r < stop)
        if rows:
            mask = np.zeros(count, bool)
            mask[np.asarray(rows) - start] = True
            replaced = pc.replace_with_mask(
                values.slice(start, count),
                pa.array(mask),
                pa.array([payloads.pop(r) for r in rows], pa.binary()),
            )
            part = part.set_column(part.schema.get_field_index("value"), "value", replaced)
        local_rejected = {
            r - start: rejected.pop(r) for r in sorted(r for r in rejected if start <= r < stop)
        }
        local_metadata = {
            r - start: metadata.pop(r) for r in sorted(r for r in metadata if start <= r < stop)
        }
        return LfsPart(part, local_rejected, self._metadata(count, local_metadata))

    def _metadata(self, count: int, rows: dict[int, dict[str, object]]) -> dict[str, pa.Array] | None:
        """The `lfs_*` columns over `count` rows (null except at `rows`); None unless store_metadata."""
        if not self.settings.store_metadata:
            return None
        arrays: dict[str, pa.Array] = {}
        for column in LFS_METADATA_COLUMNS:
            arrow_type = pa.int64() if column.name == "lfs_blob_size" else pa.string()
            if not rows:
                arrays[column.name] = pa.nulls(count, arrow_type)
                continue
            items: list[object] = [None] * count
            for row, values in rows.items():
                items[row] = values[column.name]
            arrays[column.name] = pa.array(items, arrow_type)
        return arrays


def _values(records: pa.Table) -> pa.Array:
    column = records.column("value")
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _excerpt(raw: bytes, limit: int = 160) -> str:
    text = raw[:limit].decode("utf-8", errors="replace")
    return text + ("..." if len(raw) > limit else "")
