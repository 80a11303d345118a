"""Iceberg tables through pyiceberg: create, evolve, read a topic's commit state, commit a run's files.

`IcebergTableCommitter` is the `TableCommitter` port's adapter. Rules it applies:

- **Creation** (`create_table_if_missing`, namespace too): KafScale's eight base fields with field ids
  1-8, then the mapping's columns; the mapping's partition fields (identity, year, month, day, hour,
  bucket[N], truncate[W]); `write.format.default=parquet` and `schema.name-mapping.default`, which
  maps the Spark job's Parquet files (they carry no field ids) to the columns by name. A create race
  ends in loading the winner.
- **Evolution** before any file is added: a missing column is added *optional* - Iceberg cannot add a
  required column to a table that already holds rows (they would have no value); int->long and
  float->double only with `allow_type_widening`; a table column already wider than the mapping's is
  accepted as it is (Iceberg reads the narrower files promoted); a required table column the mapping
  declares optional is made optional; every other difference is a `SchemaChangeError`. Columns the
  mapping no longer lists are kept. A table created by the KafScale Go processor needs no change.
  An inferred table (`schema.source: infer`) is not evolved here: `commit` stages its new columns
  (`TableCommit.columns`) in the transaction that adds the files, so both are one Iceberg commit.
- **Commit**: one Iceberg transaction = the data files (`add_files`) + the marker properties + the
  snapshot summary, built on exactly the snapshot the caller verified (see `commit`). pyiceberg's own
  commit retries are switched off for it: they re-apply a commit on top of a concurrent one without
  re-checking our offsets, which is the blind retry that duplicates data.
- **Offset reset**: the same single transaction, with a row-level delete (`partition == P and
  offset > N`) instead of files. pyiceberg 0.12 deletes copy-on-write: files whose rows all match are
  dropped (a `delete` snapshot), files with some matching rows are rewritten without them (an
  `overwrite` snapshot); one commit carries both, asserting the branch still points at the snapshot
  verified. A delete matching nothing writes no snapshot: an empty append then carries the marker.

Column types, schema evolution and partitioning: `iceberg_schemas.py`; what a commit writes in its
transaction (files appended, rows deleted): `iceberg_writes.py`. This module loads the tables, reads
their state and makes the one commit.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Mapping, Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchTableError,
    ServerError,
    TableAlreadyExistsError,
    ValidationException,
)
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import PartitionField as IcebergPartitionField
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import NestedField

from kafscale_iceberg.adapters.iceberg_catalog import CatalogTableAccess, answered_internal_error
from kafscale_iceberg.adapters.iceberg_schemas import (
    NAME_MAPPING,
    SchemaChanges,
    apply_schema_changes,
    check_partitioning,
    field_iceberg_type,
    field_ids_by_path,
    iceberg_transform,
    key_sort_order,
    plan_schema_changes,
    set_identifier_fields,
    stage_column_sources,
    stage_new_columns,
    table_columns,
)
from kafscale_iceberg.adapters.iceberg_upsert import files_to_replace
from kafscale_iceberg.adapters.iceberg_writes import (
    add_row_delta,
    append_files,
    delete_rows,
    replace_files,
    rows_after,
    single_attempt,
)
from kafscale_iceberg.adapters.record_fields import sample_record_fields
from kafscale_iceberg.domain.anomalies import OffsetAnomalies
from kafscale_iceberg.domain.commits import (
    SUMMARY_CONVERSION_FAILURES,
    SUMMARY_DEAD_LETTERS,
    SUMMARY_TOPIC,
    SUMMARY_UNFILLED_COLUMNS,
    TableCommit,
    TableSpec,
    TableState,
    decode_counts,
    marker_properties,
    read_marker,
)
from kafscale_iceberg.domain.field_ids import TableFieldIds, field_id_mismatches
from kafscale_iceberg.domain.history import TableHistory, TopicSnapshot
from kafscale_iceberg.domain.maintenance import files_baseline, total_data_files
from kafscale_iceberg.domain.partitioning import partition_field_name
from kafscale_iceberg.domain.table_locations import created_table_location, data_location_of
from kafscale_iceberg.domain.upsert import UpsertCounts, upsert_counts_of
from kafscale_iceberg.exceptions import (
    CatalogError,
    CatalogUnavailableError,
    CommitOutcomeUnknownError,
    DataFileRejectedError,
    FieldIdMismatchError,
    KafscaleIcebergError,
    TableChangedError,
    TableMissingError,
)

logger = logging.getLogger(__name__)

_SCHEMA_ATTEMPTS = 3


class IcebergTableCommitter(CatalogTableAccess):
    """Creates, evolves and commits to Iceberg tables in one catalog (the `TableCommitter` port).

    `describe` names the catalog in errors (type and URI, no secret). The last version of each table
    `read_state` loaded or `commit` made is kept, so the `ensure_table`, `commit` and `field_ids`
    that follow in the same commit step, given that state, use it instead of loading the table again
    (each load is a catalog call and a metadata GET); a state of any other version loads the table.
    """

    def __init__(self, catalog: Catalog, *, describe: str = "") -> None:
        super().__init__(catalog, describe=describe)
        self._read: dict[str, Table] = {}

    # -- tables ---------------------------------------------------------------------------------

    def ensure_table(self, spec: TableSpec, current: TableState | None = None) -> SchemaChanges:
        """Create the table (and namespace) if missing and allowed, then evolve its schema. Idempotent.

        `current` (the table's state as just read) spares loading the table again when this adapter
        still holds that version. Raises `TableMissingError`, `SchemaChangeError`,
        `PartitionSpecMismatchError` (terminal), `CatalogUnavailableError` (transient) or `CatalogError`.
        """
        try:
            try:
                table = self._version_read(current) or self._catalog.load_table(spec.identifier)
            except NoSuchTableError:
                if not spec.create_if_missing:
                    raise TableMissingError(spec.identifier) from None
                try:
                    self._create(spec)
                except TableAlreadyExistsError:
                    table = self._catalog.load_table(spec.identifier)  # lost a create race: use the winner
                except ServerError as exc:
                    if not answered_internal_error(exc):
                        raise
                    raise self._creation_refused(spec, exc) from exc
                else:
                    logger.info("table created", extra={"table": spec.identifier})
                    return SchemaChanges(created=True)
            check_partitioning(spec, table)
            if set_identifier_fields(table, spec):
                logger.info("table identifier fields set", extra={"table": spec.identifier})
            if not spec.evolve:
                return SchemaChanges()  # an inferred table: its commit adds the new columns
            for attempt in range(1, _SCHEMA_ATTEMPTS + 1):
                changes = plan_schema_changes(spec.identifier, table.schema(), spec)
                if not changes:
                    return changes
                try:
                    apply_schema_changes(table, spec, changes)
                except CommitFailedException:
                    if attempt == _SCHEMA_ATTEMPTS:
                        raise
                    table = self._catalog.load_table(spec.identifier)  # evolved concurrently: re-plan
                    continue
                logger.info(
                    "table schema evolved",
                    extra={
                        "table": spec.identifier,
                        "added": changes.added,
                        "widened": changes.widened,
                        "relaxed": changes.relaxed,
                    },
                )
                return changes
        except KafscaleIcebergError:
            raise
        except Exception as exc:
            raise self._translate(f"ensure table {spec.identifier!r}", exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _creation_refused(self, spec: TableSpec, exc: ServerError) -> CatalogError:
        """A catalog that answers 500 to creating a namespace or table refuses that request (a table
        bucket holding stray objects under the namespace's prefix did): retrying it forever as an
        outage helps nobody. Terminal, naming what to check."""
        return CatalogError(
            self._describe,
            f"create table {spec.identifier!r} (and its namespace)",
            f"the catalog answered 500 Internal Server Error ({exc}); it refuses this creation, so it is "
            "not retried as an outage. Check the catalog server's log; on a table bucket (Amazon S3 "
            "Tables, SeaweedFS) remove objects that are not tables' files, or create the namespace and "
            "table yourself, then retry the run",
        )

    def _create(self, spec: TableSpec) -> None:
        # Top-level fields keep ids 1..n (the base fields' 1-8, as the Go processor's); nested parts
        # take ids after them. The catalog assigns fresh ids on creation either way.
        nested_ids = itertools.count(len(spec.fields) + 1)
        schema = Schema(
            *(
                NestedField(
                    field_id=field.field_id or index,
                    name=field.name,
                    field_type=field_iceberg_type(field, lambda: next(nested_ids)),
                    required=field.required,
                )
                for index, field in enumerate(spec.fields, start=1)
            ),
            identifier_field_ids=[
                field.field_id or index
                for index, field in enumerate(spec.fields, start=1)
                if field.name in spec.identifier_fields
            ],
        )
        partition_fields = []
        for index, field in enumerate(spec.partition_by):
            source = schema.find_field(field.column)
            partition_fields.append(
                IcebergPartitionField(
                    source_id=source.field_id,
                    field_id=1000 + index,
                    transform=iceberg_transform(field),
                    name=partition_field_name(field),
                )
            )
        if spec.namespace:
            self._catalog.create_namespace_if_not_exists(spec.namespace)
        with self._catalog.create_table_transaction(
            spec.identifier,
            schema,
            location=self._warehouse_location(spec),
            partition_spec=PartitionSpec(*partition_fields),
            sort_order=key_sort_order(schema),
            properties={"write.format.default": "parquet", "format-version": "2"},
        ) as transaction:
            # Ids are assigned by the catalog; the name mapping is computed from the assigned ones.
            mapping = transaction.table_metadata.schema().name_mapping
            transaction.set_properties({NAME_MAPPING: mapping.model_dump_json()})

    def _warehouse_location(self, spec: TableSpec) -> str | None:
        """Where a new table goes: under the catalog's warehouse when that is a storage URI, in
        pyiceberg's own layout (`{warehouse}/{namespace}.db/{table}`, where the launcher plans the
        first run's files: `domain/table_locations.py`), whatever location its namespace has (a Glue
        database's `LocationUri` would put it outside the warehouse, where the stack's roles may not
        write). None (the catalog decides) for a warehouse *name* or table bucket ARN (REST catalogs)."""
        return created_table_location(str(self._catalog.properties.get("warehouse", "")), spec.identifier)

    # -- commit state -----------------------------------------------------------------------------

    def read_state(self, table: str, topic: str) -> TableState:
        """The table's current snapshot and what it records for `topic` (its `kafscale.*` properties).

        Raises `TableMissingError`, `TableMarkerError`, `CatalogUnavailableError` or `CatalogError`.
        """
        loaded = self._load(table)
        self._read[table] = loaded
        return _state_of(loaded, table, topic)

    def _version_read(self, state: TableState | None) -> Table | None:
        """The table exactly as `state` was read, when it was the last version this adapter loaded
        (`read_state`) or committed."""
        if state is None or state.version is None:
            return None
        table = self._read.get(state.table)
        return table if table is not None and table.metadata_location == state.version else None

    def missing_files(self, table: str, uris: Sequence[str]) -> tuple[str, ...]:
        """Those of `uris` that do not exist (one HEAD per file, with `table`'s file IO: the credentials
        its catalog vends for it; the catalog's own when the table does not exist yet).

        Raises `CatalogUnavailableError` when the storage does not answer."""
        if not uris:
            return ()
        try:
            loaded = self._read.get(table) or (
                self._load(table) if self._catalog.table_exists(table) else None
            )
            io = loaded.io if loaded is not None else load_file_io(self._catalog.properties, uris[0])
            return tuple(uri for uri in uris if not io.new_input(uri).exists())
        except OSError as exc:
            checked = f"check that {len(uris)} file(s) of {table!r} exist"
            raise CatalogUnavailableError(self._describe, checked, str(exc)) from exc

    def record_fields(self, table: str, uri: str, limit: int) -> tuple[str, ...] | None:
        """The top-level field names of the JSON values of the first `limit` rows of the run's data
        file `uri` of `table` (`adapters.record_fields`); None when it cannot be read."""
        loaded = self._read.get(table)
        io = loaded.io if loaded is not None else load_file_io(self._catalog.properties, uri)
        return sample_record_fields(io, uri, limit)

    def check_commit(self, expected: TableState, commit: TableCommit) -> None:
        """Refuse, writing nothing, an upsert commit whose located version no longer stands on the
        table as `expected` was read (`UpsertLocateStaleError`): what `commit` would refuse, asked
        before a run's first table commit. Raises like `read_state` otherwise."""
        table = self._version_read(expected) or self._load(expected.table)
        try:
            files_to_replace(table, expected.table, commit)
        except KafscaleIcebergError:
            raise
        except OSError as exc:
            raise CatalogUnavailableError(
                self._describe, f"read the manifests of {expected.table!r}", str(exc)
            ) from exc

    def last_commit_ms(self, table: str, topic: str) -> int | None:
        """When `topic` was last committed to `table`: the newest snapshot on the current lineage whose
        summary names the topic (`kafscale.topic`), Unix ms; None when no snapshot does (never
        committed by this product, or expired).

        Walks parent snapshots from the current one, so it costs O(snapshots since the topic's last
        commit) in memory, no extra I/O. Raises like `read_state`.
        """
        metadata = self._load(table).metadata
        by_id = {snapshot.snapshot_id: snapshot for snapshot in metadata.snapshots}
        snapshot_id = metadata.current_snapshot_id
        while snapshot_id is not None and snapshot_id in by_id:
            snapshot = by_id[snapshot_id]
            if snapshot.summary is not None and snapshot.summary.get(SUMMARY_TOPIC) == topic:
                return snapshot.timestamp_ms
            snapshot_id = snapshot.parent_snapshot_id
        return None

    def conversion_failures(self, table: str, topic: str) -> dict[str, int]:
        """Per column, the values of `topic` stored null because they did not convert: the sum of the
        `kafscale.conversion-failures` summaries on the current lineage (snapshots still retained).

        Walks parent snapshots in memory, no extra I/O beyond loading the table. Raises like `read_state`.
        """
        return self._summed_counts(table, topic, SUMMARY_CONVERSION_FAILURES)

    def unfilled_columns(self, table: str, topic: str) -> dict[str, str]:
        """The mapping columns no record of `topic`'s last run to `table` carried, each with its line
        (`kafscale.unfilled-columns` of the topic's newest snapshot). Raises like `read_state`."""
        summaries = _topic_summaries(self._load(table), topic)
        if not summaries:
            return {}
        try:
            value = json.loads(summaries[0].get(SUMMARY_UNFILLED_COLUMNS) or "{}")
        except ValueError:
            return {}
        if not isinstance(value, dict):
            return {}
        return {str(column): str(line) for column, line in value.items()}

    def dead_letter_reasons(self, table: str, topic: str) -> dict[str, int]:
        """Per `error_kind`, the dead-letter rows of `topic`'s runs: the sum of the `kafscale.dead-letters`
        summaries on the current lineage (on the topic's anchor table). Raises like `read_state`."""
        return self._summed_counts(table, topic, SUMMARY_DEAD_LETTERS)

    def _summed_counts(self, table: str, topic: str, key: str) -> dict[str, int]:
        totals: dict[str, int] = {}
        for summary in _topic_summaries(self._load(table), topic):
            for name, count in decode_counts(summary.get(key) or "{}").items():
                totals[name] = totals.get(name, 0) + count
        return dict(sorted(totals.items()))

    def upsert_counts(self, table: str, topic: str) -> UpsertCounts:
        """What `topic`'s upsert runs did to `table`: the sum of the `kafscale.upsert.*` summaries on
        the current lineage (snapshots still retained). Raises like `read_state`."""
        total = UpsertCounts()
        for summary in _topic_summaries(self._load(table), topic):
            counts = upsert_counts_of(summary)
            if counts is not None:
                total = total.plus(counts)
        return total

    def topic_history(self, table: str, topic: str) -> TableHistory:
        """The snapshots of the current lineage committed for `topic`, oldest first, from their
        summaries (no data file read). Raises like `read_state`."""
        loaded = self._load(table)
        metadata = loaded.metadata
        by_id = {snapshot.snapshot_id: snapshot for snapshot in metadata.snapshots}
        lineage: list[TopicSnapshot] = []
        snapshot_id = metadata.current_snapshot_id
        while snapshot_id is not None and snapshot_id in by_id:
            snapshot = by_id[snapshot_id]
            if snapshot.summary is not None and snapshot.summary.get(SUMMARY_TOPIC) == topic:
                lineage.append(
                    TopicSnapshot.from_summary(
                        table, snapshot.snapshot_id, snapshot.timestamp_ms, snapshot.summary
                    )
                )
            snapshot_id = snapshot.parent_snapshot_id
        return TableHistory(table, loaded.metadata_location, tuple(reversed(lineage)))

    def offset_anomalies(self, table: str, topic: str) -> OffsetAnomalies:
        """Per partition, the offset gaps and overlapped records of `topic`'s runs: the sum of the
        `kafscale.offset-gaps` / `kafscale.overlapped` summaries on the current lineage (snapshots
        still retained). Walks parent snapshots in memory like `conversion_failures`."""
        total = OffsetAnomalies()
        for summary in _topic_summaries(self._load(table), topic):
            total = total.plus(OffsetAnomalies.from_summary(summary))
        return total

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        """Make ONE Iceberg commit: add `commit.file_uris`, record `commit.marker_after`, write the summary.

        With `commit.delete_after`, the same commit first deletes every row of those partitions whose
        `offset` is greater (copy-on-write: a `delete` and/or `overwrite` snapshot; when nothing
        matches, an empty append carries the marker). Builds on exactly `expected` - on the version it
        was read from when `read_state` loaded it last, else on the table loaded now: raises
        `TableChangedError` (nothing written) when the table's snapshot or marker differ from it, or
        when a concurrent commit wins the race (the catalog asserts the branch's snapshot is still
        the one built on; every marker change comes with a snapshot). Raises `DataFileRejectedError`
        when a file does not fit the table (nothing written), and `CommitOutcomeUnknownError` when the
        catalog failed in a way that may or may not have applied the commit - verify with
        `read_state` before anything else. Returns the state after the commit.
        """
        table = self._version_read(expected) or self._load(expected.table)
        now = _state_of(table, expected.table, commit.topic)
        if now.snapshot_id != expected.snapshot_id or now.marker != expected.marker:
            raise TableChangedError(
                expected.table,
                f"expected snapshot {expected.snapshot_id} with {expected.marker}, "
                f"found snapshot {now.snapshot_id} with {now.marker}",
            )
        transaction = single_attempt(table).transaction()
        if commit.columns is not None and commit.file_uris:
            # An inferred table's new columns: staged in this transaction, so they land in the same
            # Iceberg commit as the files (ids as Iceberg assigns them; checked just below).
            stage_new_columns(transaction, expected.table, commit)
        if commit.field_ids is not None and commit.file_uris:
            schema = transaction.table_metadata.schema()
            mismatches = field_id_mismatches(commit.field_ids, field_ids_by_path(schema))
            if mismatches:
                raise FieldIdMismatchError(expected.table, commit.run_id, mismatches)
        updates, removals = marker_properties(commit.topic, commit.marker_after)
        try:
            # An upsert run: only while its located version stands (manifests read, no data file).
            replaced = files_to_replace(table, expected.table, commit)
            sources = stage_column_sources(transaction, commit.columns) if commit.columns else {}
            transaction.set_properties({**commit.table_properties, **sources, **updates})
            present = tuple(key for key in removals if key in table.properties)
            if present:
                transaction.remove_properties(*present)
            if commit.delete_after:
                delete_rows(
                    transaction,
                    rows_after(commit.delete_after),
                    commit.summary(),
                    data_location=commit.rewrite_location,
                )
            if commit.added_deletes:
                add_row_delta(transaction, table, commit, replaced)
            elif commit.removed_files:
                replace_files(transaction, table, commit, replaced)
            elif commit.file_uris:
                # What `add_files` does, from the metrics the run carried instead of one footer read
                # per file (`iceberg_data_files`). Duplicate paths are ruled out by the offsets
                # marker; pyiceberg's own check would read every manifest of the table on each commit.
                append_files(transaction, table, commit)
            elif transaction.table_metadata.current_snapshot_id == expected.snapshot_id:
                # A run with no rows still moves the offsets (and a delete that matched nothing wrote
                # no snapshot): an empty append snapshot carries the marker.
                with transaction.update_snapshot(snapshot_properties=commit.summary()).fast_append():
                    pass
        except KafscaleIcebergError:
            raise
        except (ValueError, FileNotFoundError) as exc:
            if commit.delete_after:
                raise self._translate(f"delete the rows after offsets {commit.delete_after}", exc) from exc
            raise DataFileRejectedError(
                expected.table, commit.run_id, f"{type(exc).__name__}: {exc}"
            ) from exc
        except OSError as exc:
            raise CatalogUnavailableError(
                self._describe, f"read the data files of run {commit.run_id!r}", str(exc)
            ) from exc
        except ValidationException as exc:
            # pyiceberg's own check that the files to delete are in the version staged on: the
            # version just checked says they are, so the table moved (or the check misjudged): the
            # commit step reads the table again and re-verifies - a file truly gone is then refused
            # as a stale plan (`files_to_replace`), re-planned, never committed without it.
            raise TableChangedError(expected.table, f"staging run {commit.run_id!r}: {exc}") from exc
        except Exception as exc:  # staging only: nothing reached the catalog
            raise self._translate(f"prepare the commit of run {commit.run_id!r}", exc) from exc
        try:
            committed = transaction.commit_transaction()
        except (CommitFailedException, ValidationException) as exc:
            raise TableChangedError(expected.table, f"a concurrent commit won: {exc}") from exc
        except Exception as exc:
            raise CommitOutcomeUnknownError(
                expected.table, commit.run_id, f"{type(exc).__name__}: {exc}"
            ) from exc
        self._read[expected.table] = committed
        return _state_of(committed, expected.table, commit.topic)

    def field_ids(self, table: str, current: TableState | None = None) -> TableFieldIds:
        """The table's column ids by path (nested parts included), `last-column-id` and metadata file,
        from the version `current` was read or committed as when this adapter holds it, else loaded. Raises
        like `read_state`."""
        loaded = self._version_read(current) or self._load(table)
        metadata = loaded.metadata
        return TableFieldIds(
            identifier=table,
            field_ids=field_ids_by_path(metadata.schema()),
            last_column_id=metadata.last_column_id,
            columns=table_columns(metadata.schema(), metadata.properties),
            metadata_location=loaded.metadata_location,
            data_location=data_location_of(loaded.location(), dict(loaded.properties)),
        )

    def count_rows(self, table: str, after: Mapping[int, int]) -> int:
        """How many rows of `table` have, for a partition of `after`, an `offset` greater than its value.

        A scan reading the `partition` and `offset` columns of the files that may match. Raises
        `TableMissingError`, `CatalogUnavailableError` or `CatalogError`.
        """
        loaded = self._load(table)
        if not after:
            return 0
        try:
            return loaded.scan(row_filter=rows_after(after), selected_fields=("partition", "offset")).count()
        except OSError as exc:
            raise CatalogUnavailableError(self._describe, f"count rows of {table!r}", str(exc)) from exc
        except Exception as exc:
            raise self._translate(f"count rows of {table!r}", exc) from exc


def _state_of(table: Table, identifier: str, topic: str) -> TableState:
    metadata = table.metadata
    snapshot = metadata.current_snapshot()
    return TableState(
        table=identifier,
        topic=topic,
        snapshot_id=metadata.current_snapshot_id,
        marker=read_marker(metadata.properties, topic, table=identifier),
        snapshot_count=len(metadata.snapshots),
        version=table.metadata_location,
        data_files=total_data_files(snapshot.summary if snapshot is not None else None),
        files_baseline=files_baseline(metadata.properties),
    )


def _topic_summaries(table: Table, topic: str) -> list[Mapping[str, str]]:
    """The summaries of the snapshots committed for `topic` on the table's current lineage, newest first."""
    metadata = table.metadata
    by_id = {snapshot.snapshot_id: snapshot for snapshot in metadata.snapshots}
    summaries: list[Mapping[str, str]] = []
    snapshot_id = metadata.current_snapshot_id
    while snapshot_id is not None and snapshot_id in by_id:
        snapshot = by_id[snapshot_id]
        if snapshot.summary is not None and snapshot.summary.get(SUMMARY_TOPIC) == topic:
            summaries.append(snapshot.summary)
        snapshot_id = snapshot.parent_snapshot_id
    return summaries
