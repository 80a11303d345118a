"""Status: where ingestion stands, per mapped topic and partition (`kafscale-iceberg status`).

For each topic of the config's mappings:

- **committed offset**, twice: what the table records (`kafscale.offsets.<topic>`, the source of
  truth) and what the checkpoint store (etcd or SQLite) holds - they differ after a crash between the
  two writes or a hand edit; `committed_offset` is the one planning uses (the table's when it recorded
  the topic, else the store's);
- **newest offset**: the last offset of the newest complete segment (`.kfs` and `.index`) after the
  committed one, from its 16-byte footer; the committed offset itself when there is none. The listing
  starts after the committed segment's key (S3 `StartAfter`), so it costs O(new segments);
- **lag**: `newest - committed` offsets (KafScale does not compact, so offsets are records), and in
  seconds `now - last committed record timestamp` while that is above 0, else 0. With nothing committed
  yet the oldest pending segment's S3 LastModified stands in for the timestamp. A store behind the
  table shows a larger lag in seconds than the truth (its timestamp is older);
- **watermark age**: `now - last committed record timestamp` (the store's `last_timestamp_ms`), caught
  up or not: how old the newest committed data is, what the freshness alarm watches;
- **lease**: holder, its run (the run in flight) and since when; a KafScale Go processor's partition
  lease is shown as such;
- **last commit**: the timestamp of the table's newest snapshot committed for the topic, else the
  newest checkpoint `updated_at` (a table never written by this product, e.g. the Go processor's);
- **consecutive failures**: a run in flight's attempt number (attempt *n* means *n* aborted
  attempts of its range before it); with no run in flight, the `outcome.json` documents of aborted
  attempts of the range the launcher would plan now (same selection rules and limits, from the
  checkpoint store's offsets, as the launcher plans) - one GET per recorded attempt.

- **offset gaps and overlapped records** per partition: offsets inside a committed run's range that
  no segment contained, and records an overlapping segment repeated (written once), summed over the
  `kafscale.offset-gaps` / `kafscale.overlapped` summaries of the table's retained snapshots of the
  topic (the commit step writes them on AWS as `run` does here);

- **table health** (when a health reader is given, as `status` does): the table's data files, small
  files (below `maintenance.small_file_bytes`), snapshots, manifest bytes, and when `maintain` last
  expired snapshots and compacted it (table properties `kafscale.maintenance.last-ms`,
  `kafscale.compaction.last-ms`).

Segments are listed exactly as the launcher lists them (`list_after_committed`: O(new segments),
probing back only to find the segment holding `committed + 1`), so a committed offset in the middle
of a segment shows that segment's remaining lag, and the failure probe looks at the range the
launcher would plan. Known blind spot: partitions the etcd discovery filter leaves out are listed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from kafscale_iceberg.config import KafscaleConfig
from kafscale_iceberg.domain.anomalies import OffsetAnomalies, PartitionGaps
from kafscale_iceberg.domain.backlog import Backlog, backlog
from kafscale_iceberg.domain.commits import QuarantinedRange, TableState
from kafscale_iceberg.domain.leases import LeaseHolder
from kafscale_iceberg.domain.maintenance import TableHealth
from kafscale_iceberg.domain.offsets import CommittedOffsets
from kafscale_iceberg.domain.planning import ListedSegment
from kafscale_iceberg.domain.runs import NO_OFFSET
from kafscale_iceberg.domain.runs.plan import make_run_id
from kafscale_iceberg.domain.tickets import OUTCOME_NAME, FailedAttempt, run_document_uri
from kafscale_iceberg.domain.upsert import UpsertCounts
from kafscale_iceberg.exceptions import (
    DocumentMissingError,
    SegmentFormatError,
    SegmentKeyError,
    TableMissingError,
    UnmappedTopicError,
)
from kafscale_iceberg.ports import (
    CheckpointStore,
    RunDocuments,
    SegmentLister,
    TableHealthReader,
    TableStatusReader,
)
from kafscale_iceberg.segments.layout import SegmentFooter
from kafscale_iceberg.services.launch import next_attempt
from kafscale_iceberg.services.pending import (
    list_after_committed,
    pending_segments,
    run_limits,
    select_pending,
)

_ATTEMPT = re.compile(r"-a(\d+)$")


def _health_json(health: TableHealth | None) -> dict[str, object] | None:
    if health is None:
        return None
    return {
        "files": health.files,
        "small_files": health.small_files,
        "data_bytes": health.data_bytes,
        "snapshots": health.snapshots,
        "manifest_bytes": health.manifest_bytes,
        "last_maintenance_ms": health.last_maintenance_ms,
        "last_compaction_ms": health.last_compaction_ms,
        "compaction_managed_by_catalog": health.managed_compaction,
    }


@dataclass(frozen=True)
class LeaseStatus:
    """Who holds a topic's lease."""

    owner_id: str
    run_id: str | None
    """The run in flight; None for a KafScale Go processor's lease."""
    since_ms: int | None
    expires_at_ms: int | None
    go_processor_partition: int | None = None

    @classmethod
    def of(cls, holder: LeaseHolder) -> LeaseStatus:
        """The status view of a lease holder."""
        return cls(
            owner_id=holder.owner_id,
            run_id=holder.run_id,
            since_ms=holder.claimed_at_ms,
            expires_at_ms=holder.expires_at_ms,
            go_processor_partition=holder.partition,
        )

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "owner_id": self.owner_id,
            "run_id": self.run_id,
            "since_ms": self.since_ms,
            "expires_at_ms": self.expires_at_ms,
            "go_processor_partition": self.go_processor_partition,
        }


