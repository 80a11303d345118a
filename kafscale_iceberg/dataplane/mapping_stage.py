"""One mapping's work in a task: convert a batch of records, route it (when the mapping is routed) and
hand the rows and dead letters to the task's writers.

A routed inferred mapping converts each table's records with that table's own columns: the records
are first made base rows only (no column read, no validation) and routed, then each table's share is
converted with its table's columns. The task's writers per table are `TableFiles` (`table_files.py`,
importable from here too).

A routed mapping with a self-described `value_format` routes by its decoded records' field
(`routing.py`); a routed one whose tables take their columns from the records' schemas decodes each
batch once, for the base rows, the route and each table's conversion (`formats/decoding.take_decoded`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane.conversion import ConvertedRecords, RecordConverter
from kafscale_iceberg.dataplane.formats.choice import decoder_for
from kafscale_iceberg.dataplane.formats.decoding import take_decoded
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.dataplane.partitioning import split_by_partition
from kafscale_iceberg.dataplane.routing import RecordRouter
from kafscale_iceberg.dataplane.schemas import DEAD_LETTER_SCHEMA
from kafscale_iceberg.dataplane.table_files import TableFiles
from kafscale_iceberg.dataplane.upsert_changes import UpsertConversion
from kafscale_iceberg.domain.runs import (
    ConversionSettings,
    MappingPlan,
    RunPlan,
    SchemaMode,
    TableRole,
    TableTarget,
    deleted_keys_target,
)

__all__ = ["MappingStage", "TableFiles"]


class MappingStage:
    """One mapping's work in a task: convert, route (when it is routed) and hand rows to the writers."""

    def __init__(
        self,
        plan: RunPlan,
        index: int,
        mapping: MappingPlan,
        files: TableFiles,
        schemas: SchemaCache | None = None,
    ) -> None:
        """`schemas`: the task's record schemas (a registered `value_format` reads through them)."""
        self.index = index
        self.mapping = mapping
        self.strict = mapping.conversion.schema_mode is SchemaMode.STRICT
        self._decoder = decoder_for(mapping.conversion, schemas) if mapping.route is not None else None
        self.router = (
            None
            if mapping.route is None
            else RecordRouter(mapping.route, run_id=plan.run_id, decoder=self._decoder)
        )
        self._files = files
        self._plan = plan
        self._converters: dict[str, RecordConverter] = {}
        # A routed inferred mapping converts each table's records with that table's own columns: the
        # records are first made base rows only (no column read, no validation) and routed, then
        # each table's share is converted (`convert`).
        settings = mapping.conversion
        if mapping.routed_inference:
            settings = settings.model_copy(
                update={"columns": (), "schema_mode": SchemaMode.OFF, "json_schema": None}
            )
        self._schemas = schemas
        self.converter = RecordConverter(
            topic=plan.topic, run_id=plan.run_id, settings=settings, schemas=schemas
        )
        self.upsert = (
            None
            if settings.upsert is None
            else UpsertConversion(
                self.converter, settings, topic=plan.topic, run_id=plan.run_id, schemas=schemas
            )
        )

    def convert(
        self,
        records: pa.Table,
        *,
        partition: int,
        segment_key: str,
        rejected: Mapping[int, tuple[str, str]] | None,
        lfs_metadata: Mapping[str, pa.Array] | None,
    ) -> tuple[ConvertedRecords, tuple[tuple[TableTarget, ConvertedRecords], ...]]:
        """A batch converted: the mapping's rows (for a routed inferred mapping: routed, its dead
        letters only, and per table its records converted with the table's columns)."""
        if self.upsert is not None:
            return self.upsert.convert(records, partition=partition, segment_key=segment_key), ()
        routed_inference = self.mapping.routed_inference and self.router is not None
        decoded = None
        if routed_inference and self._decoder is not None:  # decoded once: rows, route, tables
            decoded = self._decoder.decode(records.column("value").combine_chunks())
        converted = self.converter.convert(
            records,
            partition=partition,
            segment_key=segment_key,
            rejected=rejected,
            lfs_metadata=lfs_metadata,
            decoded=decoded,
        )
        if not routed_inference or self.router is None:
            return converted, ()
        kept = records
        if converted.rows.num_rows != records.num_rows:  # rejected records are dead letters already
            in_rows = pc.is_in(records.column("offset"), value_set=converted.rows.column("offset"))
            kept = records.filter(in_rows)
            if decoded is not None:
                mask = np.asarray(in_rows.to_numpy(zero_copy_only=False), bool)
                decoded = take_decoded(decoded, np.flatnonzero(mask).tolist())
        routed = self.router.split(converted.rows, segment_key=segment_key, decoded=decoded)
        dead_letters = _joined(converted.dead_letters, routed.dead_letters)
        tables = []
        for target, _rows, positions in routed.tables:
            converter = self._converters.get(target.identifier)
            if converter is None:
                converter = self._converters[target.identifier] = RecordConverter(
                    topic=self._plan.topic,
                    run_id=self._plan.run_id,
                    settings=self.mapping.conversion_for(target),
                    schemas=self._schemas,
                )
            share = None if decoded is None else take_decoded(decoded, positions.tolist())
            tables.append(
                (
                    target,
                    converter.convert(
                        kept.take(pa.array(positions)),
                        partition=partition,
                        segment_key=segment_key,
                        decoded=share,
                    ),
                )
            )
        first_invalid = min(
            (c.first_invalid for _t, c in tables if c.first_invalid is not None),
            key=lambda invalid: invalid.offset,
            default=None,
        )
        return (
            ConvertedRecords(converted.rows.slice(0, 0), dead_letters, first_invalid),
            tuple(tables),
        )

    def write(
        self,
        converted: ConvertedRecords,
        *,
        partition: int,
        segment_key: str,
        routed: tuple[tuple[TableTarget, ConvertedRecords], ...] = (),
    ) -> tuple[int, int, dict[str, int], dict[str, int]]:
        """Write a converted batch (`routed`: a routed inferred mapping's tables, each converted with
        its own columns); `(rows written, dead letters, conversion failures of the rows written, dead
        letters per error kind)` (a
        routed batch's records dead-lettered by the route are not counted as written)."""
        mapping = self.mapping
        settings = mapping.conversion
        dead_letters = converted.dead_letters
        written = 0
        counted: dict[str, int] = {} if self.router is not None else dict(converted.conversion_failures)
        if mapping.routed_inference:
            for target, table_rows in routed:
                if table_rows.dead_letters.num_rows:
                    dead_letters = pa.concat_tables([dead_letters, table_rows.dead_letters])
                rows = table_rows.rows
                if not rows.num_rows:
                    continue
                schema = self._converters[target.identifier].schema
                self._write_rows(target, schema, rows, settings, partition)
                self._files.count(target.identifier, rows.num_rows, table_rows.conversion_failures)
                for column, count in table_rows.conversion_failures.items():
                    if count:
                        counted[column] = counted.get(column, 0) + count
                written += rows.num_rows
            placed: tuple[tuple[TableTarget, pa.Table, np.ndarray | None], ...] = ()
        elif self.router is None:
            assert mapping.table is not None
            placed = ((mapping.table, converted.rows, None),)
        else:
            field = mapping.route.field if mapping.route is not None else ""
            if self.router.reuses(settings.columns):  # the route field is a string column: not read again
                split_rows = self.router.split(
                    converted.rows,
                    segment_key=segment_key,
                    column=converted.rows.column(field).combine_chunks(),
                    not_string=converted.failed_rows.get(field),
                )
            else:
                split_rows = self.router.split(converted.rows, segment_key=segment_key)
            placed = split_rows.tables
            dead_letters = _joined(dead_letters, split_rows.dead_letters)
        for target, rows, positions in placed:
            if not rows.num_rows:
                continue
            self._write_rows(target, self.converter.schema, rows, settings, partition)
            failures = (
                converted.conversion_failures
                if positions is None
                else {
                    column: int(np.isin(at, positions).sum()) for column, at in converted.failed_rows.items()
                }
            )
            self._files.count(target.identifier, rows.num_rows, failures)
            if positions is not None:
                for column, count in failures.items():
                    if count:
                        counted[column] = counted.get(column, 0) + count
            written += rows.num_rows
        deleted_keys = converted.deleted_keys
        if deleted_keys is not None and deleted_keys.num_rows and mapping.table is not None:
            self._files.writer(
                deleted_keys_target(mapping.table),
                deleted_keys.schema,
                TableRole.DELETED_KEYS,
                self.index,
                settings,
            ).write({}, deleted_keys, kafka_partition=partition)
        if dead_letters.num_rows:
            self._files.writer(
                mapping.dead_letter_table, DEAD_LETTER_SCHEMA, TableRole.DEAD_LETTER, self.index, settings
            ).write({}, dead_letters)
            self._files.count(mapping.dead_letter_table.identifier, dead_letters.num_rows)
        return written, dead_letters.num_rows, counted, dead_letter_reasons(dead_letters)

    def _write_rows(
        self,
        target: TableTarget,
        schema: pa.Schema,
        rows: pa.Table,
        settings: ConversionSettings,
        partition: int,
    ) -> None:
        """Write one Kafka partition's rows for `target`, a file per partition value (`settings`)."""
        writer = self._files.writer(
            target, schema, TableRole.DATA, self.index, settings, partition_file_min_bytes=True
        )
        for values, part in split_by_partition(rows, settings.partition_by):
            writer.write(values, part, kafka_partition=partition)


def _joined(first: pa.Table, second: pa.Table) -> pa.Table:
    """Two tables of dead letters as one (either alone when the other is empty)."""
    if not second.num_rows:
        return first
    return pa.concat_tables([first, second]) if first.num_rows else second


def dead_letter_reasons(dead_letters: pa.Table) -> dict[str, int]:
    """How many dead-letter rows there are of each `error_kind` (what metrics count per reason)."""
    if not dead_letters.num_rows:
        return {}
    counts = pc.value_counts(dead_letters.column("error_kind").combine_chunks())
    return {
        str(kind): int(count)
        for kind, count in zip(counts.field(0).to_pylist(), counts.field(1).to_pylist(), strict=True)
    }
