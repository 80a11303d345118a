"""Offset gaps and overlapping records, recorded where both the one-machine `run` and the AWS commit
step write them: the run's snapshot summary on the data table (issue 12 §6).

- `kafscale.offset-gaps`: JSON `{partition: {"missing": n, "ranges": [[first, last], ...]}}`, the
  offsets inside the run's planned range that no segment contained (reported, never invented);
  `missing` counts every such offset, `ranges` lists at most `MAX_RECORDED_GAPS` of them (the first);
- `kafscale.overlapped`: JSON `{partition: n}`, records a segment repeated from an overlapping one
  (written once: they are neither lost nor "dropped").

`status` sums them over the table's retained snapshots of the topic (an audit trail: snapshot expiry
forgets them, as it forgets `kafscale.conversion-failures`). Decoding is lenient - a malformed value
is ignored, never a reason to fail a status.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafscale_iceberg.domain.runs import RunResult

SUMMARY_OFFSET_GAPS = "kafscale.offset-gaps"
SUMMARY_OVERLAPPED = "kafscale.overlapped"
MAX_RECORDED_GAPS = 100
"""Gap ranges recorded per partition and run (the count of missing offsets is always exact)."""


@dataclass(frozen=True)
class PartitionGaps:
    """A partition's offset gaps: every missing offset counted, the ranges listed up to a cap."""

    missing: int = 0
    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, ranges: Iterable[tuple[int, int]]) -> PartitionGaps:
        """The gaps of `(first, last)` ranges, inclusive."""
        spans = sorted(ranges)
        return cls(missing=sum(last - first + 1 for first, last in spans), ranges=tuple(spans))

    def plus(self, other: PartitionGaps) -> PartitionGaps:
        """Both partitions' gaps, ranges in offset order."""
        return PartitionGaps(self.missing + other.missing, tuple(sorted((*self.ranges, *other.ranges))))


@dataclass(frozen=True)
class OffsetAnomalies:
    """Per partition, offset gaps and records repeated by overlapping segments."""

    gaps: Mapping[int, PartitionGaps] = field(default_factory=dict)
    overlapped: Mapping[int, int] = field(default_factory=dict)

    def plus(self, other: OffsetAnomalies) -> OffsetAnomalies:
        """Both summed, partition by partition."""
        gaps = dict(self.gaps)
        for partition, more in other.gaps.items():
            gaps[partition] = gaps[partition].plus(more) if partition in gaps else more
        overlapped = dict(self.overlapped)
        for partition, count in other.overlapped.items():
            overlapped[partition] = overlapped.get(partition, 0) + count
        return OffsetAnomalies(dict(sorted(gaps.items())), dict(sorted(overlapped.items())))

    def summary(self) -> dict[str, str]:
        """The snapshot summary keys (none when there is nothing to say)."""
        summary: dict[str, str] = {}
        gaps = {p: g for p, g in sorted(self.gaps.items()) if g.missing}
        if gaps:
            summary[SUMMARY_OFFSET_GAPS] = json.dumps(
                {
                    str(p): {"missing": g.missing, "ranges": [list(r) for r in g.ranges[:MAX_RECORDED_GAPS]]}
                    for p, g in gaps.items()
                },
                separators=(",", ":"),
            )
        overlapped = {str(p): n for p, n in sorted(self.overlapped.items()) if n}
        if overlapped:
            summary[SUMMARY_OVERLAPPED] = json.dumps(overlapped, separators=(",", ":"))
        return summary

    @classmethod
    def from_summary(cls, summary: Mapping[str, str]) -> OffsetAnomalies:
        """What `summary` wrote (lenient: malformed entries are ignored)."""
        return cls(
            _decode_gaps(summary.get(SUMMARY_OFFSET_GAPS)), _decode_counts(summary.get(SUMMARY_OVERLAPPED))
        )


def offset_anomalies(result: RunResult) -> OffsetAnomalies:
    """A run result's offset gaps and overlapped records, per partition (only those with some)."""
    return OffsetAnomalies(
        gaps={
            o.partition: PartitionGaps.of((g.first, g.last) for g in o.gaps)
            for o in result.partitions
            if o.gaps
        },
        overlapped={o.partition: o.records_overlapped for o in result.partitions if o.records_overlapped},
    )


def _load_object(text: str | None) -> dict[str, object]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _decode_counts(text: str | None) -> dict[int, int]:
    counts: dict[int, int] = {}
    for name, value in _load_object(text).items():
        count = _count(value)
        if name.isdigit() and count is not None:
            counts[int(name)] = count
    return counts


def _decode_gaps(text: str | None) -> dict[int, PartitionGaps]:
    gaps: dict[int, PartitionGaps] = {}
    for name, value in _load_object(text).items():
        if not name.isdigit() or not isinstance(value, dict):
            continue
        missing = _count(value.get("missing"))
        ranges = value.get("ranges")
        if missing is None or not isinstance(ranges, list):
            continue
        spans = tuple(
            (r[0], r[1])
            for r in ranges
            if isinstance(r, list) and len(r) == 2 and all(_count(x) is not None for x in r) and r[0] <= r[1]
        )
        gaps[int(name)] = PartitionGaps(missing, spans)
    return gaps