@dataclass(frozen=True)
class PartitionStatus:
    """One partition (see the module docstring for each value's meaning)."""

    partition: int
    committed_offset: int
    table_offset: int | None
    """None when the table never recorded the topic (or does not exist)."""
    store_offset: int
    newest_offset: int
    lag_records: int
    lag_seconds: float
    pending_segments: int
    """Complete segments after the committed offset, up to the first one lacking its `.index`."""
    blocked_segment: str | None
    """The first segment lacking its `.index` (nothing after it is ingested until it lands)."""
    last_record_timestamp_ms: int | None
    """The store's `last_timestamp_ms` (newest committed record); None when nothing is stored."""
    store_updated_at_ms: int | None
    problem: str | None = None
    """A malformed key or corrupt segment in this partition's way (it waits; the others flow), or,
    while the topic is stuck (attempts of the range it would run next ended uncommitted), how many
    and why the last one ended."""
    offset_gaps: PartitionGaps = field(default_factory=PartitionGaps)
    """Offsets inside committed runs' ranges that no segment contained (retained snapshots)."""
    overlapped_records: int = 0
    """Records repeated by an overlapping segment, written once (retained snapshots)."""
    watermark_age_seconds: float | None = None
    """Now minus the committed watermark's timestamp (the newest committed record), whether or not
    records wait: what a freshness alarm watches. None while nothing is committed."""
    pending: tuple[tuple[int, int], ...] = field(default=(), compare=False)
    """The pending segments' `(size_bytes, last_modified_ms)` (`domain/backlog.py` reads them)."""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "partition": self.partition,
            "committed_offset": self.committed_offset,
            "table_offset": self.table_offset,
            "store_offset": self.store_offset,
            "newest_offset": self.newest_offset,
            "lag_records": self.lag_records,
            "lag_seconds": round(self.lag_seconds, 3),
            "pending_segments": self.pending_segments,
            "pending_bytes": sum(size for size, _ in self.pending),
            "blocked_segment": self.blocked_segment,
            "last_record_timestamp_ms": self.last_record_timestamp_ms,
            "store_updated_at_ms": self.store_updated_at_ms,
            "problem": self.problem,
            "offset_gaps": {
                "missing": self.offset_gaps.missing,
                "ranges": [list(r) for r in self.offset_gaps.ranges],
            },
            "overlapped_records": self.overlapped_records,
            "watermark_age_seconds": (
                None if self.watermark_age_seconds is None else round(self.watermark_age_seconds, 3)
            ),
        }


