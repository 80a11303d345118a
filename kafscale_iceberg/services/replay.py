"""Replay: re-enqueue a topic's segments through the normal path; optionally rebuild the range first.

**Replay** (`replay(request)` without `reset_offsets`) lists the topic's complete segments (`.kfs`
and `.index`; the last one of a partition also ends in `END!`) holding offsets at or after
`from_offset`, and puts one work item per segment on the FIFO work queue, each with this replay's
nonce in its deduplication id (so a replay within SQS's 5-minute window is not dropped as a
duplicate of the router's item). The launcher plans from the committed offsets, never from the
items, so a range already committed is a no-op by design: the outcome says so.

**Reset** (`reset_offsets`) deliberately rebuilds the range: claim the topic's lease (refused,
naming the holder, while a run holds it), rewind the committed offsets of each selected partition to
just before `from_offset` and delete the rows after them - from the table and its dead-letter table,
each in ONE Iceberg commit carrying both the delete and the new offsets
(`OffsetReset.reset_offsets`) - then set the checkpoint store, release the lease and re-enqueue.
Every step is idempotent: a rerun after a crash at any point deletes nothing more and ends in the
same state. Refused before anything is written: a range whose first segments are gone from S3
(deleted rows could not be re-ingested), and a reset point inside a quarantined segment's range.

Without a work queue (the one-machine loop) nothing is enqueued: `kafscale-iceberg run` finds
pending segments by polling, and the rewound offsets are all it needs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kafscale_iceberg.domain.events import WorkItem
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant
from kafscale_iceberg.domain.planning import ListedSegment
from kafscale_iceberg.domain.replay import ReplayRequest
from kafscale_iceberg.domain.runs import NO_OFFSET
from kafscale_iceberg.exceptions import (
    OffsetResetRefusedError,
    ReplayLeaseBusyError,
    ReplayRequestError,
    SegmentFormatError,
)
from kafscale_iceberg.ports import CheckpointStore, SegmentLister, WorkQueue
from kafscale_iceberg.services.pending import list_after_committed

if TYPE_CHECKING:
    from kafscale_iceberg.config import KafscaleConfig
    from kafscale_iceberg.services.commits.commit import CommitService
    from kafscale_iceberg.services.offset_reset import OffsetReset

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionReplay:
    """One partition of a replay: what is committed, what a reset sets, and the segments enqueued."""

    partition: int
    committed: int
    """The committed offset before the replay (the table's record; the checkpoint store's if none)."""
    reset_to: int | None
    """The committed offset a reset sets (None: not reset)."""
    items: tuple[WorkItem, ...]
    """One work item per complete segment holding offsets at or after the replay's first offset."""
    incomplete: tuple[str, ...] = ()
    """Keys of segments in the range left out: no `.index` yet, or (the last one) no `END!` footer."""
    first_offset: int = 0
    """The first offset of the range (`from_offset`)."""

    @property
    def last_offset(self) -> int | None:
        """The last offset the enqueued segments hold; None when there are none."""
        return self.items[-1].last_offset if self.items else None

    @property
    def committed_after(self) -> int:
        """The committed offset once the replay is done (the reset's, else unchanged)."""
        return self.committed if self.reset_to is None else self.reset_to

    @property
    def rewound(self) -> bool:
        """True when a reset moves this partition's committed offset back (deleting rows after it)."""
        return self.reset_to is not None and self.reset_to < self.committed

    @property
    def ingests(self) -> bool:
        """True when the segments hold offsets past the committed one: the launcher will ingest them."""
        last = self.last_offset
        return last is not None and last > self.committed_after

    def to_json(self) -> dict[str, Any]:
        """The partition as JSON (CLI `--json`, the replay function's answer)."""
        return {
            "partition": self.partition,
            "committed": self.committed,
            "reset_to": self.reset_to,
            "segments": len(self.items),
            "first_offset": max(self.first_offset, self.items[0].base_offset) if self.items else None,
            "last_offset": self.last_offset,
            "incomplete": list(self.incomplete),
        }


