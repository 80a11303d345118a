"""What a run writes to each of its tables, read from its plan and result (the commit step's inputs).

- `TablePolicy`: what the commit may do to a mapping's table (create it, widen its types).
- `check_committable`: a result that can never be committed is refused before anything is read.
- The writes, each a `TableWrite` that `services.commits.verified_commit` verifies and commits once:
  `DataTableWrite` (the topic's anchor table; adopts the checkpoint store's offsets when the table never
  recorded the topic), `DeadLetterTableWrite` and `LaggingTableWrite` (tables committed before the
  anchor, whose offsets lag).
- `output_spec`, `plan_target`, `inferred_columns`: how each table of the run is created or evolved,
  and which of the plan's targets it is.

`services.commits.commit.CommitService` orders these writes; nothing here reads or writes a table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

from kafscale_iceberg.domain.anomalies import OffsetAnomalies
from kafscale_iceberg.domain.commits import (
    QuarantinedRange,
    Standing,
    TableCommit,
    TableMarker,
    TableSpec,
    TableState,
    advance_offsets,
    stand_dead_letters,
    stand_run,
)
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.routing import matches_template
from kafscale_iceberg.domain.runs import (
    ColumnSpec,
    DataFile,
    RunPlan,
    RunResult,
    RunStatus,
    TableOutput,
    TableRole,
    TableTarget,
    table_outputs,
)
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, table_fields
from kafscale_iceberg.exceptions import DeadLetterAheadError, OffsetMismatchError, RunNotCommittableError
from kafscale_iceberg.services.commits.verified_commit import TableWrite

if TYPE_CHECKING:
    from kafscale_iceberg.config import MappingConfig


@dataclass(frozen=True)
class TablePolicy:
    """What the commit step may do to a mapping's table (`create_table_if_missing`, widening).

    The dead-letter table is created when missing whatever this says: it is this product's own table.
    """

    create_table_if_missing: bool = False
    allow_type_widening: bool = False
    more: tuple[TablePolicy, ...] = ()
    """The policies of the topic's later mappings, in config order."""

    @classmethod
    def from_mapping(cls, mapping: MappingConfig, *more: MappingConfig) -> TablePolicy:
        """The policy a config mapping sets (`create_table_if_missing`, `schema.allow_type_widening`);
        `more`: the topic's later mappings."""
        return cls(
            create_table_if_missing=mapping.create_table_if_missing,
            allow_type_widening=mapping.schema_.allow_type_widening,
            more=tuple(cls.from_mapping(m) for m in more),
        )

    def for_mapping(self, index: int) -> TablePolicy:
        """The policy of the topic's mapping `index` (a mapping the config no longer has: the first's)."""
        return self.more[index - 1] if 0 < index <= len(self.more) else self


@dataclass(frozen=True)
class RunFilesWrite(TableWrite):
    """A run's files (data files or dead letters) to one of its tables, with the marker moved to the
    run's ends (`DataTableWrite`, `DeadLetterTableWrite`)."""

    starts: Mapping[int, int]
    ends: Mapping[int, int]
    files: tuple[DataFile, ...]
    quarantined: tuple[QuarantinedRange, ...]
    field_ids: Mapping[str, int] | None
    conversion_failures: Mapping[str, int] = field(default_factory=dict)
    anomalies: OffsetAnomalies = field(default_factory=OffsetAnomalies)
    """The run's offset gaps and overlapped records (the data table's summary, for `status`)."""
    dead_letters: Mapping[str, int] = field(default_factory=dict)
    """The run's dead-letter rows per reason (the anchor's summary, for `status`)."""
    columns: tuple[ColumnSpec, ...] | None = None
    """An inferred table's columns the files were written with (added in the same commit when new)."""
    unfilled_columns: Mapping[str, str] = field(default_factory=dict)
    """Per mapping column no record of the run carried, its line (the summary, for `status`)."""

    def baseline(self, state: TableState) -> Mapping[int, int]:
        """The topic's committed offsets in this table before the run."""
        return state.marker.offsets or {}

    def build(self, state: TableState) -> TableCommit:
        return TableCommit(
            topic=self.topic,
            run_id=self.run_id,
            file_uris=tuple(f.uri for f in self.files),
            files=self.files,
            start_offsets=self.starts,
            end_offsets=self.ends,
            marker_after=TableMarker(
                offsets=advance_offsets(self.baseline(state), self.ends),
                run_id=self.run_id,
                quarantined=merge_ranges(state.marker.quarantined, self.quarantined),
            ),
            quarantined=self.quarantined,
            field_ids=self.field_ids,
            conversion_failures=dict(self.conversion_failures),
            anomalies=self.anomalies,
            dead_letters=dict(self.dead_letters),
            columns=self.columns,
            unfilled_columns=dict(self.unfilled_columns),
        )

    @classmethod
    def for_run(
        cls,
        plan: RunPlan,
        target: TableTarget,
        files: tuple[DataFile, ...],
        quarantined: tuple[QuarantinedRange, ...],
        **more: Any,
    ) -> Self:
        """The write of `plan`'s `files` to `target` (`more`: the subclass's own fields)."""
        return cls(
            table=target.identifier,
            topic=plan.topic,
            run_id=plan.run_id,
            starts=plan.start_offsets(),
            ends=plan.end_offsets(),
            files=files,
            quarantined=quarantined,
            field_ids=target.field_ids,
            **more,
        )


