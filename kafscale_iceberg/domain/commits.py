"""How a run's commit is recorded in Iceberg, and the rules that decide whether a run may commit.

Every commit of a run to a table writes, in ONE Iceberg commit (one snapshot):

- the run's data files;
- snapshot summary keys describing exactly what the snapshot added:
  `kafscale.run-id`, `kafscale.topic`, `kafscale.start-offsets` (JSON `{partition: start_exclusive}`),
  `kafscale.offsets` (JSON `{partition: end_inclusive}`), and when the run quarantined segments
  `kafscale.quarantined` (JSON list, see `QuarantinedRange`); an explicit offset reset adds
  `kafscale.reset` (its commit deletes the rows after the new offsets instead of adding files:
  pyiceberg's copy-on-write delete writes a `delete` and/or an `overwrite` snapshot, both in that one
  commit);
- table properties holding the table's whole record for the topic, which survive snapshot expiry:
  `kafscale.offsets.<topic>` (JSON `{partition: last committed offset, inclusive}`, every partition ever
  committed), `kafscale.run-id.<topic>` (the last run committed) and `kafscale.quarantine.<topic>`
  (JSON list of the quarantined ranges still skipped; absent when empty).

The properties are the source of truth (invariant 1); the summaries are the audit trail. Offsets use
KafScale's convention: the last processed offset, inclusive; -1 (`NO_OFFSET`) for nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from kafscale_iceberg.domain.anomalies import OffsetAnomalies
from kafscale_iceberg.domain.runs import NO_OFFSET, ColumnSpec, DataFile, PartitionField, PositionDeleteFile
from kafscale_iceberg.domain.schema import FieldSpec
from kafscale_iceberg.domain.upsert import LocatedIn, UpsertCounts
from kafscale_iceberg.exceptions import TableMarkerError

SUMMARY_RUN_ID = "kafscale.run-id"
SUMMARY_TOPIC = "kafscale.topic"
SUMMARY_START_OFFSETS = "kafscale.start-offsets"
SUMMARY_OFFSETS = "kafscale.offsets"
SUMMARY_QUARANTINED = "kafscale.quarantined"
SUMMARY_RESET = "kafscale.reset"
SUMMARY_CONVERSION_FAILURES = "kafscale.conversion-failures"
SUMMARY_UNFILLED_COLUMNS = "kafscale.unfilled-columns"
"""Per mapping column no record of the run carried, its line (`domain.column_fill.describe_unfilled`)."""
"""JSON `{column: count}`: the run's values that did not convert to their column (data table only)."""
SUMMARY_DEAD_LETTERS = "kafscale.dead-letters"
"""JSON `{error_kind: count}`: the run's dead-letter rows per reason, every mapping's (the topic's anchor
table only, so `status` reads them where it reads the offsets)."""

OFFSETS_PROPERTY_PREFIX = "kafscale.offsets."
RUN_ID_PROPERTY_PREFIX = "kafscale.run-id."
QUARANTINE_PROPERTY_PREFIX = "kafscale.quarantine."


def offsets_property(topic: str) -> str:
    """`kafscale.offsets.<topic>`: the table property holding the topic's committed offsets."""
    return f"{OFFSETS_PROPERTY_PREFIX}{topic}"


def run_id_property(topic: str) -> str:
    """`kafscale.run-id.<topic>`: the table property naming the last run committed for the topic."""
    return f"{RUN_ID_PROPERTY_PREFIX}{topic}"


def quarantine_property(topic: str) -> str:
    """`kafscale.quarantine.<topic>`: the table property listing the quarantined ranges still skipped."""
    return f"{QUARANTINE_PROPERTY_PREFIX}{topic}"


def encode_offsets(offsets: Mapping[int, int]) -> str:
    """Compact JSON `{"0":41,"1":99}`, partitions in numeric order (JSON keys are strings)."""
    return json.dumps({str(p): offsets[p] for p in sorted(offsets)}, separators=(",", ":"))


