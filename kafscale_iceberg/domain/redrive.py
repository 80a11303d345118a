"""Re-driving dead letters: which ones, the record of what landed, and what a redrive did.

A redrive re-reads a topic's dead-letter rows, converts them with the current configuration and lands
those that now convert in the mapping's table **exactly once**:

1. the table's append carries the re-driven (partition, offset) set in its snapshot summary
   (`kafscale.redriven`, with `kafscale.redrive.topic` and `kafscale.redrive.id`); every redrive first
   reads the sets of the table's retained snapshots and never lands a pair already there;
2. then ONE commit of the dead-letter table deletes the resolved rows (those landed now or before) and
   rewrites those still failing with their new reason.

A crash between the two leaves rows in both tables for a moment; the next redrive finds their pairs in
the summaries, lands nothing of them again and removes them from the dead letters. The topic's lease is
held throughout, so no run commits in between. The sets are kept in snapshot summaries, so the guarantee
holds while the snapshot of step 1 is retained (`maintain` expires snapshots after
`maintenance.snapshot_retention`: re-run a crashed redrive before that).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SUMMARY_REDRIVEN = "kafscale.redriven"
"""JSON `{"partition": [[first, last], ...]}`: the dead letters a redrive landed in this snapshot."""
SUMMARY_REDRIVE_TOPIC = "kafscale.redrive.topic"
SUMMARY_REDRIVE_ID = "kafscale.redrive.id"
SUMMARY_REDRIVE_RESOLVED = "kafscale.redrive.resolved"
"""On the dead-letter table's commit: how many rows it resolved (deleted)."""

Pair = tuple[int, int]
"""(partition, offset)."""


@dataclass(frozen=True)
class RedriveSelection:
    """Which dead letters of a topic to re-drive: all, or by reason, partition and offset range."""

    reason: str | None = None
    """Only rows of this `error_kind`."""
    partition: int | None = None
    from_offset: int | None = None
    """Inclusive."""
    to_offset: int | None = None
    """Inclusive."""

    def describe(self) -> str:
        """For logs and errors."""
        parts = [f"reason {self.reason}"] if self.reason else []
        if self.partition is not None:
            parts.append(f"partition {self.partition}")
        if self.from_offset is not None or self.to_offset is not None:
            first = self.from_offset if self.from_offset is not None else 0
            last = "end" if self.to_offset is None else self.to_offset
            parts.append(f"offsets {first}..{last}")
        return ", ".join(parts) or "every dead letter"


def encode_pairs(pairs: Iterable[Pair]) -> str:
    """Compact JSON `{"0": [[3, 9], [12, 12]]}`: runs of consecutive offsets per partition."""
    by_partition: dict[int, list[int]] = {}
    for partition, offset in sorted(set(pairs)):
        by_partition.setdefault(partition, []).append(offset)
    document: dict[str, list[list[int]]] = {}
    for partition, offsets in by_partition.items():
        ranges: list[list[int]] = []
        for offset in offsets:
            if ranges and ranges[-1][1] == offset - 1:
                ranges[-1][1] = offset
            else:
                ranges.append([offset, offset])
        document[str(partition)] = ranges
    return json.dumps(document, separators=(",", ":"))


def decode_pairs(text: str) -> set[Pair]:
    """`encode_pairs` read back; what is not that shape is ignored (an audit value, never fatal)."""
    try:
        document = json.loads(text)
    except ValueError:
        return set()
    pairs: set[Pair] = set()
    if not isinstance(document, dict):
        return pairs
    for name, ranges in document.items():
        if not (isinstance(name, str) and name.isdigit() and isinstance(ranges, list)):
            continue
        for bounds in ranges:
            if isinstance(bounds, list) and len(bounds) == 2 and all(type(b) is int for b in bounds):
                pairs.update((int(name), offset) for offset in range(bounds[0], bounds[1] + 1))
    return pairs


def redrive_id(topic: str, record_ids: Iterable[str]) -> str:
    """A redrive's id, from the dead letters it read (the same rows give the same id)."""
    digest = hashlib.sha256("\n".join(sorted(record_ids)).encode()).hexdigest()[:16]
    return f"redrive-{topic[:32]}-{digest}"


@dataclass(frozen=True)
class ConvertedDeadLetters:
    """What the re-read dead letters became (`dataplane/redrive.py`): Arrow tables for the commits (typed
    `Any`: the domain imports no pyarrow), plain values for the counts."""

    redrive_id: str

    rows: Any
    """Table rows of those that now convert (the mapping's data schema): to land."""
    failing: Any
    """Dead-letter rows of those that still fail, with their new reason: to rewrite."""
    landed: tuple[tuple[Pair, str], ...]
    """Per row of `rows`: its (partition, offset) and the reason it had been dead-lettered for."""
    already_landed: tuple[str, ...]
    """Reasons of the rows an earlier redrive landed (their pair is in a summary): only resolved."""
    failing_kinds: tuple[str, ...]
    """Per row of `failing`: its new reason."""
    no_payload: tuple[str, ...]
    """Reasons of the rows without a payload, kept as they are."""
    resolved_ids: tuple[str, ...]
    """Record ids whose dead-letter row the dead-letter commit deletes (landed now or before, and the
    failing ones, rewritten)."""


@dataclass(frozen=True)
class RedriveCounts:
    """What a redrive of one mapping did (or, dry, would do), per original `error_kind`."""

    table: str
    dead_letter_table: str
    landed: Mapping[str, int] = field(default_factory=dict)
    """Converted now and landed in the table (dry run: would land)."""
    already_landed: Mapping[str, int] = field(default_factory=dict)
    """Landed by an earlier redrive that stopped before its dead-letter commit: only resolved now."""
    still_failing: Mapping[str, int] = field(default_factory=dict)
    """Keyed by the NEW reason: kept in the dead-letter table with it."""
    no_payload: Mapping[str, int] = field(default_factory=dict)
    """Rows without their payload (a corrupt segment, an LFS blob): kept as they are."""

    @property
    def total_landed(self) -> int:
        """Records landed in the table by this redrive."""
        return sum(self.landed.values())

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "table": self.table,
            "dead_letter_table": self.dead_letter_table,
            "landed": dict(self.landed),
            "already_landed": dict(self.already_landed),
            "still_failing": dict(self.still_failing),
            "no_payload": dict(self.no_payload),
        }


def counted(kinds: Iterable[str]) -> dict[str, int]:
    """How many of each kind, sorted by kind."""
    totals: dict[str, int] = {}
    for kind in kinds:
        totals[kind] = totals.get(kind, 0) + 1
    return dict(sorted(totals.items()))