@dataclass(frozen=True)
class DataTableWrite(RunFilesWrite):
    """The run's data files to the mapping's table. A table that never recorded the topic (new, or
    written by the Go processor) adopts the checkpoint store's offsets (`adopted`)."""

    adopted: Mapping[int, int] = field(default_factory=dict)

    def baseline(self, state: TableState) -> Mapping[int, int]:
        return committed_offsets(state, self.adopted)

    def verify(self, state: TableState) -> Standing:
        """COMMITTED or READY; `OffsetMismatchError` when the table is not at the run's start."""
        verdict = stand_run(self.baseline(state), self.starts, self.ends)
        if verdict.standing is Standing.MISMATCH:
            raise OffsetMismatchError(self.table, self.topic, self.run_id, verdict.mismatches)
        return verdict.standing


@dataclass(frozen=True)
class DeadLetterTableWrite(RunFilesWrite):
    """The run's dead letters (and quarantined ranges) to the dead-letter table, whose offsets lag:
    they move only when a run has dead letters, so nothing is adopted."""

    action: ClassVar[str] = "dead-letter commit"
    kind: ClassVar[str] = "dead-letter table"

    def verify(self, state: TableState) -> Standing:
        """COMMITTED or READY; `DeadLetterAheadError` when it holds part of the run from another run."""
        verdict = stand_dead_letters(dict(self.baseline(state)), self.starts, self.ends)
        if verdict.standing is Standing.MISMATCH:
            raise DeadLetterAheadError(
                self.table, self.topic, self.run_id, state.marker.run_id, verdict.partitions, self.kind
            )
        return verdict.standing


@dataclass(frozen=True)
class LaggingTableWrite(DeadLetterTableWrite):
    """The run's rows to a data table that is not the topic's anchor (a routed table, another mapping's
    table): committed before the anchor, only when the run has rows for it, so its offsets lag like
    a dead-letter table's (same verification)."""

    action: ClassVar[str] = "table commit (before the anchor)"
    kind: ClassVar[str] = "table (committed before the topic's anchor)"


def check_committable(plan: RunPlan, result: RunResult, lease: LeaseGrant) -> None:
    """Refuse (`RunNotCommittableError`) a result that can never be committed under `lease`: another
    topic's lease, another run's result, a failed run, partitions the plan lacks, files outside the
    run's prefixes."""
    if lease.topic != plan.topic:
        raise RunNotCommittableError(
            plan.run_id, f"the lease given is for topic {lease.topic!r}, the run is of topic {plan.topic!r}"
        )
    if result.run_id != plan.run_id or result.topic != plan.topic:
        raise RunNotCommittableError(
            plan.run_id, f"the result is of run {result.run_id!r} (topic {result.topic!r}), not of this plan"
        )
    if result.status is not RunStatus.SUCCEEDED:
        reason = result.failure.message if result.failure else "no reason recorded"
        raise RunNotCommittableError(
            plan.run_id, f"the run {result.status.value}: {reason} (nothing of a failed run is committed)"
        )
    planned = set(plan.start_offsets())
    unplanned = sorted({o.partition for o in result.partitions} - planned)
    if unplanned:
        raise RunNotCommittableError(plan.run_id, f"the result reports partitions {unplanned} the plan lacks")
    if not plan.multi_table and result.tables:
        raise RunNotCommittableError(plan.run_id, "the result lists tables a plan of one table has not")
    if plan.multi_table and (result.data_files or result.dead_letter_files):
        raise RunNotCommittableError(
            plan.run_id, "a plan of several tables lists its files per table (`tables`), not in data_files"
        )
    names = {t.identifier for m in plan.mappings for t, _ in m.static_targets()}
    for output in result.tables:
        if output.identifier not in names and not _templated(plan, output):
            raise RunNotCommittableError(
                plan.run_id,
                f"the result lists table {output.identifier!r}, which no mapping of the plan names",
            )
    for output in table_outputs(plan, result):
        target, files = plan_target(plan, output), output.files
        prefix = target.data_uri.rstrip("/") + "/"
        foreign = [f.uri for f in files if not f.uri.startswith(prefix)]
        if foreign:
            raise RunNotCommittableError(
                plan.run_id,
                f"{len(foreign)} file(s) for {target.identifier!r} lie outside the run's prefix {prefix!r}, "
                f"e.g. {foreign[0]!r}",
            )


