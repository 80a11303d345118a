"""Objects fetched ahead of the work: a bounded number of GETs in flight, and a cap on bytes in flight.

On S3 a small GET waits tens of milliseconds for its first byte; a task that reads its segments one
at a time spends most of its time waiting. `prefetch_objects` keeps up to `max_in_flight` requests
running ahead of the consumer, in the consumer's order, while the bytes fetched but not yet handed
over stay under `max_bytes_in_flight` (one object larger than the cap is still fetched, alone), so a
task's memory stays flat however many segments it has. Objects larger than `part_size` are read in
ranged parts, concurrently, when the reader can read ranges.

Errors keep their place: an object that cannot be read is handed to the consumer as that object's
error, at its position, so the consumer stops where a sequential reader would have stopped. Closing
the iterator early cancels what has not started and waits for the requests running (at most
`max_in_flight`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from kafscale_iceberg.exceptions import KafscaleIcebergError
from kafscale_iceberg.ports import ObjectReader, RangedObjectReader

DEFAULT_MAX_IN_FLIGHT = 8
DEFAULT_MAX_BYTES_IN_FLIGHT = 64 * 1024 * 1024
DEFAULT_PART_SIZE = 8 * 1024 * 1024


@dataclass(frozen=True)
class PrefetchLimits:
    """How far ahead a task reads: requests in flight, bytes in flight, and the ranged-part size.

    `max_in_flight` 1 reads one object at a time (the sequential baseline).
    """

    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT
    part_size: int = DEFAULT_PART_SIZE

    def __post_init__(self) -> None:
        if self.max_in_flight < 1 or self.max_bytes_in_flight < 1 or self.part_size < 1:
            raise ValueError(f"prefetch limits must be positive, got {self}")


@dataclass(frozen=True)
class ObjectRequest:
    """One object to fetch: its URI and its expected size (from the listing), which budgets memory."""

    uri: str
    size_bytes: int


@dataclass(frozen=True)
class Fetched:
    """An object's bytes, or the error that reading it raised (never both)."""

    request: ObjectRequest
    data: bytes | None = None
    error: KafscaleIcebergError | None = None


def part_ranges(size_bytes: int, part_size: int) -> list[tuple[int, int | None]]:
    """`(start, end_inclusive)` ranges of about `part_size` covering an object of `size_bytes`.

    The last range is open-ended (None), so the object is read to its end whatever its real size.
    """
    count = max(1, -(-size_bytes // part_size))
    ranges: list[tuple[int, int | None]] = [
        (i * part_size, (i + 1) * part_size - 1) for i in range(count - 1)
    ]
    ranges.append(((count - 1) * part_size, None))
    return ranges


def prefetch_objects(
    reader: ObjectReader, requests: Sequence[ObjectRequest], limits: PrefetchLimits | None = None
) -> Generator[Fetched, None, None]:
    """Fetch `requests` ahead of the consumer; yields one `Fetched` per request, in request order.

    Non-`KafscaleIcebergError` exceptions (bugs) propagate when their object is reached.
    """
    limits = limits or PrefetchLimits()
    if limits.max_in_flight == 1:
        yield from _sequential(reader, requests)
        return
    ranged = isinstance(reader, RangedObjectReader)
    executor = ThreadPoolExecutor(max_workers=limits.max_in_flight, thread_name_prefix="prefetch")
    pending: deque[tuple[ObjectRequest, list[Future[bytes]]]] = deque()
    in_flight = 0
    upcoming = iter(requests)
    following: ObjectRequest | None = next(upcoming, None)
    try:
        while following is not None or pending:
            # Submit while the budget allows; one object always, so a huge one still moves.
            while following is not None and (
                not pending or in_flight + following.size_bytes <= limits.max_bytes_in_flight
            ):
                request = following
                pending.append((request, _submit(executor, reader, request, limits, ranged=ranged)))
                in_flight += request.size_bytes
                following = next(upcoming, None)
            request, parts = pending.popleft()
            in_flight -= request.size_bytes
            yield _collect(request, parts)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _sequential(reader: ObjectReader, requests: Sequence[ObjectRequest]) -> Iterator[Fetched]:
    for request in requests:
        try:
            data = reader.read_bytes(request.uri)
        except KafscaleIcebergError as exc:
            yield Fetched(request, error=exc)
            continue
        yield Fetched(request, data=data)


def _submit(
    executor: ThreadPoolExecutor,
    reader: ObjectReader,
    request: ObjectRequest,
    limits: PrefetchLimits,
    *,
    ranged: bool,
) -> list[Future[bytes]]:
    if ranged and request.size_bytes > limits.part_size:
        assert isinstance(reader, RangedObjectReader)
        return [
            executor.submit(reader.read_range, request.uri, start, end)
            for start, end in part_ranges(request.size_bytes, limits.part_size)
        ]
    return [executor.submit(reader.read_bytes, request.uri)]


def _collect(request: ObjectRequest, parts: list[Future[bytes]]) -> Fetched:
    chunks: list[bytes] = []
    for part in parts:
        try:
            chunks.append(part.result())
        except KafscaleIcebergError as exc:
            for rest in parts:
                rest.cancel()
            return Fetched(request, error=exc)
    return Fetched(request, data=chunks[0] if len(chunks) == 1 else b"".join(chunks))
