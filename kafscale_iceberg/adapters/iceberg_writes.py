"""What one Iceberg commit of the product writes inside its transaction (`IcebergTableCommitter.commit`).

- `append_files`: a run's data files, from the metrics the run carried (no footer read), as
  `add_files` would (merge or fast append, as the table says).
- `replace_files`: files removed and files added as ONE `overwrite` snapshot (an upsert run).
- `add_row_delta`: a run's data files and position delete files as ONE snapshot (a merge-on-read
  upsert run; `iceberg_row_delta.py`).
- `delete_rows`: rows deleted copy-on-write as ONE `overwrite` snapshot (the offset reset).
- `rows_after`: the rows after each partition's offset, as an Iceberg expression.
- `single_attempt`: a table whose transactions pyiceberg never retries blindly.
- `overwrite`: pyiceberg's `overwrite` producer with its manifest filter made safe for its threads
  (every overwrite of the product - upsert, offset reset, compaction - is staged through it).

Nothing here loads a table or reaches the catalog until the caller commits the transaction.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, GreaterThan, Or, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, _expression_to_complementary_pyarrow
from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update.snapshot import UpdateSnapshot, _OverwriteFiles
from pyiceberg.utils.properties import property_as_bool

from kafscale_iceberg.adapters.iceberg_data_files import data_files_to_add
from kafscale_iceberg.adapters.iceberg_row_delta import add_row_delta as add_row_delta_snapshot
from kafscale_iceberg.adapters.iceberg_row_delta import position_delete_entry
from kafscale_iceberg.adapters.iceberg_schemas import NAME_MAPPING
from kafscale_iceberg.domain.commits import TableCommit

_COMMIT_RETRIES = "commit.retry.num-retries"


def append_files(transaction: Transaction, table: Table, commit: TableCommit) -> None:
    """Add `commit`'s files to `transaction` as one append snapshot carrying `commit`'s summary (the
    name mapping set first when the table lacks one)."""
    metadata = transaction.table_metadata
    files = data_files_to_add(metadata, table.io, commit.file_uris, {f.uri: f for f in commit.files})
    if metadata.name_mapping() is None:
        transaction.set_properties({NAME_MAPPING: metadata.schema().name_mapping.model_dump_json()})
    # As `add_files`: a merge append when the table enables manifest merging, else a fast append.
    snapshot = transaction.update_snapshot(snapshot_properties=commit.summary())
    merge = property_as_bool(
        metadata.properties,
        TableProperties.MANIFEST_MERGE_ENABLED,
        TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT,
    )
    with snapshot.merge_append() if merge else snapshot.fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)


def replace_files(
    transaction: Transaction, table: Table, commit: TableCommit, removed: Sequence[IcebergDataFile]
) -> None:
    """Remove `removed` (the table's entries of `commit.removed_files`) and add `commit`'s files as ONE
    `overwrite` snapshot carrying its summary (an upsert run's copy-on-write)."""
    metadata = transaction.table_metadata
    files = data_files_to_add(metadata, table.io, commit.file_uris, {f.uri: f for f in commit.files})
    if metadata.name_mapping() is None:
        transaction.set_properties({NAME_MAPPING: metadata.schema().name_mapping.model_dump_json()})
    with overwrite(transaction.update_snapshot(snapshot_properties=commit.summary())) as producer:
        for data_file in removed:
            producer.delete_data_file(data_file)
        for data_file in files:
            producer.append_data_file(data_file)


def overwrite(snapshot: UpdateSnapshot, commit_uuid: uuid.UUID | None = None) -> _OverwriteFiles:
    """`snapshot.overwrite()`, its manifest filter serialized between its threads.

    pyiceberg 0.12 stages an overwrite's deletes by filtering the parent's manifests on an executor,
    all threads sharing one `_ManifestEvalVisitor` per partition spec; its `eval` stores the manifest's
    partition summaries on the visitor before visiting, so two threads interleaving judge one manifest
    by the other's bounds. A manifest holding files to delete is then skipped and the staging fails
    with `ValidationException: Missing required files to delete` naming files that are live - now and
    then, more often with many manifests and narrow partitions (`bucket`, `truncate`). Measured here:
    13 of 200 stagings of a 24-manifest delete failed with a 1 us switch interval, 0 of 200 through
    this function. Drop it once pyiceberg evaluates manifests without shared state (as iceberg-go
    did, apache/iceberg-go#954).
    """
    producer = snapshot.overwrite(commit_uuid=commit_uuid)
    build = producer._build_manifest_evaluator

    def serialized(spec_id: int) -> Callable[[ManifestFile], bool]:
        evaluate, lock = build(spec_id), threading.Lock()

        def locked(manifest: ManifestFile) -> bool:
            with lock:
                return evaluate(manifest)

        return locked

    # An instance attribute: `_deleted_entries` and `_existing_manifests` look the builder up per call.
    producer.__dict__["_build_manifest_evaluator"] = serialized
    return producer


def add_row_delta(
    transaction: Transaction, table: Table, commit: TableCommit, live: Sequence[IcebergDataFile]
) -> None:
    """Add `commit`'s files and its position delete files (`commit.added_deletes`, each in the
    partition of the data files it targets, found in `live`) and remove the delete files they
    supersede (in `live` too) as ONE snapshot carrying its summary."""
    metadata = transaction.table_metadata
    files = data_files_to_add(metadata, table.io, commit.file_uris, {f.uri: f for f in commit.files})
    if metadata.name_mapping() is None:
        transaction.set_properties({NAME_MAPPING: metadata.schema().name_mapping.model_dump_json()})
    by_path = {f.file_path: f for f in live}
    deletes = [position_delete_entry(d, by_path[d.targets[0]]) for d in commit.added_deletes]
    superseded = [by_path[uri] for d in commit.added_deletes for uri in d.replaces]
    add_row_delta_snapshot(transaction, files, deletes, commit.summary(), removed_deletes=superseded)


@dataclass(frozen=True)
class RowDeletion:
    """What `delete_rows` did: files dropped whole, files rewritten, rows removed and rows rewritten."""

    files_dropped: int = 0
    files_rewritten: int = 0
    rows_removed: int = 0
    rows_rewritten: int = 0


def delete_rows(
    transaction: Transaction,
    delete_filter: BooleanExpression,
    summary: dict[str, str],
    *,
    data_location: str | None = None,
) -> RowDeletion:
    """Delete the rows matching `delete_filter` copy-on-write, as ONE `overwrite` snapshot of `transaction`.

    Only files whose statistics (partition values, column bounds) say they may hold matching rows are
    read (pyiceberg's scan planning); a file all of whose rows match is dropped, a file with some is
    rewritten without them (pyiceberg's writer: the table's field ids, into the table's data
    location), a file with none is left alone. pyiceberg's own `Transaction.delete` writes a
    `delete` and then an `overwrite` snapshot, so time travel could land between them; here both
    changes are one snapshot. Nothing matching: no snapshot (the caller decides).

    `data_location` puts the rewritten files in that folder instead of the table's data location
    (a reset writes under its run folder, so orphan cleanup finds the files of an interrupted one).
    """
    schema = transaction.table_metadata.schema()
    write_metadata = _writing_to(transaction.table_metadata, data_location)
    keep = _expression_to_complementary_pyarrow(bind(schema, delete_filter, case_sensitive=True), schema)
    io = transaction._table.io
    commit_uuid = uuid.uuid4()
    counter = itertools.count(0)
    removed: list[IcebergDataFile] = []
    added: list[IcebergDataFile] = []
    rows_removed = rows_rewritten = rewritten = 0
    for task in transaction._scan(row_filter=delete_filter).plan_files():
        rows = ArrowScan(
            table_metadata=transaction.table_metadata, io=io, projected_schema=schema, row_filter=AlwaysTrue()
        ).to_table(tasks=[task])
        kept = rows.filter(keep)
        if kept.num_rows == rows.num_rows:
            continue
        removed.append(task.file)
        rows_removed += rows.num_rows - kept.num_rows
        if kept.num_rows:
            rewritten += 1
            rows_rewritten += kept.num_rows
            added.extend(
                _dataframe_to_data_files(
                    io=io,
                    df=kept,
                    table_metadata=write_metadata,
                    write_uuid=commit_uuid,
                    counter=counter,
                )
            )
    if removed:
        with overwrite(transaction.update_snapshot(snapshot_properties=summary), commit_uuid) as producer:
            for data_file in removed:
                producer.delete_data_file(data_file)
            for data_file in added:
                producer.append_data_file(data_file)
    return RowDeletion(
        files_dropped=len(removed) - rewritten,
        files_rewritten=rewritten,
        rows_removed=rows_removed,
        rows_rewritten=rows_rewritten,
    )


def _writing_to(metadata: TableMetadata, data_location: str | None) -> TableMetadata:
    """`metadata` whose location provider writes data files straight into `data_location` (only this
    in-memory view: a commit sends updates, never these properties)."""
    if data_location is None:
        return metadata
    properties = {
        **metadata.properties,
        TableProperties.WRITE_DATA_PATH: data_location.rstrip("/"),
        TableProperties.OBJECT_STORE_ENABLED: "false",
    }
    return metadata.model_copy(update={"properties": properties})


def rows_after(offsets: Mapping[int, int]) -> BooleanExpression:
    """`(partition == P1 and offset > N1) or ...`: the rows after each partition's offset (base fields)."""
    terms = [
        And(
            EqualTo(term=Reference("partition"), value=literal(p)),
            GreaterThan(term=Reference("offset"), value=literal(o)),
        )
        for p, o in sorted(offsets.items())
    ]
    if not terms:
        raise ValueError("rows_after needs at least one partition")
    expression: BooleanExpression = terms[0]
    for term in terms[1:]:
        expression = Or(expression, term)
    return expression


def single_attempt(table: Table) -> Table:
    """The same table, with pyiceberg's commit retries off for transactions started from it.

    pyiceberg reads the retry count from the loaded metadata's properties; only this in-memory view
    changes - the commit sends updates, never these properties, so the table keeps its own setting.
    """
    properties = {**table.metadata.properties, _COMMIT_RETRIES: "0"}
    metadata = table.metadata.model_copy(update={"properties": properties})
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog)