def quarantined_ranges(result: RunResult) -> tuple[QuarantinedRange, ...]:
    """The ranges the run quarantined, sorted."""
    return tuple(
        sorted(
            QuarantinedRange(outcome.partition, q.base_offset, q.last_offset, q.key, result.run_id)
            for outcome in result.partitions
            for q in outcome.quarantined
        )
    )


def merge_ranges(
    existing: tuple[QuarantinedRange, ...], new: tuple[QuarantinedRange, ...]
) -> tuple[QuarantinedRange, ...]:
    """`existing` and those of `new` not already listed, sorted."""
    spans = {r.span for r in existing}
    return tuple(sorted((*existing, *(r for r in new if r.span not in spans))))


def _templated(plan: RunPlan, output: TableOutput) -> bool:
    """Whether `output` is a table its mapping's route template names (a valid value's table)."""
    if output.role is not TableRole.DATA or output.mapping >= len(plan.mappings):
        return False
    route = plan.mappings[output.mapping].route
    return (
        route is not None
        and route.table_template is not None
        and matches_template(route.table_template, output.identifier)
        and output.identifier not in route.reserved
    )


def plan_target(plan: RunPlan, output: TableOutput) -> TableTarget:
    """The plan's target of a table of the run (a template's table: its target from the route)."""
    for mapping in plan.mappings:
        for target, _role in mapping.static_targets():
            if target.identifier == output.identifier:
                return target
    route = plan.mappings[output.mapping].route if output.mapping < len(plan.mappings) else None
    if route is None or route.table_template is None:
        raise RunNotCommittableError(plan.run_id, f"table {output.identifier!r} is not a table of the plan")
    return route.template_target(output.identifier)


def inferred_columns(plan: RunPlan, output: TableOutput) -> tuple[ColumnSpec, ...] | None:
    """The columns an inferred table's files were written with (the commit adds those it lacks);
    None for every other table (its schema is not touched by the commit)."""
    mapping = plan.mappings[output.mapping]
    if output.role is not TableRole.DATA or not mapping.conversion.infer_columns:
        return None
    target = mapping.target(output.identifier)
    if target is None:
        return None
    return mapping.conversion_for(target).table_columns


def output_spec(plan: RunPlan, output: TableOutput, policy: TablePolicy) -> TableSpec:
    """How a table of the run is created or evolved: a dead-letter table (always created when
    missing), or a mapping's table under its mapping's policy (a template's tables are created as
    values appear). An inferred table (give the plan as written, `plan_as_written`) is created from
    the columns its files were written with (a routed one: its own) and never evolved here: the
    commit of its files adds the new columns, in the same Iceberg commit."""
    if output.role is TableRole.DEAD_LETTER:
        return TableSpec(identifier=output.identifier, fields=DEAD_LETTER_FIELDS, create_if_missing=True)
    mapping = plan.mappings[output.mapping]
    chosen = policy.for_mapping(output.mapping)
    static = {t.identifier for t, _ in mapping.static_targets()}
    target = mapping.target(output.identifier)
    conversion = mapping.conversion if target is None else mapping.conversion_for(target)
    return TableSpec(
        identifier=output.identifier,
        fields=table_fields(conversion.table_columns),
        partition_by=mapping.conversion.partition_by,
        create_if_missing=chosen.create_table_if_missing or output.identifier not in static,
        allow_type_widening=chosen.allow_type_widening,
        evolve=not mapping.conversion.infer_columns,
        identifier_fields=mapping.conversion.upsert.key if mapping.conversion.upsert is not None else (),
    )


def committed_offsets(state: TableState, store: Mapping[int, int]) -> dict[int, int]:
    """The table's record when it has one for the topic, else the checkpoint store's (adoption)."""
    return dict(state.marker.offsets) if state.marker.offsets is not None else dict(store)
