"""Redrive: a topic's dead letters converted again with the current configuration and landed exactly once
(`kafscale-iceberg redrive`).

For each mapping of the topic, under the topic's lease (no run commits meanwhile):

1. read the dead-letter rows the selection names, and the (partition, offset) pairs earlier redrives
   landed in the mapping's table (`kafscale.redriven` summaries);
2. convert the others with the mapping as configured now (`dataplane/redrive.py`, the runs' converter);
3. the table evolved as a run's commit evolves it (a column the fix widened), then ONE append of the
   rows that now convert to the table, its summary naming their pairs;
4. ONE commit of the dead-letter table: the resolved rows deleted (landed now or by an earlier redrive
   that stopped before this step), those still failing rewritten with their new reason.

A crash or a kill at any point is finished by the next redrive, which lands nothing twice (the rules,
and how long the summaries guard it: `domain/redrive.py`). With `dry_run`, steps 3 and 4 are skipped
and no lease is taken: the counts say what would happen. Offsets never move.

This version re-drives mappings whose rows are converted from the dead letter alone: listed columns,
`value_format` `json` or `connect_json`, no route, no upsert. Others are refused by name
(`RedriveRefusedError`): their conversion needs a registry's schemas, a route's tables, or (upsert)
the key's newer state in the table, which a run does and this command does not yet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kafscale_iceberg.config import KafscaleConfig, MappingConfig
from kafscale_iceberg.domain.commits import TableSpec
from kafscale_iceberg.domain.leases import LeaseBusy, LeaseGrant
from kafscale_iceberg.domain.redrive import RedriveCounts, RedriveSelection, counted
from kafscale_iceberg.domain.runs import ConversionSettings, SchemaMode
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.exceptions import RedriveLeaseBusyError, RedriveRefusedError, UnmappedTopicError
from kafscale_iceberg.ports import CheckpointStore, DeadLetterConverter, DeadLetterStore, TableSchemaEnsurer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RedriveReport:
    """What a redrive of one topic did (or would do), per mapping."""

    topic: str
    dry_run: bool
    mappings: tuple[RedriveCounts, ...]

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "topic": self.topic,
            "dry_run": self.dry_run,
            "mappings": [m.to_json() for m in self.mappings],
        }


class RedriveService:
    """Re-drives a topic's dead letters (see the module docstring)."""

    def __init__(
        self,
        config: KafscaleConfig,
        checkpoints: CheckpointStore,
        dead_letters: DeadLetterStore,
        convert: DeadLetterConverter,
        tables: TableSchemaEnsurer,
        *,
        owner_id: str,
    ) -> None:
        """`tables` evolves the table as a run's commit would (a column widened by the fix) before the
        re-driven rows are added."""
        self._tables = tables
        self._config = config
        self._checkpoints = checkpoints
        self._dead_letters = dead_letters
        self._convert = convert
        self._owner_id = owner_id

    def redrive(self, topic: str, selection: RedriveSelection, *, dry_run: bool = False) -> RedriveReport:
        """Re-drive `topic`'s dead letters `selection` names; idempotent (a second call lands nothing twice).

        Raises `UnmappedTopicError`, `RedriveRefusedError` (a mapping this version cannot re-drive,
        before anything is read), `RedriveLeaseBusyError` (transient: a run holds the topic), and the
        adapters' errors (catalog, checkpoint store) - after which a new redrive finishes the job.
        """
        mappings = self._config.mappings_for(topic)
        if not mappings:
            raise UnmappedTopicError(f"topic {topic!r} has no mapping in {self._config.source}")
        settings = [(m, self._settings(topic, m)) for m in mappings]
        if dry_run:
            counts = tuple(self._redrive_mapping(topic, m, s, selection, dry_run=True) for m, s in settings)
            return RedriveReport(topic, True, counts)
        grant = self._claim(topic)
        try:
            counts = tuple(self._redrive_mapping(topic, m, s, selection, dry_run=False) for m, s in settings)
        finally:
            self._checkpoints.release_lease(grant)
        return RedriveReport(topic, False, counts)

    def _claim(self, topic: str) -> LeaseGrant:
        claim = self._checkpoints.claim_lease(topic, owner_id=self._owner_id, run_id=f"redrive-{topic}"[:64])
        if isinstance(claim, LeaseBusy):
            raise RedriveLeaseBusyError(claim)
        return claim

    def _redrive_mapping(
        self,
        topic: str,
        mapping: MappingConfig,
        settings: ConversionSettings,
        selection: RedriveSelection,
        *,
        dry_run: bool,
    ) -> RedriveCounts:
        table, dead_table = mapping.table, mapping.dead_letter_table
        dead = self._dead_letters.read_dead_letters(dead_table, topic, selection)
        already = self._dead_letters.redriven_pairs(table, topic)
        converted = self._convert(topic, settings, dead, already=already)
        landed_pairs = [pair for pair, _ in converted.landed]
        the_id = converted.redrive_id
        counts = RedriveCounts(
            table=table,
            dead_letter_table=dead_table,
            landed=counted(kind for _, kind in converted.landed),
            already_landed=counted(converted.already_landed),
            still_failing=counted(converted.failing_kinds),
            no_payload=counted(converted.no_payload),
        )
        if dry_run:
            return counts
        if landed_pairs:
            self._tables.ensure_table(
                TableSpec(
                    identifier=table,
                    fields=table_fields(settings.table_columns),
                    partition_by=settings.partition_by,
                    allow_type_widening=mapping.schema_.allow_type_widening,
                )
            )
            self._dead_letters.land_redriven(table, topic, converted.rows, landed_pairs, the_id)
        self._dead_letters.resolve_dead_letters(
            dead_table, topic, converted.resolved_ids, converted.failing, the_id
        )
        logger.info(
            "dead letters re-driven",
            extra={"topic": topic, "table": table, "redrive_id": the_id, **counts.to_json()},
        )
        return counts

    def _settings(self, topic: str, mapping: MappingConfig) -> ConversionSettings:
        """The conversion a run of `mapping` plans, for the mappings this version re-drives."""
        problem = _unsupported(mapping)
        if problem is None and self._config.schema_.mode is not SchemaMode.OFF:
            mode = self._config.schema_.mode
            problem = f"schema.mode {mode} validates records against the registry's JSON Schema"
        if problem is not None:
            raise RedriveRefusedError(topic, mapping.anchor_table, problem)
        config = self._config
        return ConversionSettings(
            columns=mapping.column_specs(),
            partition_by=mapping.partition_by,
            schema_mode=SchemaMode.OFF,
            lfs=mapping.lfs_settings(config.s3.bucket),
            value_format=mapping.value_format,
            key_format=mapping.key_format,
            key_subject=mapping.key_subject or None,
            key_message=mapping.key_message or None,
        )


def _unsupported(mapping: MappingConfig) -> str | None:
    if mapping.route is not None:
        return "the mapping routes its records (route:)"
    if mapping.upsert is not None:
        return (
            "the mapping is an upsert table (a re-driven record must not overwrite a newer state of its key)"
        )
    if mapping.value_format.self_described or mapping.schema_.source not in ("none", "mapping"):
        return (
            f"the mapping's columns come from a schema (value_format {mapping.value_format}, "
            f"schema.source {mapping.schema_.source})"
        )
    if not mapping.table:
        return "the mapping has no table"
    return None