@dataclass(frozen=True)
class TableLine:
    """One more table of a topic written to several (`TopicStatus.tables`): what it records."""

    identifier: str
    exists: bool
    last_run_id: str | None = None
    offsets: dict[int, int] | None = None
    """Its `kafscale.offsets.<topic>`: tables before the anchor lag (they move only with rows)."""
    last_commit_ms: int | None = None
    conversion_failures: dict[str, int] = field(default_factory=dict)
    ahead_of_anchor: tuple[int, ...] = ()
    """Partitions where it records more than the anchor: a run stopped between its tables' commits
    (the next commit of the topic finishes it from its plan and result)."""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "table": self.identifier,
            "ahead_of_anchor": list(self.ahead_of_anchor),
            "exists": self.exists,
            "last_run_id": self.last_run_id,
            "offsets": None if self.offsets is None else {str(p): o for p, o in sorted(self.offsets.items())},
            "last_commit_ms": self.last_commit_ms,
            "conversion_failures": dict(self.conversion_failures),
        }


@dataclass(frozen=True)
class TopicStatus:
    """One mapped topic. `table` is its anchor (the table holding its offsets); a topic written to
    several tables (a route, several mappings) lists the others in `tables`."""

    topic: str
    table: str
    table_exists: bool
    last_commit_ms: int | None
    last_commit_source: str | None
    """`table` (snapshot timestamp), `checkpoints` (newest `updated_at`), or None (never committed)."""
    last_run_id: str | None
    """The last run the table recorded (`kafscale.run-id.<topic>`)."""
    lease: LeaseStatus | None
    consecutive_failures: int
    partitions: tuple[PartitionStatus, ...]
    health: TableHealth | None = None
    """The table's files, small files, snapshots, last maintenance and compaction (when read)."""
    conversion_failures: dict[str, int] = field(default_factory=dict)
    """Per mapping column, committed values stored null because they did not convert (over the
    table's retained snapshots)."""
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Per `error_kind`, the topic's dead-letter rows (over the anchor's retained snapshots)."""
    unfilled_columns: dict[str, str] = field(default_factory=dict)
    """The mapping columns no record of the last run carried, each with its line (the nearest
    fields the records carry; the anchor's `kafscale.unfilled-columns`)."""
    quarantined: tuple[QuarantinedRange, ...] = ()
    """Segments skipped under `corrupt_segment_policy: quarantine` (`kafscale.quarantine.<topic>`);
    each comes back through an offset reset to its first offset once repaired."""
    tables: tuple[TableLine, ...] = ()
    upsert: UpsertCounts | None = None
    """An upsert table (`mode: upsert`): what its runs did, over the table's retained snapshots."""
    backlog: Backlog | None = None
    """Pending bytes against one run's cap: whether the topic falls behind (`domain/backlog.py`)."""

    @property
    def run_in_flight(self) -> str | None:
        """The lease holder's run id (None when free, or held by a Go processor)."""
        return self.lease.run_id if self.lease else None

    @property
    def lag_records(self) -> int:
        """Lag summed over the partitions."""
        return sum(p.lag_records for p in self.partitions)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "topic": self.topic,
            "table": self.table,
            "table_exists": self.table_exists,
            "last_commit_ms": self.last_commit_ms,
            "last_commit_source": self.last_commit_source,
            "last_run_id": self.last_run_id,
            "lease": self.lease.to_json() if self.lease else None,
            "run_in_flight": self.run_in_flight,
            "consecutive_failures": self.consecutive_failures,
            "lag_records": self.lag_records,
            "conversion_failures": dict(self.conversion_failures),
            "dead_letters": dict(self.dead_letters),
            "unfilled_columns": dict(self.unfilled_columns),
            "quarantined": [r.to_json() for r in self.quarantined],
            "partitions": [p.to_json() for p in self.partitions],
            "table_health": _health_json(self.health),
            "tables": [t.to_json() for t in self.tables],
            "upsert": self.upsert.to_json() if self.upsert is not None else None,
            "backlog": self.backlog.to_json() if self.backlog is not None else None,
        }


