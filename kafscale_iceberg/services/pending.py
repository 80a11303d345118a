"""What a topic has pending: each partition's complete segments after its committed offset, listed
in O(new segments) requests, and the selection the next run would take within the `runs.*` limits.

Shared by the launcher (which plans from it), `status` (which shows it), the reconciler (which
signals topics with pending segments) and replay (which lists a range's segments).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from kafscale_iceberg.config import MappingConfig, RunnerConfig, RunsConfig
from kafscale_iceberg.domain.planning import (
    ListedSegment,
    RunLimits,
    Selection,
    eligible_segments,
    needs_fallback_listing,
    select_segments,
)
from kafscale_iceberg.domain.run_sizing import run_bytes_cap
from kafscale_iceberg.exceptions import KafscaleIcebergError, SegmentFormatError, SegmentKeyError
from kafscale_iceberg.ports import SegmentLister

_PROBE_FACTOR = 16
_T = TypeVar("_T")
_R = TypeVar("_R")
PLANNING_CONCURRENCY = 16
"""Partitions listed (and footers read) at once while planning: a topic of 64 partitions on S3 is
4 rounds of ~30 ms requests, not 64 (S3 serves thousands of requests per second per prefix)."""


def concurrently(work: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """`[work(item) for item in items]`, up to `PLANNING_CONCURRENCY` at once, results in order.

    The first item's error (in order) is raised, as the loop would; the rest are waited for.
    """
    todo = list(items)
    if len(todo) <= 1:
        return [work(item) for item in todo]
    with ThreadPoolExecutor(max_workers=min(PLANNING_CONCURRENCY, len(todo))) as pool:
        return list(pool.map(work, todo))


def list_after_committed(
    lister: SegmentLister, topic: str, partition: int, committed: int, *, ends_segment: bool = False
) -> list[ListedSegment]:
    """The partition's segments that may hold offsets after `committed`, in O(new segments) requests.

    One listing `StartAfter` the committed offset's key shows every segment starting after it. When
    that can't show the segment holding `committed + 1` - the partition's newest segment is fully
    committed (the idle case), or `committed` sits inside a segment (after a move from the Go
    processor, or a reset) - the listing start is moved back exponentially (committed - 1, - 16,
    - 256, ...) until it shows a segment starting at or before `committed + 1`: about log16(segment
    length) more requests, never a listing of the partition's whole history (unless the partition
    has a gap before `committed + 1`, e.g. retention deleted it, when the probe reaches offset 0).

    `ends_segment`: the caller knows `committed` is a segment's last offset (a run's end, told by the
    signal after its commit), so the next segment starts after it and the one listing shows it: no
    probe (an idle partition costs one request, not 1 + log16(segment length)).
    """
    listed = lister.list_segments(topic, partition, after_offset=committed)
    if ends_segment:
        return listed
    step = 1
    while needs_fallback_listing(committed, listed):
        start = committed - step
        if start < 0:
            return lister.list_segments(topic, partition, after_offset=None)
        listed = lister.list_segments(topic, partition, after_offset=start)
        step *= _PROBE_FACTOR
    return listed


def pending_segments(
    lister: SegmentLister, topic: str, partition: int, committed: int, *, ends_segment: bool = False
) -> tuple[list[ListedSegment], ListedSegment | None]:
    """The complete segments of a partition holding offsets after `committed`, and the first one
    lacking its `.index` (which stops the walk), or None.

    The segment holding `committed` itself (listed when `committed` is its last offset, the idle
    case, or sits inside it) counts only when its footer says it ends after `committed` (never listed
    when `ends_segment`: see `list_after_committed`).
    """
    listed = list_after_committed(lister, topic, partition, committed, ends_segment=ends_segment)
    chosen, stopper = eligible_segments(committed, listed)
    if (
        len(chosen) == 1
        and chosen[0].base_offset <= committed
        and lister.read_footer(chosen[0].key).last_offset <= committed
    ):
        chosen = []
    return chosen, stopper


def run_limits(
    runs: RunsConfig,
    *,
    ignore_min_batch: bool = False,
    mappings: Sequence[MappingConfig] = (),
    runner: RunnerConfig | None = None,
) -> RunLimits:
    """The limits one run of a topic is planned within: `runs.*`, with the batching its `mappings` set
    (`mappings[].min_bytes_per_run`, `.max_wait_seconds`; of several, the smallest: the most
    latency-sensitive mapping of the topic decides when its run starts), and a run no bigger than
    its `runner` holds (`domain/run_sizing.py`: on EMR Serverless, the application's vCPU)."""
    own_bytes = [int(m.min_bytes_per_run) for m in mappings if m.min_bytes_per_run is not None]
    own_waits = [m.max_wait_seconds for m in mappings if m.max_wait_seconds is not None]
    min_bytes = min(own_bytes) if own_bytes else int(runs.min_bytes_per_run)
    max_bytes = int(runs.max_bytes_per_run)
    if runner is not None:
        max_bytes = run_bytes_cap(max_bytes, runner.type, runner.emr_serverless.max_vcpu)
    return RunLimits(
        max_bytes=max_bytes,
        max_segments=runs.max_segments_per_run,
        min_bytes=0 if ignore_min_batch else min(min_bytes, max_bytes),
        max_wait_seconds=min(own_waits) if own_waits else runs.max_wait_seconds,
    )


def select_pending(
    lister: SegmentLister,
    topic: str,
    committed: Mapping[int, int],
    limits: RunLimits,
    *,
    now_ms: int,
    segment_ends: Mapping[int, int] | None = None,
) -> Selection:
    """What the next run of `topic` would take: per partition the complete segments after the
    committed offset (`list_after_committed`), chosen within `limits`. `segment_ends`: offsets known
    to end a segment, by partition (a committed offset equal to one needs no probe)."""
    ends = segment_ends or {}
    eligible: dict[int, list[ListedSegment]] = {}
    blocked: list[ListedSegment] = []
    held: dict[int, str] = {}

    def pending_or_problem(
        item: tuple[int, int],
    ) -> tuple[list[ListedSegment], ListedSegment | None] | KafscaleIcebergError:
        partition, offset = item
        try:
            return pending_segments(
                lister, topic, partition, offset, ends_segment=ends.get(partition) == offset
            )
        except (SegmentKeyError, SegmentFormatError) as exc:
            return exc  # only this partition waits: the others are planned

    found = concurrently(pending_or_problem, committed.items())
    for partition, pending in zip(committed, found, strict=True):
        if isinstance(pending, KafscaleIcebergError):
            held[partition] = str(pending)
            continue
        chosen, stopper = pending
        eligible[partition] = chosen
        if stopper is not None:
            blocked.append(stopper)
    selection = select_segments(
        {p: o for p, o in committed.items() if p not in held},
        eligible,
        limits,
        now_ms=now_ms,
        blocked=blocked,
    )
    return replace(selection, held=held) if held else selection