@dataclass(frozen=True)
class TableDeletion:
    """The rows a reset deletes from one table: per partition, those with an `offset` after the value."""

    table: str
    after: Mapping[int, int]
    rows: int | None
    """Rows matching when counted (a scan); None when the table does not exist."""

    def to_json(self) -> dict[str, Any]:
        """The deletion as JSON."""
        return {"table": self.table, "after": {str(p): o for p, o in self.after.items()}, "rows": self.rows}


@dataclass(frozen=True)
class ReplayPlan:
    """What a replay will do (nothing done yet): the partitions, and for a reset the rows deleted."""

    request: ReplayRequest
    table: str
    """The topic's anchor table (its first mapping's table, else its route's default table, else its
    dead-letter table)."""
    dead_letter_table: str
    partitions: tuple[PartitionReplay, ...]
    deletions: tuple[TableDeletion, ...] = ()
    more_tables: tuple[str, ...] = ()
    """The topic's other tables (routed tables, other mappings' and their dead letters, the tables a
    route's template created): a reset deletes their rows too, before the two above."""

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table a reset changes, in the order it does: `more_tables`, `table`, `dead_letter_table`."""
        return tuple(dict.fromkeys((*self.more_tables, self.table, self.dead_letter_table)))

    @property
    def topic(self) -> str:
        """The topic replayed."""
        return self.request.topic

    @property
    def items(self) -> tuple[WorkItem, ...]:
        """Every work item, partition by partition, in offset order."""
        return tuple(item for p in self.partitions for item in p.items)

    @property
    def reset_offsets(self) -> dict[int, int]:
        """The committed offsets a reset sets, by partition (empty without a reset)."""
        return {p.partition: p.reset_to for p in self.partitions if p.reset_to is not None}


@dataclass(frozen=True)
class ReplayOutcome:
    """What `replay` did."""

    plan: ReplayPlan
    enqueued: int
    """Work items put on the work queue (0 without one)."""
    work_queue: bool
    """Whether a work queue is configured (False: the one-machine loop)."""
    nonce: str
    reset_done: bool = False
    """True when committed offsets were rewound (and the rows after them deleted)."""

    def summary(self) -> str:
        """One sentence for people: how many segments, which range, and whether anything will change."""
        plan = self.plan
        segments = len(plan.items)
        noun = "segment" if segments == 1 else "segments"
        if self.work_queue:
            head = f"{self.enqueued} {noun} re-enqueued"
        else:
            head = (
                f"{segments} {noun} in the range; no work queue configured (notifications.work_queue_url): "
                "nothing enqueued - `kafscale-iceberg run` picks the range up by its polling discovery"
                + (" (the rewound offsets are enough)" if self.reset_done else "")
            )
        if not plan.partitions:
            return f"{head}; topic {plan.topic!r} has no segments and nothing committed: nothing will change"
        ingesting = [p for p in plan.partitions if p.ingests]
        if not ingesting:
            committed = {p.partition: p.committed_after for p in plan.partitions}
            if len(committed) == 1:
                ((_, offset),) = committed.items()
                where = f"committed offset {offset}"
            else:
                where = "the committed offsets (" + _offsets_text(committed) + ")"
            return f"{head}; all at or below {where}: nothing will change"
        ranges = ", ".join(
            f"partition {p.partition} offsets {p.committed_after + 1}-{p.last_offset}"
            + (" (rewound)" if p.rewound else " (not committed yet)")
            for p in ingesting
        )
        # Not a promise: the runs may wait (backoff, a held partition, a missing .index); say where to look.
        return f"{head}; to be ingested by the next runs (`status` shows them): {ranges}"

    def to_json(self) -> dict[str, Any]:
        """The outcome as JSON (CLI `--json`, the replay function's answer)."""
        plan = self.plan
        return {
            "topic": plan.topic,
            "table": plan.table,
            "dead_letter_table": plan.dead_letter_table,
            "more_tables": list(plan.more_tables),
            "from_offset": plan.request.first_offset,
            "reset_offsets": self.reset_done,
            "partitions": [p.to_json() for p in plan.partitions],
            "deleted": [d.to_json() for d in plan.deletions],
            "segments": len(plan.items),
            "enqueued": self.enqueued,
            "work_queue": self.work_queue,
            "nonce": self.nonce,
            "message": self.summary(),
        }


class ReplayService:
    """Replays topics (see the module docstring).

    `work_queue` is the FIFO work queue (SQS), an in-process queue, or None when the runtime polls.
    """

    def __init__(
        self,
        config: KafscaleConfig,
        segments: SegmentLister,
        checkpoints: CheckpointStore,
        commits: CommitService,
        resets: OffsetReset,
        work_queue: WorkQueue | None,
        *,
        owner_id: str,
        make_nonce: Callable[[], str] = lambda: uuid.uuid4().hex,
        tables_of: Callable[[str], tuple[str, ...]] | None = None,
    ) -> None:
        """`tables_of(topic)`: every table of the topic, those a route's template created included
        (default: the tables the config names)."""
        self._tables_of = tables_of or config.topic_tables
        self._config = config
        self._segments = segments
        self._checkpoints = checkpoints
        self._commits = commits
        self._resets = resets
        self._work_queue = work_queue
        self._owner_id = owner_id
        self._make_nonce = make_nonce

    def plan(self, request: ReplayRequest, *, nonce: str = "") -> ReplayPlan:
        """What `replay(request)` would do now, changing nothing (the preview a reset is confirmed on).

        Raises `ReplayRequestError` (unmapped topic, a partition that does not exist),
        `OffsetResetRefusedError` (a reset that would lose records), and the adapters' errors. For a
        reset, the row counts are a scan now; the reset itself recomputes everything under the lease.
        """
        return self._plan(request, nonce=nonce, lease=None)

    def replay(self, request: ReplayRequest) -> ReplayOutcome:
        """Replay (and, with `reset_offsets`, first rebuild) the request's range; see the module docstring.

        Raises what `plan` raises, `ReplayLeaseBusyError` (transient: a run holds the topic; nothing
        changed), and the store's, catalog's and queue's errors. Safe to call again after any error.
        """
        nonce = self._make_nonce()
        if not request.reset_offsets:
            plan = self._plan(request, nonce=nonce, lease=None)
            return self._enqueue(plan, nonce, reset_done=False)
        claim = self._checkpoints.claim_lease(
            request.topic, owner_id=self._owner_id, run_id=f"replay-reset-{nonce[:12]}"
        )
        if isinstance(claim, LeaseBusy):
            raise ReplayLeaseBusyError(claim)
        try:
            plan = self._plan(request, nonce=nonce, lease=claim)
            if plan.reset_offsets:
                self._resets.reset_offsets(request.topic, plan.tables, plan.reset_offsets, claim)
        finally:
            self._checkpoints.release_lease(claim)
        if plan.reset_offsets:
            logger.warning(
                "offsets reset for replay",
                extra={
                    "topic": request.topic,
                    "reset": plan.reset_offsets,
                    "deleted": [d.to_json() for d in plan.deletions],
                },
            )
        return self._enqueue(plan, nonce, reset_done=bool(plan.reset_offsets))

    # -- planning ----------------------------------------------------------------------------------

    def _plan(self, request: ReplayRequest, *, nonce: str, lease: LeaseGrant | None) -> ReplayPlan:
        topic = request.topic
        mapping = self._config.mapping_for(topic)
        if mapping is None:
            mapped = ", ".join(sorted(self._config.mapped_topics)) or "none"
            raise ReplayRequestError(
                f"topic {topic!r} has no mapping in {self._config.source} (mapped topics: {mapped}); "
                "only mapped topics are ingested, so there is nothing to replay"
            )
        anchor = mapping.anchor_table
        committed = dict(self._commits.reconciled_offsets(topic, anchor, lease=lease).offsets)
        present = self._segments.list_partitions(topic)
        partitions = self._partitions(request, present, committed)
        first = request.first_offset
        upsert = mapping.mode == "upsert"
        if request.reset_offsets and upsert:
            # Before the S3 check: its advice (a later --from-offset) is no way out for an upsert table.
            resets = {p: first - 1 for p in partitions if first - 1 <= committed.get(p, NO_OFFSET)}
            refuse_upsert_rewind(topic, anchor, resets)
        replays = []
        for partition in partitions:
            offset = committed.get(partition, NO_OFFSET)
            items, incomplete = self._complete_segments(topic, partition, first, nonce)
            reset_to = None
            # Also when already at `first - 1`: a rerun after a crash between the table's and the
            # dead-letter table's commits finishes the second; a partition committed only below the
            # range keeps its offset (a "reset" forward would skip records).
            if request.reset_offsets and first - 1 <= offset:
                reset_to = first - 1
                if reset_to < offset:
                    self._check_reingestable(topic, partition, first, offset, items, upsert=upsert)
            replays.append(
                PartitionReplay(
                    partition=partition,
                    committed=offset,
                    reset_to=reset_to,
                    items=items,
                    incomplete=incomplete,
                    first_offset=first,
                )
            )
        plan = ReplayPlan(
            request=request,
            table=anchor,
            dead_letter_table=mapping.dead_letter_table,
            partitions=tuple(replays),
        )
        if not plan.reset_offsets:
            return plan
        more = tuple(t for t in self._tables_of(topic) if t not in (anchor, mapping.dead_letter_table))
        plan = replace(plan, more_tables=more)
        self._resets.check_reset(topic, plan.tables, plan.reset_offsets)
        offsets = plan.reset_offsets
        deletions = tuple(
            TableDeletion(table, offsets, self._resets.count_rows_after(table, offsets))
            for table in plan.tables
        )
        return replace(plan, deletions=deletions)

    def _partitions(
        self, request: ReplayRequest, present: Sequence[int], committed: Mapping[int, int]
    ) -> list[int]:
        known = sorted(set(present) | set(committed))
        if request.partitions is None:
            return known
        unknown = [p for p in request.partitions if p not in known]
        if unknown:
            prefix = f"s3://{self._segments.bucket}/{self._config.s3.prefix}{request.topic}/"
            raise ReplayRequestError(
                f"topic {request.topic!r} has no partition {', '.join(map(str, unknown))}: no segments "
                f"under {prefix} and no committed offset (partitions present: "
                f"{', '.join(map(str, known)) or 'none'})"
            )
        return list(request.partitions)

    def _complete_segments(
        self, topic: str, partition: int, first: int, nonce: str
    ) -> tuple[tuple[WorkItem, ...], tuple[str, ...]]:
        """Work items for the complete segments holding offsets >= `first`, and the incomplete ones' keys.

        Lists after the segment based at `first - 1` (S3 `StartAfter`), and the whole partition only
        when that listing cannot show the segment holding `first`. Interior segments end where the
        next one starts; the last one's end is its footer (one 16-byte GET, which also checks `END!`).
        """
        after = first - 1 if first > 0 else None
        listed = (
            self._segments.list_segments(topic, partition, after_offset=None)
            if after is None
            else list_after_committed(self._segments, topic, partition, after)
        )
        ordered: list[ListedSegment] = sorted(listed, key=lambda s: s.base_offset)
        items: list[WorkItem] = []
        incomplete: list[str] = []
        for position, segment in enumerate(ordered):
            following = ordered[position + 1] if position + 1 < len(ordered) else None
            if following is not None and following.base_offset <= first:
                continue  # wholly before the range
            if not segment.has_index:
                incomplete.append(segment.key)
                continue
            if following is not None:
                last = following.base_offset - 1
            else:
                try:
                    last = self._segments.read_footer(segment.key).last_offset
                except SegmentFormatError:
                    incomplete.append(segment.key)
                    continue
                if last < first:
                    continue
            items.append(
                WorkItem(
                    topic=topic,
                    partition=partition,
                    base_offset=segment.base_offset,
                    last_offset=last,
                    key=segment.key,
                    size=segment.size_bytes,
                    nonce=nonce or None,
                )
            )
        return tuple(items), tuple(incomplete)

    def _check_reingestable(
        self,
        topic: str,
        partition: int,
        first: int,
        committed: int,
        items: Sequence[WorkItem],
        *,
        upsert: bool = False,
    ) -> None:
        """Refuse a reset whose deleted rows could not all be read again from S3 (`upsert`: of an
        upsert table, which only a rebuild from the partition's start may reset)."""
        start = items[0].base_offset if items else None
        if start is not None and start <= first:
            return
        where = f"s3://{self._segments.bucket}/{self._config.s3.prefix}{topic}/{partition}/"
        if start is None:
            found = f"no complete segment under {where} holds offsets {first}-{committed}"
            advice = "nothing of this partition can be re-ingested; leave it out (--partition)"
        else:
            found = (
                f"the oldest complete segment under {where} starts at offset {start}, so offsets "
                f"{first}-{start - 1} are not in S3 (expired by retention, or never uploaded)"
            )
            advice = f"reset from offset {start} or later (--from-offset {start})"
        if upsert:
            advice = (
                "an upsert table's partition can only be rebuilt from its start, so no reset can rebuild "
                f"it from S3: {_ROLLBACK_ADVICE.format(topic=topic)}"
            )
        raise OffsetResetRefusedError(
            topic,
            f"partition {partition}: {found}; their rows would be deleted and never re-ingested - {advice}",
        )

    # -- enqueueing --------------------------------------------------------------------------------

    def _enqueue(self, plan: ReplayPlan, nonce: str, *, reset_done: bool) -> ReplayOutcome:
        items = plan.items
        enqueued = 0
        if self._work_queue is not None and items:
            self._work_queue.send_work_items(items)
            enqueued = len(items)
        outcome = ReplayOutcome(
            plan=plan,
            enqueued=enqueued,
            work_queue=self._work_queue is not None,
            nonce=nonce,
            reset_done=reset_done,
        )
        logger.info(
            "replay done",
            extra={
                "topic": plan.topic,
                "segments": len(items),
                "enqueued": enqueued,
                "nonce": nonce,
                "reset": reset_done,
                "summary": outcome.summary(),
            },
        )
        return outcome


def _offsets_text(offsets: Mapping[int, int]) -> str:
    return ", ".join(f"partition {p}: {o}" for p, o in sorted(offsets.items()))


def refuse_upsert_rewind(topic: str, table: str, offsets: Mapping[int, int]) -> None:
    """Raise `OffsetResetRefusedError` for a reset of an upsert table to anything but its partitions'
    start: its rows hold each key's last state only, so the values a key had before a later offset
    cannot be recomputed by deleting the rows after it (rebuilding from the start can)."""
    partial = {p: o for p, o in sorted(offsets.items()) if o != NO_OFFSET}
    if not partial:
        return
    raise OffsetResetRefusedError(
        topic,
        f"{table!r} is an upsert table (mode: upsert): it holds each key's last state, so deleting its "
        f"rows after offsets {partial} cannot bring back the values those keys had before; re-ingest "
        "from the start of the partitions instead (--from-offset 0 rebuilds their keys, when S3 still "
        f"holds them), or {_ROLLBACK_ADVICE.format(topic=topic)}",
    )


_ROLLBACK_ADVICE = (
    "roll the table back to its snapshot before the range with your engine and set its "
    "kafscale.offsets.{topic} property to that snapshot's kafscale.offsets summary (the table's "
    "offsets win over the checkpoint store when the topic is next planned)"
)