@dataclass(frozen=True)
class StatusReport:
    """Every mapped topic's status at one moment."""

    generated_at_ms: int
    topics: tuple[TopicStatus, ...]

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (`kafscale-iceberg status --json` prints it)."""
        return {"generated_at_ms": self.generated_at_ms, "topics": [t.to_json() for t in self.topics]}


class StatusService:
    """Computes `StatusReport`s; reads only (see the module docstring for what each read costs)."""

    def __init__(
        self,
        config: KafscaleConfig,
        checkpoints: CheckpointStore,
        segments: SegmentLister,
        tables: TableStatusReader,
        documents: RunDocuments,
        *,
        clock: Callable[[], float] = time.time,
        health: TableHealthReader | None = None,
        tables_of: Callable[[str], tuple[str, ...]] | None = None,
    ) -> None:
        """`tables_of(topic)`: every table of the topic, a route template's included (default: the
        tables the config names)."""
        self._tables_of = tables_of or config.topic_tables
        self._health = health
        self._config = config
        self._checkpoints = checkpoints
        self._segments = segments
        self._tables = tables
        self._documents = documents
        self._clock = clock

    def report(self, topics: Iterable[str] | None = None) -> StatusReport:
        """The status of `topics` (default: every mapped topic, sorted).

        Raises `UnmappedTopicError` for a topic without a mapping, and the adapters' errors (checkpoint
        store, S3, catalog) as they are: a status that could not be read is not guessed.
        """
        now_ms = int(self._clock() * 1000)
        names = sorted(self._config.mapped_topics) if topics is None else list(topics)
        return StatusReport(
            generated_at_ms=now_ms, topics=tuple(self.topic_status(t, now_ms=now_ms) for t in names)
        )

    def topic_status(self, topic: str, *, now_ms: int) -> TopicStatus:
        """One topic's status as of `now_ms`."""
        mapping = self._config.mapping_for(topic)
        if mapping is None:
            raise UnmappedTopicError(f"topic {topic!r} has no mapping in {self._config.source}")
        anchor = mapping.anchor_table
        try:
            state: TableState | None = self._tables.read_state(anchor, topic)
            table_commit_ms = self._tables.last_commit_ms(anchor, topic)
            conversion_failures = self._tables.conversion_failures(anchor, topic)
            dead_letters = self._tables.dead_letter_reasons(anchor, topic)
            unfilled = self._tables.unfilled_columns(anchor, topic)
            anomalies = self._tables.offset_anomalies(anchor, topic)
        except TableMissingError:
            state, table_commit_ms, anomalies = None, None, OffsetAnomalies()
            conversion_failures, dead_letters, unfilled = {}, {}, {}
        table_offsets = state.marker.offsets if state is not None else None
        store = self._checkpoints.load_committed_offsets(topic)
        holder = self._checkpoints.read_lease_holder(topic)
        probe = _SegmentProbe(self._segments, topic)
        in_s3 = self._segments.list_partitions(topic)
        numbers = sorted({*in_s3, *store.states, *(table_offsets or {})})
        partitions = tuple(
            replace(
                self._partition_status(
                    probe,
                    partition,
                    table_offset=None if table_offsets is None else table_offsets.get(partition, NO_OFFSET),
                    store=store,
                    listed=partition in in_s3,
                    now_ms=now_ms,
                ),
                offset_gaps=anomalies.gaps.get(partition, PartitionGaps()),
                overlapped_records=anomalies.overlapped.get(partition, 0),
            )
            for partition in numbers
        )
        if holder is not None:
            failures = _attempt_of(holder.run_id) if holder.run_id else 0
        else:
            stored = {p: store.offset(p) for p in in_s3}
            failures, stuck = self._aborted_attempts(probe, topic, stored, now_ms)
            partitions = _with_problems(partitions, stuck)
        last_commit_ms, source = table_commit_ms, "table" if table_commit_ms is not None else None
        if last_commit_ms is None:
            updated = [s.updated_at_ms for s in store.states.values()]
            if updated:
                last_commit_ms, source = max(updated), "checkpoints"
        several = len(self._config.mappings_for(topic)) > 1 or mapping.route is not None
        return TopicStatus(
            topic=topic,
            table=anchor,
            table_exists=state is not None,
            last_commit_ms=last_commit_ms,
            last_commit_source=source,
            last_run_id=state.marker.run_id if state is not None else None,
            lease=LeaseStatus.of(holder) if holder is not None else None,
            consecutive_failures=failures,
            partitions=partitions,
            health=self._table_health(anchor) if state is not None else None,
            conversion_failures=conversion_failures,
            dead_letters=dead_letters,
            unfilled_columns=unfilled,
            upsert=(
                self._tables.upsert_counts(anchor, topic)
                if mapping.mode == "upsert" and state is not None
                else None
            ),
            quarantined=state.marker.quarantined if state is not None else (),
            backlog=self._backlog(topic, partitions, now_ms),
            tables=tuple(
                self._table_line(table, topic, table_offsets)
                for table in (self._tables_of(topic) if several else ())
                if table != anchor
            ),
        )

    def _backlog(self, topic: str, partitions: Iterable[PartitionStatus], now_ms: int) -> Backlog:
        """The topic's pending bytes against what the launcher's next run takes."""
        limits = run_limits(
            self._config.runs, mappings=self._config.mappings_for(topic), runner=self._config.runner
        )
        return backlog((s for p in partitions for s in p.pending), limits.max_bytes, now_ms=now_ms)

    def _table_line(self, table: str, topic: str, anchor: Mapping[int, int] | None) -> TableLine:
        try:
            state = self._tables.read_state(table, topic)
        except TableMissingError:
            return TableLine(identifier=table, exists=False)
        return TableLine(
            identifier=table,
            exists=True,
            last_run_id=state.marker.run_id,
            offsets=None if state.marker.offsets is None else dict(state.marker.offsets),
            ahead_of_anchor=tuple(
                p
                for p, o in sorted((state.marker.offsets or {}).items())
                if o > (anchor or {}).get(p, NO_OFFSET)
            ),
            last_commit_ms=self._tables.last_commit_ms(table, topic),
            conversion_failures=self._tables.conversion_failures(table, topic),
        )

    def _table_health(self, table: str) -> TableHealth | None:
        if self._health is None:
            return None
        return self._health.health(table, small_file_bytes=self._config.maintenance.small_file_bytes)

    def _partition_status(
        self,
        probe: _SegmentProbe,
        partition: int,
        *,
        table_offset: int | None,
        store: CommittedOffsets,
        listed: bool,
        now_ms: int,
    ) -> PartitionStatus:
        stored = store.state(partition)
        committed = table_offset if table_offset is not None else store.offset(partition)
        problem: str | None = None
        try:
            segments = probe.after(partition, committed) if listed else []
            chosen, stopper = probe.pending(partition, committed) if listed else ([], None)
            complete = [s for s in segments if s.has_index]
            newest = max(committed, probe.last_offset(complete[-1].key)) if complete else committed
        except (SegmentKeyError, SegmentFormatError) as exc:
            # Reported beside the rest: this partition waits, the others (and topics) are shown.
            problem = str(exc)
            segments, chosen, stopper, newest = [], [], None, committed
        lag = newest - committed
        lag_seconds = 0.0
        if lag > 0:
            stamp = stored.last_timestamp_ms if stored is not None and stored.last_timestamp_ms > 0 else None
            if stamp is None:
                stamp = min(s.last_modified_ms for s in segments)
            lag_seconds = max(0.0, (now_ms - stamp) / 1000)
        return PartitionStatus(
            partition=partition,
            committed_offset=committed,
            table_offset=table_offset,
            store_offset=store.offset(partition),
            newest_offset=newest,
            lag_records=lag,
            lag_seconds=lag_seconds,
            pending_segments=len(chosen),
            pending=tuple((c.size_bytes, c.last_modified_ms) for c in chosen),
            blocked_segment=stopper.key if stopper is not None else None,
            last_record_timestamp_ms=stored.last_timestamp_ms if stored is not None else None,
            store_updated_at_ms=stored.updated_at_ms if stored is not None else None,
            problem=problem,
            watermark_age_seconds=(
                max(0.0, (now_ms - stored.last_timestamp_ms) / 1000)
                if stored is not None and stored.last_timestamp_ms > 0
                else None
            ),
        )

    def _aborted_attempts(
        self, probe: _SegmentProbe, topic: str, committed: dict[int, int], now_ms: int
    ) -> tuple[int, dict[int, str]]:
        """Aborted attempts of the range the launcher would plan now (0 when it would plan nothing),
        and, when there are any, why the last one ended, by partition of the range: a stuck topic's
        reason, shown on each partition it holds back."""
        runs = self._config.runs
        if not runs.location:
            return 0, {}
        limits = run_limits(runs, mappings=self._config.mappings_for(topic), runner=self._config.runner)
        selection = select_pending(probe.segments, topic, committed, limits, now_ms=now_ms)
        ranges = []
        for chosen in selection.partitions:
            try:
                end = probe.last_offset(chosen.last.key)
            except SegmentFormatError:
                continue  # the launcher leaves this segment out too
            if end > chosen.committed:
                ranges.append((chosen.partition, chosen.committed, end))
        failures = next_attempt(self._documents, runs.location, topic, ranges) if ranges else 0
        if not failures:
            return 0, {}
        last = make_run_id(topic, ranges, failures - 1)
        try:
            ended = FailedAttempt.model_validate_json(
                self._documents.read_text(run_document_uri(runs.location, topic, last, OUTCOME_NAME))
            )
        except (DocumentMissingError, ValidationError):
            return failures, {}
        attempts = f"{failures} attempt{'' if failures == 1 else 's'}"
        last_one = f"the last, run {last}, {ended.status}: {ended.reason}"
        return failures, {
            p: f"stuck: {attempts} of offsets {start + 1}..{end} ended uncommitted; {last_one}"
            for p, start, end in ranges
        }