def decode_offsets(text: str, *, table: str, key: str) -> dict[int, int]:
    """Parse `encode_offsets` output; raises `TableMarkerError` naming the table and key otherwise."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TableMarkerError(table, key, f"not JSON ({exc}): {text[:120]!r}") from exc
    if not isinstance(document, dict):
        raise TableMarkerError(table, key, f"expected a JSON object {{partition: offset}}: {text[:120]!r}")
    offsets: dict[int, int] = {}
    for name, value in document.items():
        if (
            not (isinstance(name, str) and name.isdigit())
            or isinstance(value, bool)
            or not isinstance(value, int)
        ):
            raise TableMarkerError(table, key, f"entry {name!r}: {value!r} is not partition: offset")
        if value < NO_OFFSET:
            raise TableMarkerError(table, key, f"partition {name}: offset {value} is below {NO_OFFSET}")
        offsets[int(name)] = value
    return offsets


@dataclass(frozen=True, order=True)
class QuarantinedRange:
    """A segment's offsets `[first_offset, last_offset]` skipped under the quarantine policy.

    The committed offset moved past it; the range is recorded (table property and dead-letter row)
    until an offset reset to before it (`replay --reset-offsets`, `ranges_after`) drops it, so the
    repaired segment is read again by the runs that follow.
    """

    partition: int
    first_offset: int
    last_offset: int
    segment_key: str
    run_id: str

    def to_json(self) -> dict[str, object]:
        """The JSON object stored in the property and the summary (short keys, fixed order)."""
        return {
            "partition": self.partition,
            "first": self.first_offset,
            "last": self.last_offset,
            "key": self.segment_key,
            "run_id": self.run_id,
        }

    @property
    def span(self) -> tuple[int, int, int]:
        """`(partition, first, last)`: what identifies the range (the run and key are informative)."""
        return (self.partition, self.first_offset, self.last_offset)


def encode_quarantine(ranges: Iterable[QuarantinedRange]) -> str:
    """Compact JSON list of ranges, sorted by partition and offsets."""
    return json.dumps([r.to_json() for r in sorted(ranges)], separators=(",", ":"))


def decode_quarantine(text: str, *, table: str, key: str) -> tuple[QuarantinedRange, ...]:
    """Parse `encode_quarantine` output; raises `TableMarkerError` naming the table and key otherwise."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TableMarkerError(table, key, f"not JSON ({exc}): {text[:120]!r}") from exc
    if not isinstance(document, list):
        raise TableMarkerError(table, key, f"expected a JSON list of ranges: {text[:120]!r}")
    ranges: list[QuarantinedRange] = []
    for entry in document:
        try:
            ranges.append(
                QuarantinedRange(
                    partition=_int(entry["partition"]),
                    first_offset=_int(entry["first"]),
                    last_offset=_int(entry["last"]),
                    segment_key=str(entry["key"]),
                    run_id=str(entry["run_id"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TableMarkerError(table, key, f"entry {entry!r} is not a quarantined range ({exc})") from exc
    return tuple(sorted(ranges))


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return value


@dataclass(frozen=True)
class TableMarker:
    """What a table records for one topic (its `kafscale.*.<topic>` properties)."""

    offsets: Mapping[int, int] | None
    """Last committed offset per partition; None when this product never committed the topic here."""
    run_id: str | None = None
    quarantined: tuple[QuarantinedRange, ...] = ()

    def __post_init__(self) -> None:
        if self.offsets is not None:
            object.__setattr__(self, "offsets", MappingProxyType(dict(sorted(self.offsets.items()))))
        object.__setattr__(self, "quarantined", tuple(sorted(self.quarantined)))

    def offset(self, partition: int) -> int:
        """The partition's committed offset, `NO_OFFSET` when none is recorded."""
        return NO_OFFSET if self.offsets is None else self.offsets.get(partition, NO_OFFSET)


def read_marker(properties: Mapping[str, str], topic: str, *, table: str) -> TableMarker:
    """The topic's marker from a table's properties; raises `TableMarkerError` if one is malformed."""
    offsets_text = properties.get(offsets_property(topic))
    quarantine_text = properties.get(quarantine_property(topic))
    return TableMarker(
        offsets=None
        if offsets_text is None
        else decode_offsets(offsets_text, table=table, key=offsets_property(topic)),
        run_id=properties.get(run_id_property(topic)),
        quarantined=()
        if quarantine_text is None
        else decode_quarantine(quarantine_text, table=table, key=quarantine_property(topic)),
    )


def marker_properties(topic: str, marker: TableMarker) -> tuple[dict[str, str], tuple[str, ...]]:
    """The table properties to set, and those to remove, so the table records `marker` for `topic`."""
    updates: dict[str, str] = {}
    removals: list[str] = []
    if marker.offsets is not None:
        updates[offsets_property(topic)] = encode_offsets(marker.offsets)
    if marker.run_id is not None:
        updates[run_id_property(topic)] = marker.run_id
    if marker.quarantined:
        updates[quarantine_property(topic)] = encode_quarantine(marker.quarantined)
    else:
        removals.append(quarantine_property(topic))
    return updates, tuple(removals)


@dataclass(frozen=True)
class TableState:
    """A table's commit state for one topic, as read; `snapshot_id` is the version a commit builds on."""

    table: str
    topic: str
    snapshot_id: int | None
    marker: TableMarker
    snapshot_count: int = 0
    version: str | None = field(default=None, compare=False)
    """The table metadata this state was read from (its location); None for a table not read."""
    data_files: int = field(default=0, compare=False)
    """The table's data files at this snapshot (its summary's `total-data-files`; 0 when not read)."""
    files_baseline: int = field(default=0, compare=False)
    """The data files it had when maintenance last passed (`kafscale.maintenance.files-baseline`):
    with `data_files`, what the small-file trigger needs, with no read of its own."""


@dataclass(frozen=True)
class TableCommit:
    """One Iceberg commit of one run to one table: files, and the marker the table records after it."""

    topic: str
    run_id: str
    file_uris: tuple[str, ...]
    start_offsets: Mapping[int, int]
    end_offsets: Mapping[int, int]
    marker_after: TableMarker
    quarantined: tuple[QuarantinedRange, ...] = ()
    reset: bool = False
    """An explicit offset reset (no files): the summary says so, start/end are before/after."""
    delete_after: Mapping[int, int] = field(default_factory=dict)
    """Rows to delete in the same commit: per partition, every row whose `offset` is greater (a reset)."""
    files: tuple[DataFile, ...] = ()
    """What the run reported about `file_uris` (their metrics, so no footer is read at commit)."""
    field_ids: Mapping[str, int] | None = None
    """The Parquet field ids the files carry (None: none); checked against the table before adding."""
    conversion_failures: Mapping[str, int] = field(default_factory=dict)
    """Per column, the run's values stored null because they did not convert (audit trail, `status`)."""
    anomalies: OffsetAnomalies = field(default_factory=OffsetAnomalies)
    """Per partition, offset gaps and overlapped records of the run (audit trail, `status`)."""
    dead_letters: Mapping[str, int] = field(default_factory=dict)
    """Per `error_kind`, the run's dead-letter rows (the anchor table's audit trail, `status`)."""
    rewrite_location: str | None = None
    """Where files `delete_after` rewrites are written (None: the table's data location). A reset
    writes them under its own run folder of the product's data prefix, where orphan cleanup looks."""
    columns: tuple[ColumnSpec, ...] | None = None
    """An inferred table's columns (after the base fields) the files were written with: those the
    table lacks are added, optional, in this same commit (None: the table's schema is not touched)."""
    removed_files: tuple[str, ...] = ()
    """Data files of the table this commit replaces (an upsert run's rewrite): the commit is then
    ONE `overwrite` snapshot removing them and adding `file_uris`."""
    upsert: UpsertCounts | None = None
    """An upsert run: what it did to the table (summary keys `kafscale.upsert.*`)."""
    located: LocatedIn | None = None
    """An upsert run that changed keys: the table version they were located in; the commit refuses
    (`UpsertLocateStaleError`) when it no longer stands."""
    added_deletes: tuple[PositionDeleteFile, ...] = ()
    """Position delete files of a merge-on-read upsert run: the commit is then ONE row delta adding
    them with `file_uris`, refused unless every data file they target is still in the table."""
    table_properties: Mapping[str, str] = field(default_factory=dict)
    """Table properties set in the same commit (an upsert table's `write.*.mode`)."""
    unfilled_columns: Mapping[str, str] = field(default_factory=dict)
    """Per mapping column no record of the run carried, its line (summary key, `status`)."""

    def summary(self) -> dict[str, str]:
        """The snapshot summary keys: what this snapshot added, for audit and recovery."""
        summary = {SUMMARY_RUN_ID: self.run_id, SUMMARY_TOPIC: self.topic}
        if self.reset:
            summary[SUMMARY_RESET] = "true"
        summary[SUMMARY_START_OFFSETS] = encode_offsets(self.start_offsets)
        summary[SUMMARY_OFFSETS] = encode_offsets(self.end_offsets)
        if self.quarantined:
            summary[SUMMARY_QUARANTINED] = encode_quarantine(self.quarantined)
        for key, counts in (
            (SUMMARY_CONVERSION_FAILURES, self.conversion_failures),
            (SUMMARY_DEAD_LETTERS, self.dead_letters),
        ):
            if counts:
                summary[key] = json.dumps(dict(sorted(counts.items())), separators=(",", ":"))
        if self.unfilled_columns:
            summary[SUMMARY_UNFILLED_COLUMNS] = json.dumps(dict(self.unfilled_columns), separators=(",", ":"))
        summary.update(self.anomalies.summary())
        if self.upsert is not None:
            summary.update(self.upsert.summary())
        return summary


def decode_counts(text: str) -> dict[str, int]:
    """A `kafscale.conversion-failures` or `kafscale.dead-letters` summary value; what is not a
    `{name: count}` object is ignored (it is an audit trail, never a reason to fail a status)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if type(v) is int and v >= 0}


class Standing(StrEnum):
    """Where a run stands against what a table recorded."""

    COMMITTED = "committed"
    """Every partition of the run is at or past its end: the run (or a later one) is in."""
    READY = "ready"
    """Every partition is exactly at the run's start: the run may commit."""
    MISMATCH = "mismatch"
    """Anything else: someone else committed meanwhile, or the plan is stale."""


@dataclass(frozen=True)
class RunStanding:
    """Where a run stands against a table (`stand_run`, `stand_dead_letters`), with
    `(partition, expected start, found)` for each partition that stops it from committing."""

    standing: Standing
    mismatches: tuple[tuple[int, int, int], ...] = ()

    @property
    def partitions(self) -> tuple[int, ...]:
        """The mismatched partitions, in order."""
        return tuple(partition for partition, _start, _found in self.mismatches)


def stand_run(
    committed: Mapping[int, int], starts: Mapping[int, int], ends: Mapping[int, int]
) -> RunStanding:
    """Compare a run's `(start, end]` ranges with committed offsets (missing partitions are at -1)."""
    found = {p: committed.get(p, NO_OFFSET) for p in starts}
    if all(found[p] >= ends[p] for p in starts):
        return RunStanding(Standing.COMMITTED)
    mismatches = tuple((p, starts[p], found[p]) for p in sorted(starts) if found[p] != starts[p])
    if not mismatches:
        return RunStanding(Standing.READY)
    return RunStanding(Standing.MISMATCH, mismatches)


def stand_dead_letters(
    committed: Mapping[int, int], starts: Mapping[int, int], ends: Mapping[int, int]
) -> RunStanding:
    """Like `stand_run` for a dead-letter table, whose offsets lag when runs have no dead letters.

    COMMITTED when every partition is at or past the run's end; READY when every partition is at or
    before the run's start; otherwise MISMATCH naming the partitions inside the run's range.
    """
    found = {p: committed.get(p, NO_OFFSET) for p in starts}
    if all(found[p] >= ends[p] for p in starts):
        return RunStanding(Standing.COMMITTED)
    inside = tuple((p, starts[p], found[p]) for p in sorted(starts) if found[p] > starts[p])
    return RunStanding(Standing.MISMATCH, inside) if inside else RunStanding(Standing.READY)


def ranges_straddling(
    quarantined: Iterable[QuarantinedRange], offsets: Mapping[int, int]
) -> tuple[QuarantinedRange, ...]:
    """Quarantined ranges an offset reset would cut in two: `first <= offsets[partition] < last`.

    A reset to such an offset would keep the range's dead-letter row (its `offset` is `first`) while
    re-ingesting the rest of the segment, so it is refused; resets before or after a range are fine.
    """
    return tuple(
        r
        for r in quarantined
        if r.partition in offsets and r.first_offset <= offsets[r.partition] < r.last_offset
    )


def ranges_after(
    quarantined: Iterable[QuarantinedRange], offsets: Mapping[int, int]
) -> tuple[QuarantinedRange, ...]:
    """The quarantined ranges that lie wholly after the reset offsets of their partitions."""
    return tuple(r for r in quarantined if r.partition in offsets and r.first_offset > offsets[r.partition])


def advance_offsets(baseline: Mapping[int, int], ends: Mapping[int, int]) -> dict[int, int]:
    """The topic's offsets after a run: `baseline` with each run partition moved to its end.

    Never moves a partition backwards (max), so a marker is monotonic whatever the caller passes.
    """
    merged = dict(baseline)
    for partition, end in ends.items():
        merged[partition] = max(end, merged.get(partition, NO_OFFSET))
    return merged


@dataclass(frozen=True)
class Reconciliation:
    """A topic's committed offsets as planning must use them, and how the checkpoint store compares.

    `offsets` come from the table when it holds a marker for the topic (the source of truth), else
    from the checkpoint store (a table the KafScale Go processor wrote, or nothing committed yet).
    `store_behind` / `store_ahead` map partition -> `(store offset, table offset)`.
    """

    topic: str
    offsets: Mapping[int, int]
    from_table: bool
    store_behind: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    store_ahead: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    def offset(self, partition: int) -> int:
        """The partition's committed offset, `NO_OFFSET` (-1) when nothing was committed."""
        return self.offsets.get(partition, NO_OFFSET)


def reconcile(topic: str, marker: TableMarker, store: Mapping[int, int]) -> Reconciliation:
    """Decide the committed offsets from the table's marker and the checkpoint store's offsets.

    The table wins. Only when the table never recorded the topic (no `kafscale.offsets.<topic>`) are
    the store's offsets adopted - that is how a table written by the Go processor is taken over
    without reprocessing.
    """
    if marker.offsets is None:
        return Reconciliation(topic=topic, offsets=dict(store), from_table=False)
    behind: dict[int, tuple[int, int]] = {}
    ahead: dict[int, tuple[int, int]] = {}
    for partition in sorted(set(marker.offsets) | set(store)):
        table_offset = marker.offset(partition)
        store_offset = store.get(partition, NO_OFFSET)
        if store_offset < table_offset:
            behind[partition] = (store_offset, table_offset)
        elif store_offset > table_offset:
            ahead[partition] = (store_offset, table_offset)
    return Reconciliation(
        topic=topic, offsets=dict(marker.offsets), from_table=True, store_behind=behind, store_ahead=ahead
    )


@dataclass(frozen=True)
class TableSpec:
    """The table a run's files go to: its fields, partitioning, and what may be changed on it."""

    identifier: str
    fields: tuple[FieldSpec, ...]
    partition_by: tuple[PartitionField, ...] = ()
    create_if_missing: bool = False
    allow_type_widening: bool = False
    evolve: bool = True
    identifier_fields: tuple[str, ...] = ()
    """An upsert table's key columns, declared as the table's identifier fields."""
    """False for an inferred table: `ensure_table` only creates it; its new columns are added by the
    commit of the run's files, in the same Iceberg commit (`TableCommit.columns`)."""

    @property
    def namespace(self) -> tuple[str, ...]:
        """Every part of the identifier but the last."""
        return tuple(self.identifier.split("."))[:-1]


def describe_partitioning(fields: Sequence[tuple[str, str]]) -> str:
    """`day(ts), identity(partition), bucket[16](id)` from `(transform, column)` pairs (Iceberg's
    transform names)."""
    return ", ".join(f"{transform}({column})" for transform, column in fields)
