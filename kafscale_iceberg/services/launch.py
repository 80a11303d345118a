"""The launcher: for a topic with pending segments, claim its lease, plan a run, write the plan, start it.

Per topic, in this order:
1. if another run holds the topic's lease, do nothing (the holder re-signals the topic when it
   ends, so nothing is lost by acknowledging);
2. plan from the committed offsets: list each partition's segments after its committed offset,
   choose within the run limits (or wait for a minimum batch), read the footer of each partition's
   last chosen segment for the range's end;
3. resolve the mapping's columns and JSON schema from the registry when configured (an unreachable
   registry fails planning, which is retried — records are never dropped for it);
4. claim the lease under the run id, re-read the committed offsets under the lease (a commit that
   landed meanwhile means re-planning), write the plan, and hand the run to the run steps (which
   start the job).

Attempts: a run id includes the attempt number; a range whose previous attempt was aborted gets the
next attempt, so the EMR `clientToken` of a failed run is never reused. The attempt count *is* the
topic's consecutive-failure count, and resets when the range moves on.

The committed offsets the launcher plans from are the checkpoint store's, a fenced cache of the
table's. The commit step compares the plan's starts with the table, the source of truth, and
refuses a stale plan (repairing the store), so a stale cache costs one wasted run, never a duplicate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kafscale_iceberg.config import KafscaleConfig, MappingConfig
from kafscale_iceberg.domain.field_ids import TableFieldIds, TopicFieldIds, planned_field_ids
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant
from kafscale_iceberg.domain.planning import (
    PartitionSelection,
    Selection,
)
from kafscale_iceberg.domain.registry import columns_from_json_schema
from kafscale_iceberg.domain.routing import PATH_PLACEHOLDER, matches_template
from kafscale_iceberg.domain.runner_choice import RunnerLineup
from kafscale_iceberg.domain.runs import (
    ConversionSettings,
    MappingPlan,
    PartitionPlan,
    PlannedSegment,
    RoutePlan,
    RunPlan,
    SchemaMode,
    SegmentSource,
    TableTarget,
    make_run_id,
)
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, FieldSpec, table_fields
from kafscale_iceberg.domain.table_locations import (
    created_table_location,
    data_location_of,
    kafscale_data_prefix,
)
from kafscale_iceberg.domain.tickets import (
    OUTCOME_NAME,
    PLAN_NAME,
    RESULT_NAME,
    FailedAttempt,
    RunTicket,
    join_uri,
    run_document_uri,
)
from kafscale_iceberg.exceptions import (
    RunAttemptEndedError,
    SegmentFormatError,
    UnmappedTopicError,
)
from kafscale_iceberg.ports import CheckpointStore, RunDocuments, RunStarter, SchemaRegistry, SegmentLister
from kafscale_iceberg.segments.layout import SegmentFooter
from kafscale_iceberg.services.backoff import BackoffRecords
from kafscale_iceberg.services.field_id_records import FieldIdRecords
from kafscale_iceberg.services.pending import concurrently, run_limits, select_pending

logger = logging.getLogger(__name__)


def run_data_prefix(
    config: KafscaleConfig, identifier: tuple[str, ...], known: TableFieldIds | None = None
) -> str | None:
    """The folder holding every run's data files of a table (one subfolder per run id), inside the
    table's data location (`domain/table_locations.py`): the one `known` records, else where this
    product creates the table in a storage warehouse; None when neither is known (the catalog
    chooses the location of a table not created yet). Orphan-file cleanup looks only here."""
    if known is not None and known.data_location:
        return kafscale_data_prefix(known.data_location)
    location = created_table_location(config.iceberg.warehouse, ".".join(identifier))
    return None if location is None else kafscale_data_prefix(data_location_of(location, {}))


def next_attempt(
    documents: RunDocuments, runs_location: str, topic: str, ranges: list[tuple[int, int, int]]
) -> int:
    """The attempt a run of `ranges` takes: one more than its attempts that ended without a commit
    (each recorded by an `outcome.json` beside its plan)."""
    attempt = 0
    while documents.exists(
        run_document_uri(runs_location, topic, make_run_id(topic, ranges, attempt), OUTCOME_NAME)
    ):
        attempt += 1
    return attempt


class LaunchStatus(StrEnum):
    """What the launcher did for a topic."""

    STARTED = "started"
    BUSY = "busy"
    IDLE = "idle"
    WAITING = "waiting"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class LaunchOutcome:
    """The launcher's answer for one topic; `ticket` is the started run's."""

    topic: str
    status: LaunchStatus
    detail: str = ""
    ticket: RunTicket | None = None
    wait_seconds: float = 0.0
    replan: bool = False
    """The committed offsets moved under the claimed lease: plan again from them."""
    batching: bool = False
    """WAITING for a larger batch (`runs.min_bytes_per_run`, at most `max_wait_seconds`): nothing
    re-signals the topic, so the caller looks again after `wait_seconds`."""
    held: Mapping[int, str] = field(default_factory=dict)
    """Partitions left out (a malformed or corrupt segment in their way, or a partition failing on
    one): they wait, with why; the others ran (or were idle)."""


class Launcher:
    """Plans and starts runs (see the module docstring)."""

    def __init__(
        self,
        config: KafscaleConfig,
        checkpoints: CheckpointStore,
        segments: SegmentLister,
        documents: RunDocuments,
        starter: RunStarter,
        *,
        owner_id: str,
        registry: SchemaRegistry | None = None,
        partition_filter: Callable[[str], frozenset[int] | None] | None = None,
        clock: Callable[[], float] = time.time,
        repair_from_table: Callable[[str, LeaseGrant], object] | None = None,
    ) -> None:
        """`repair_from_table(topic, grant)`, when given, sets the checkpoint store to the table's
        offsets under the claimed lease (`CommitService.reconciled_offsets`) and `field-ids.json` to the
        upsert tables' current versions before a plan is made; a repair that moves a planned start
        means re-planning at once (the plan document is made after the repair, so it carries the
        repaired versions). Without it (the AWS launcher, which carries no pyiceberg) the commit step
        repairs both when it refuses a stale plan or finishes a stranded run."""
        self._repair_from_table = repair_from_table
        self._backoff = BackoffRecords(documents, config.runs)
        self._config = config
        self._runners = RunnerLineup.configured(config.runner.type, config.runner.lambda_.max_bytes)
        self._partition_filter = partition_filter
        self._checkpoints = checkpoints
        self._segments = segments
        self._documents = documents
        self._field_id_records = FieldIdRecords(documents, config.runs.location)
        self._starter = starter
        self._owner_id = owner_id
        self._registry = registry
        self._clock = clock

    def launch(
        self,
        topic: str,
        *,
        ignore_min_batch: bool = False,
        ignore_backoff: bool = False,
        ignore_held: bool | None = None,
        retry_ended: bool = True,
        replan: bool = True,
        segment_ends: Mapping[int, int] | None = None,
    ) -> LaunchOutcome:
        """Plan and start a run for `topic` if it has pending segments and nobody runs it.

        Raises `UnmappedTopicError` for a topic without a mapping, and transient errors (store, S3,
        registry, job service) for the caller to retry; a claimed lease is released on any error.
        A run id whose steps already ended unrecorded is recorded as lost and re-planned once under
        the next attempt. `ignore_min_batch` plans whatever is pending now (`run --once`). A topic in
        its retry backoff after failed runs (`services/backoff.py`) is WAITING unless `ignore_backoff`
        (`run --once`, an operator's explicit request). Partitions held back after failing on a segment
        of their own are left out unless `ignore_held` (default: as `ignore_backoff`).
        `segment_ends` (by partition, an offset known to be a segment's last: a committed run's ends,
        from the signal after its commit) spares an idle partition's probe listings and footer read.
        """
        mapping = self._config.mapping_for(topic)
        if mapping is None:
            raise UnmappedTopicError(f"topic {topic!r} has no mapping in {self._config.source}")
        holder = self._checkpoints.read_lease_holder(topic)
        if holder is not None:
            return LaunchOutcome(topic, LaunchStatus.BUSY, detail=holder.describe())
        committed = self._checkpoints.load_committed_offsets(topic)
        offsets = {p: committed.offset(p) for p in self._partitions(topic)}
        held: dict[int, str] = {}
        hold = not (ignore_backoff if ignore_held is None else ignore_held)
        capped = any(r.max_bytes is not None for r in self._runners.runners)  # reads `lambda_kill_reason`
        recorded = self._backoff.read(topic) if hold or not ignore_backoff or capped else None  # one GET
        if not ignore_backoff:
            wait_s, backoff = self._backoff.wait_seconds(recorded, offsets, self._clock())
            if backoff is not None and wait_s > 0:
                return LaunchOutcome(
                    topic,
                    LaunchStatus.WAITING,
                    detail=f"retry backoff: {backoff.failures} failed run(s) in a row, the last "
                    f"{backoff.run_id}: {backoff.reason}",
                    wait_seconds=wait_s,
                )
        if hold:
            held = self._backoff.held_partitions(recorded, offsets, self._clock())
        selection = self._select(
            topic,
            {p: o for p, o in offsets.items() if p not in held},
            ignore_min_batch=ignore_min_batch,
            segment_ends=segment_ends,
        )
        held.update(selection.held)
        if selection.is_empty:
            return replace(self._not_started(topic, selection, held), held=held)
        partitions = self._partition_plans(selection, held)
        if not partitions:
            if held:
                return LaunchOutcome(topic, LaunchStatus.BLOCKED, detail=_describe_held(held), held=held)
            return LaunchOutcome(topic, LaunchStatus.IDLE, detail="nothing after the committed offsets")
        ranges = [(p.partition, p.start_exclusive, p.end_inclusive) for p in partitions]
        attempt = next_attempt(self._documents, self._config.runs.location, topic, ranges)
        run_id = make_run_id(topic, ranges, attempt)
        claim = self._checkpoints.claim_lease(topic, owner_id=self._owner_id, run_id=run_id)
        if isinstance(claim, LeaseBusy):
            return LaunchOutcome(topic, LaunchStatus.BUSY, detail=claim.describe())
        try:
            outcome = self._start(
                topic,
                mapping=mapping,
                partitions=partitions,
                run_id=run_id,
                attempt=attempt,
                grant=claim,
                lambda_kill_reason=self._backoff.lambda_kill_reason(recorded, offsets),
            )
            if held:
                outcome = replace(outcome, held=held)
        except RunAttemptEndedError as exc:
            self._checkpoints.release_lease(claim)
            if not retry_ended:
                raise
            self._record_lost_attempt(topic, run_id, attempt, str(exc))
            return self.launch(
                topic,
                ignore_min_batch=ignore_min_batch,
                ignore_backoff=ignore_backoff,
                ignore_held=ignore_held,
                retry_ended=False,
                segment_ends=segment_ends,
            )
        except BaseException:
            self._checkpoints.release_lease(claim)
            raise
        if outcome.replan and replan:
            return self.launch(
                topic,
                ignore_min_batch=ignore_min_batch,
                ignore_backoff=ignore_backoff,
                ignore_held=ignore_held,
                retry_ended=retry_ended,
                replan=False,
                segment_ends=segment_ends,
            )
        return outcome

    def _partitions(self, topic: str) -> list[int]:
        """The topic's partitions in S3, less those the discovery filter (etcd metadata) leaves out."""
        listed = self._segments.list_partitions(topic)
        allowed = self._partition_filter(topic) if self._partition_filter else None
        return listed if allowed is None else [p for p in listed if p in allowed]

    def _record_lost_attempt(self, topic: str, run_id: str, attempt: int, reason: str) -> None:
        """Record an attempt whose steps died unrecorded, so the range moves to the next attempt."""
        outcome = FailedAttempt(
            status="lost", reason=reason, attempt=attempt, ended_at_ms=int(self._clock() * 1000)
        )
        uri = run_document_uri(self._config.runs.location, topic, run_id, OUTCOME_NAME)
        self._documents.write_text(uri, outcome.model_dump_json())
        logger.warning(
            "run attempt ended without a recorded outcome; planning the next attempt",
            extra={"topic": topic, "run_id": run_id, "reason": reason},
        )

    def _start(
        self,
        topic: str,
        *,
        mapping: MappingConfig,
        partitions: tuple[PartitionPlan, ...],
        run_id: str,
        attempt: int,
        grant: LeaseGrant,
        lambda_kill_reason: str,
    ) -> LaunchOutcome:
        if self._repair_from_table is not None:
            self._repair_from_table(topic, grant)
        now = self._checkpoints.load_committed_offsets(topic)
        moved = [p.partition for p in partitions if now.offset(p.partition) != p.start_exclusive]
        if moved:
            self._checkpoints.release_lease(grant)
            return LaunchOutcome(
                topic,
                LaunchStatus.IDLE,
                detail=f"partitions {moved} committed while planning (or repaired from the table); re-plan",
                replan=True,
            )
        plan = self._plan(topic, mapping, partitions, run_id)
        chosen = self._runners.choose(plan.total_bytes, after_kill=bool(lambda_kill_reason))
        if chosen != self._runners.choose(plan.total_bytes, after_kill=False):
            logger.warning(
                "run goes to %s: the capped runner %s on the topic's last run",
                chosen.kind.value,
                lambda_kill_reason,
                extra={"topic": topic, "run_id": run_id, "lambda_runner": lambda_kill_reason},
            )
        plan = plan.model_copy(update={"runner": chosen.kind})
        plan_uri = run_document_uri(self._config.runs.location, topic, run_id, PLAN_NAME)
        self._documents.write_text(plan_uri, plan.model_dump_json(indent=1))
        ticket = RunTicket(
            topic=topic, run_id=run_id, plan_uri=plan_uri, grant=grant, attempt=attempt, runner=plan.runner
        )
        self._starter.start_run(ticket)
        logger.info(
            "run started",
            extra={
                "topic": topic,
                "run_id": run_id,
                "segment_bytes": plan.total_bytes,
                "runner": plan.runner.value,
            },
        )
        return LaunchOutcome(topic, LaunchStatus.STARTED, ticket=ticket)

    def _select(
        self,
        topic: str,
        committed: dict[int, int],
        *,
        ignore_min_batch: bool,
        segment_ends: Mapping[int, int] | None,
    ) -> Selection:
        limits = run_limits(
            self._config.runs,
            ignore_min_batch=ignore_min_batch,
            mappings=self._config.mappings_for(topic),
            runner=self._config.runner,
        )
        now_ms = int(self._clock() * 1000)
        return select_pending(
            self._segments, topic, committed, limits, now_ms=now_ms, segment_ends=segment_ends
        )

    def _partition_plans(self, selection: Selection, held: dict[int, str]) -> tuple[PartitionPlan, ...]:
        """The partitions' ranges; a newest segment whose footer is unreadable (truncated, never
        finished) is left out with its partition's reason in `held`: the segments before it run."""
        plans = []
        footers = concurrently(lambda c: _footer_or_problem(self._segments, c.last.key), selection.partitions)
        for selected, footer in zip(selection.partitions, footers, strict=True):
            chosen = selected
            if isinstance(footer, SegmentFormatError):
                held[selected.partition] = (
                    f"{footer}; the partition waits at this segment (with corrupt_segment_policy: "
                    "quarantine it goes to the dead-letter table once a later segment shows where it "
                    "ends; otherwise re-upload it from the broker or remove it)"
                )
                trimmed = _without_last(selected)
                if trimmed is None:
                    continue
                chosen, end = trimmed, selected.last.base_offset - 1
            else:
                end = footer.last_offset
            if end <= chosen.committed:
                continue  # the only candidate was a fully committed segment
            plans.append(
                PartitionPlan(
                    partition=chosen.partition,
                    start_exclusive=chosen.committed,
                    end_inclusive=end,
                    segments=tuple(
                        PlannedSegment(
                            key=s.key,
                            base_offset=s.base_offset,
                            last_offset=last,
                            size_bytes=s.size_bytes,
                            last_modified_ms=s.last_modified_ms,
                        )
                        for s, last in zip(chosen.segments, chosen.last_offsets(end), strict=True)
                    ),
                )
            )
        return tuple(plans)

    def _plan(
        self, topic: str, mapping: MappingConfig, partitions: tuple[PartitionPlan, ...], run_id: str
    ) -> RunPlan:
        """The run's plan: one `MappingPlan` per mapping of the topic (`mapping` is the first)."""
        config = self._config
        recorded = self._field_id_records.read(topic)  # one GET
        known = recorded or TopicFieldIds()
        json_schema: dict[str, object] | None = None
        if self._registry is not None and any(
            m.schema_.source == "registry" or config.schema_.mode != SchemaMode.OFF
            for m in config.mappings_for(topic)
        ):
            json_schema = self._registry.schema_for(topic)
        mappings = [
            self._mapping_plan(each, run_id, known, json_schema)
            for each in (mapping, *(m for m in config.mappings_for(topic) if m is not mapping))
        ]
        first = mappings[0]
        s3 = config.s3
        return RunPlan(
            run_id=run_id,
            topic=topic,
            created_at_ms=int(self._clock() * 1000),
            source=SegmentSource(
                bucket=s3.bucket,
                endpoint_url=s3.endpoint or None,
                region=s3.region or None,
                path_style=s3.path_style,
            ),
            partitions=partitions,
            table=first.table,
            dead_letter_table=first.dead_letter_table,
            conversion=first.conversion,
            route=first.route,
            more_mappings=tuple(mappings[1:]),
            result_uri=run_document_uri(config.runs.location, topic, run_id, RESULT_NAME),
            schema_registry=(
                config.schema_registry.settings()
                if config.schema_registry is not None and any(m.conversion.reads_registry for m in mappings)
                else None
            ),
            field_ids_digest=None if recorded is None else recorded.digest(),
        )

    def _mapping_plan(
        self,
        mapping: MappingConfig,
        run_id: str,
        known: TopicFieldIds,
        json_schema: dict[str, object] | None,
    ) -> MappingPlan:
        config = self._config
        columns = mapping.column_specs()
        if json_schema is not None and mapping.schema_.source == "registry":
            columns = columns_from_json_schema(json_schema)
        self_described = mapping.value_format.self_described
        # A self-described format without listed columns takes them from the records' schemas: the
        # inference path, with the schemas as the observations (`dataplane/formats/`).
        infer = mapping.schema_.source == "infer" or (self_described and mapping.schema_.source == "none")
        table_known = known.table(mapping.table) if mapping.table else None
        if infer:
            # The table's current columns as the commit step recorded them; the job adds new ones.
            columns = (table_known.columns or ()) if table_known is not None else ()
        validating = json_schema is not None and (
            mapping.schema_.source == "registry" or config.schema_.mode != SchemaMode.OFF
        )
        conversion = ConversionSettings(
            columns=columns,
            partition_by=mapping.partition_by,
            schema_mode=SchemaMode(config.schema_.mode) if validating or self_described else SchemaMode.OFF,
            json_schema=json_schema if validating else None,
            corrupt_segment_policy=config.corrupt_segment_policy_for(mapping),
            verify_crc=config.runs.verify_crc,
            target_file_size_bytes=config.target_file_size_for(mapping),
            lfs=mapping.lfs_settings(config.s3.bucket),
            infer_columns=infer,
            allow_type_widening=infer and mapping.schema_.allow_type_widening,
            time_columns=config.types.time,
            value_format=mapping.value_format,
            value_subject=mapping.value_subject or None,
            value_message=mapping.value_message or None,
            key_format=mapping.key_format,
            key_subject=mapping.key_subject or None,
            key_message=mapping.key_message or None,
            upsert=mapping.upsert.to_settings() if mapping.upsert is not None else None,
        )
        # The table's columns include the `lfs_*` ones `store_metadata` adds.
        fields = table_fields(conversion.table_columns)

        def target(identifier: str, fields: tuple[FieldSpec, ...] = fields) -> TableTarget:
            recorded = known.table(identifier)
            data_uri = self._data_uri(identifier, run_id, recorded)
            return TableTarget(
                identifier=identifier,
                data_uri=data_uri or self._unplaced_uri(mapping.topic, run_id, identifier),
                field_ids=self._planned_ids(fields, recorded),
                location_unknown=data_uri is None,
            )

        def routed(identifier: str) -> TableTarget:
            """A routed table: an inferred mapping's has its own columns (a new one: the base fields)."""
            if not infer:
                return target(identifier)
            recorded = known.table(identifier)
            own = (recorded.columns or ()) if recorded is not None else ()
            planned = target(
                identifier, table_fields(conversion.model_copy(update={"columns": own}).table_columns)
            )
            return planned.model_copy(
                update={
                    "columns": own,
                    "last_column_id": None if recorded is None else recorded.last_column_id,
                }
            )

        def known_template_tables(template: str) -> list[TableTarget]:
            return [routed(t.identifier) for t in known.tables if matches_template(template, t.identifier)]

        route = None
        if mapping.route is not None:
            template = mapping.route.table_template or None
            route = RoutePlan(
                field=mapping.route.field,
                tables={value: routed(table) for value, table in mapping.route.tables.items()},
                default_table=routed(mapping.route.default_table) if mapping.route.default_table else None,
                table_template=template,
                data_uri_template=None if template is None else self._template_uri(mapping.topic, run_id),
                known_data_uris={}
                if template is None
                else {
                    t.identifier: join_uri(kafscale_data_prefix(t.data_location), run_id)
                    for t in known.tables
                    if t.data_location and matches_template(template, t.identifier)
                },
                template_location_unknown=template is not None
                and created_table_location(config.iceberg.warehouse, PATH_PLACEHOLDER) is None,
                known_field_ids={}
                if template is None
                else {
                    t.identifier: t.field_ids
                    for t in known_template_tables(template)
                    if t.field_ids is not None
                },
                new_field_ids=None if template is None else self._planned_ids(fields, None),
                reserved=tuple(sorted(config.named_tables - set(mapping.data_tables))),
                known_columns={}
                if template is None or not infer
                else {t.identifier: t.columns or () for t in known_template_tables(template)},
                known_last_column_ids={}
                if template is None or not infer
                else {
                    t.identifier: t.last_column_id
                    for t in known_template_tables(template)
                    if t.last_column_id is not None
                },
            )
        table = target(mapping.table) if mapping.table else None
        if table is not None and infer and table_known is not None:
            # An inferred table's new columns take the ids after it (`dataplane/inference.py`).
            table = table.model_copy(update={"last_column_id": table_known.last_column_id})
        if table is not None and conversion.upsert is not None and table_known is not None:
            # The version the run locates the changed keys' files in (`execution/upsert_stage.py`).
            table = table.model_copy(update={"metadata_location": table_known.metadata_location})
        return MappingPlan(
            table=table,
            dead_letter_table=target(mapping.dead_letter_table, DEAD_LETTER_FIELDS),
            conversion=conversion,
            route=route,
        )

    def _data_uri(self, identifier: str, run_id: str, known: TableFieldIds | None) -> str | None:
        """Run-scoped folder for a table's new files, inside the table's data location; None when that
        is not known yet (`run_data_prefix`). Files are added to the table in place."""
        prefix = run_data_prefix(self._config, tuple(identifier.split(".")), known)
        return None if prefix is None else join_uri(prefix, run_id)

    def _unplaced_uri(self, topic: str, run_id: str, identifier: str) -> str:
        """Where a run writes a table's files when the table's location is not known yet: beside the
        run's documents (never committed: the commit step refuses the run, `TableTarget.location_unknown`)."""
        return join_uri(self._config.runs.location, topic, run_id, "unplaced", identifier)

    def _template_uri(self, topic: str, run_id: str) -> str:
        """A route template's `data_uri_template`: in each new table's created location, else unplaced."""
        location = created_table_location(self._config.iceberg.warehouse, PATH_PLACEHOLDER)
        if location is None:
            return self._unplaced_uri(topic, run_id, PATH_PLACEHOLDER)
        return join_uri(kafscale_data_prefix(data_location_of(location, {})), run_id)

    def _planned_ids(
        self, fields: tuple[FieldSpec, ...], known: TableFieldIds | None
    ) -> dict[str, int] | None:
        """The field ids of a run's files (`planned_field_ids`); none for a table not created yet in a
        REST catalog, which may assign its own ids (the spec allows it; SeaweedFS renumbers nested
        fields): those files are read through the name mapping, set from the ids the catalog returned."""
        if known is None and self._config.iceberg.catalog.type == "rest":
            return None
        return planned_field_ids(fields, known)

    def _not_started(self, topic: str, selection: Selection, held: Mapping[int, str]) -> LaunchOutcome:
        if selection.wait_seconds > 0:
            return LaunchOutcome(
                topic,
                LaunchStatus.WAITING,
                detail=f"{selection.pending_bytes} bytes pending, below runs.min_bytes_per_run",
                wait_seconds=selection.wait_seconds,
                batching=True,
            )
        if selection.blocked:
            keys = ", ".join(s.key for s in selection.blocked)
            return LaunchOutcome(topic, LaunchStatus.BLOCKED, detail=f"waiting for the .index of {keys}")
        if held:
            return LaunchOutcome(topic, LaunchStatus.BLOCKED, detail=_describe_held(held))
        return LaunchOutcome(topic, LaunchStatus.IDLE, detail="no pending segments")


def _footer_or_problem(segments: SegmentLister, key: str) -> SegmentFooter | SegmentFormatError:
    """The segment's footer, or the error saying why it cannot be read (its partition then waits)."""
    try:
        return segments.read_footer(key)
    except SegmentFormatError as exc:
        return exc


def _describe_held(held: Mapping[int, str]) -> str:
    return "; ".join(f"partition {p} waits: {reason}" for p, reason in sorted(held.items()))


def _without_last(selected: PartitionSelection) -> PartitionSelection | None:
    """The selection less its last segment; None when nothing is left."""
    if len(selected.segments) < 2:
        return None
    return replace(selected, segments=selected.segments[:-1])