class _SegmentProbe:
    """One topic's listings and footers, each read at most once per status call."""

    def __init__(self, segments: SegmentLister, topic: str) -> None:
        self._cached = _CachedSegments(segments)
        self._topic = topic

    @property
    def segments(self) -> SegmentLister:
        """The caching lister (for the launcher's selection rules)."""
        return self._cached

    def after(self, partition: int, offset: int) -> list[ListedSegment]:
        """The segments that may hold offsets after `offset`, as the launcher lists them."""
        return list_after_committed(self._cached, self._topic, partition, offset)

    def pending(self, partition: int, offset: int) -> tuple[list[ListedSegment], ListedSegment | None]:
        """The segments the launcher would take after `offset`, and the one blocking them."""
        return pending_segments(self._cached, self._topic, partition, offset)

    def last_offset(self, key: str) -> int:
        """A segment's last offset from its footer."""
        return self._cached.read_footer(key).last_offset


class _CachedSegments:
    """A `SegmentLister` reading each listing and footer at most once."""

    def __init__(self, segments: SegmentLister) -> None:
        self._segments = segments
        self.bucket = segments.bucket
        self._listings: dict[tuple[str, int, int | None], list[ListedSegment]] = {}
        self._footers: dict[str, SegmentFooter] = {}

    def list_partitions(self, topic: str) -> list[int]:
        return self._segments.list_partitions(topic)

    def list_segments(self, topic: str, partition: int, after_offset: int | None) -> list[ListedSegment]:
        key = (topic, partition, after_offset)
        if key not in self._listings:
            self._listings[key] = self._segments.list_segments(topic, partition, after_offset=after_offset)
        return self._listings[key]

    def read_footer(self, key: str) -> SegmentFooter:
        if key not in self._footers:
            self._footers[key] = self._segments.read_footer(key)
        return self._footers[key]


def _with_problems(
    partitions: tuple[PartitionStatus, ...], problems: Mapping[int, str]
) -> tuple[PartitionStatus, ...]:
    """`partitions` with `problems` (a stuck topic's reason, by partition) where none is shown yet."""
    return tuple(
        replace(p, problem=problems[p.partition]) if p.problem is None and p.partition in problems else p
        for p in partitions
    )


def _attempt_of(run_id: str) -> int:
    """The attempt number a run id ends with (`…-a2` -> 2): the aborted attempts before it."""
    match = _ATTEMPT.search(run_id)
    return int(match.group(1)) if match else 0
