"""A row delta on pyiceberg 0.12: data files and position delete files added in ONE snapshot (the
commit of a merge-on-read upsert run), and position delete files removed with the data files they
target (a compaction folding deletes).

pyiceberg 0.12 reads delete files but cannot commit one (apache/iceberg-python #3618): its snapshot
producers write every added file into a data manifest, and its overwrite removes data files only.
This module is the smallest adapter over its manifest and snapshot classes that does it:

- `_DeleteManifestWriter`: pyiceberg's v2 manifest writer with `content: deletes` (the manifest list
  then carries the manifest as a delete manifest), its entries' `referenced_data_file` written;
- `_RowDelta`: pyiceberg's fast append (every existing manifest kept, the new snapshot's sequence
  number inherited by every added entry - the data files' and the delete files' alike, so a delete
  applies to the table's older files and never to the rows added beside it) plus a delete manifest
  per partition spec, the delete files a new one supersedes removed (their manifests rewritten with
  them `DELETED`: what Iceberg's `RowDelta.removeDeletes` does), and the summary's
  `added-delete-files` / `added-position-deletes` / `removed-position-deletes` (pyiceberg's own
  summary collector counts them by the files' content);
- `_Replace`: a `replace` snapshot (rows unchanged: a compaction) removing data files and the
  delete files folded into their rewrite - pyiceberg's overwrite removes data files only, would
  rewrite a delete manifest as a data manifest, and calls itself `overwrite`, which incremental
  readers take for changed data.

Once pyiceberg writes delete files itself (#3618: a `RowDelta`-like producer), delete this module and
call that from `iceberg_writes.add_row_delta` and the compaction commit.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties, Transaction
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _FastAppendFiles, _ManifestMergeManager, _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT
from pyiceberg.types import NestedField, StringType, StructType
from pyiceberg.utils.properties import property_as_bool, property_as_int

from kafscale_iceberg.domain.runs import PositionDeleteFile

FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545
_REFERENCED_DATA_FILE = NestedField(
    field_id=143, name="referenced_data_file", field_type=StringType(), required=False
)


def position_delete_entry(delete: PositionDeleteFile, target: DataFile) -> DataFile:
    """The manifest entry's file of `delete`, in the partition (and spec) of `target`, one of the data
    files it deletes rows of (all its targets share one partition)."""
    path_lower, path_upper = delete.targets[0].encode(), delete.targets[-1].encode()
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=delete.uri,
        file_format=FileFormat.PARQUET,
        partition=target.partition,
        record_count=delete.record_count,
        file_size_in_bytes=delete.size_bytes,
        column_sizes={FILE_PATH_FIELD_ID: delete.file_path_bytes, POS_FIELD_ID: delete.pos_bytes},
        value_counts={FILE_PATH_FIELD_ID: delete.record_count, POS_FIELD_ID: delete.record_count},
        null_value_counts={FILE_PATH_FIELD_ID: 0, POS_FIELD_ID: 0},
        lower_bounds={FILE_PATH_FIELD_ID: path_lower, POS_FIELD_ID: struct.pack("<q", delete.pos_lower)},
        upper_bounds={FILE_PATH_FIELD_ID: path_upper, POS_FIELD_ID: struct.pack("<q", delete.pos_upper)},
        referenced_data_file=delete.targets[0] if len(delete.targets) == 1 else None,
    )
    data_file.spec_id = target.spec_id
    return data_file


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (`content: deletes`), writing `referenced_data_file` too."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}

    def _with_partition(self, format_version: Any) -> Schema:
        schema = super()._with_partition(format_version)
        fields = []
        for entry_field in schema.fields:
            if entry_field.name == "data_file" and isinstance(entry_field.field_type, StructType):
                data_file = entry_field.field_type
                if "referenced_data_file" not in {f.name for f in data_file.fields}:
                    data_file = StructType(*data_file.fields, _REFERENCED_DATA_FILE)
                fields.append(
                    NestedField(
                        field_id=entry_field.field_id,
                        name=entry_field.name,
                        field_type=data_file,
                        required=True,
                    )
                )
                continue
            fields.append(entry_field)
        return Schema(*fields, schema_id=schema.schema_id)

    def add_entry(self, entry: ManifestEntry) -> ManifestWriterV2:
        # An entry read from a manifest is a v2 record (no `referenced_data_file`): widened to v3.
        data_file = entry.data_file
        if len(data_file._data) < len(DATA_FILE_TYPE[3].fields):
            widened = DataFile.from_args(
                _table_format_version=3,
                **{f.name: data_file._data[i] for i, f in enumerate(DATA_FILE_TYPE[2].fields)},
            )
            widened.spec_id = data_file.spec_id
            entry = ManifestEntry.from_args(
                status=entry.status,
                snapshot_id=entry.snapshot_id,
                sequence_number=entry.sequence_number,
                file_sequence_number=entry.file_sequence_number,
                data_file=widened,
            )
        super().add_entry(entry)
        return self

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        # The entries are v3 records (they hold `referenced_data_file`); the file is v2 plus that field.
        return AvroOutputFile[ManifestEntry](
            output_file=self._output_file,
            file_schema=self._with_partition(self.version),
            record_schema=ManifestWriterV2._with_partition(self, 3),
            schema_name="manifest_entry",
            metadata=self._meta,
        )


class _RowDelta(_FastAppendFiles):
    """A fast append that also adds delete files, in delete manifests (see the module docstring)."""

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str] = EMPTY_DICT) -> None:
        super().__init__(
            operation=Operation.OVERWRITE,
            transaction=transaction,
            io=transaction._table.io,
            snapshot_properties=snapshot_properties,
        )
        self._added_delete_files: list[DataFile] = []

    def add_delete_file(self, delete_file: DataFile) -> _RowDelta:
        """Add a position delete file (`position_delete_entry`) to the snapshot."""
        self._added_delete_files.append(delete_file)
        return self

    def remove_delete_file(self, delete_file: DataFile) -> _RowDelta:
        """Remove a delete file of the table (its entry as the parent snapshot lists it)."""
        self._deleted_data_files.add(delete_file)
        return self

    def _existing_manifests(self) -> list[ManifestFile]:
        # The delete manifests of the specs it adds delete files in are merged by `_manifests`.
        merged = self._merged_specs()
        kept = super()._existing_manifests()
        return [m for m in kept if m.content != ManifestContent.DELETES or m.partition_spec_id not in merged]

    def _manifests(self) -> list[ManifestFile]:
        """The data manifests as a fast append writes them, and ONE delete manifest per partition
        spec it adds delete files in: those files, and the live entries of that spec's delete
        manifests - `DELETED` for the delete files it removes, `EXISTING` (sequence numbers kept)
        for the others. A table then has one delete manifest per spec however many runs wrote
        deletes (each run used to add one, and a reader opens every manifest to plan a scan)."""
        manifests = super()._manifests()
        removed = {f.file_path for f in self._deleted_data_files}
        by_spec: dict[int, list[DataFile]] = defaultdict(list)
        for delete_file in self._added_delete_files:
            by_spec[delete_file.spec_id].append(delete_file)
        specs = self._merged_specs()
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id or -1)
        earlier = [
            m
            for m in (parent.manifests(self._io) if parent is not None else ())
            if m.content == ManifestContent.DELETES and m.partition_spec_id in specs
        ]
        for spec_id in sorted(specs):
            files = by_spec.get(spec_id, [])
            writer = _manifest_writer(self, _DeleteManifestWriter, spec_id)
            with writer:
                for delete_file in files:
                    writer.add_entry(_added(self._snapshot_id, delete_file))
                for manifest in (m for m in earlier if m.partition_spec_id == spec_id):
                    for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                        if entry.data_file.file_path in removed:
                            writer.delete(entry)
                        else:
                            writer.existing(entry)
            manifests.append(writer.to_manifest_file())
        return manifests

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        """The data manifests merged as Iceberg's own row delta merges them (Java's default, off in
        pyiceberg's): once `commit.manifest.min-count-to-merge` (100) of them would stand, into
        manifests of `commit.manifest.target-size-bytes` (8 MB). A merge-on-read run adds one each,
        and a reader opens every one to plan a scan."""
        properties = self._transaction.table_metadata.properties
        merger = _ManifestMergeManager(
            target_size_bytes=property_as_int(
                properties,
                TableProperties.MANIFEST_TARGET_SIZE_BYTES,
                TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT,
            )
            or TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT,
            min_count_to_merge=property_as_int(
                properties,
                TableProperties.MANIFEST_MIN_MERGE_COUNT,
                TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT,
            )
            or TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT,
            merge_enabled=property_as_bool(properties, TableProperties.MANIFEST_MERGE_ENABLED, True),
            snapshot_producer=self,
        )
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        return [*merger.merge_manifests(data), *(m for m in manifests if m.content != ManifestContent.DATA)]

    def _merged_specs(self) -> set[int]:
        """The partition specs whose delete manifests this snapshot writes again as one."""
        return {f.spec_id for f in (*self._added_delete_files, *self._deleted_data_files)}

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Any:
        # pyiceberg's collector counts a file by its content: the delete files are summed as
        # `added-delete-files`, `added-position-delete-files`, `added-position-deletes`.
        data_files = self._added_data_files
        self._added_data_files = [*data_files, *self._added_delete_files]
        try:
            return super()._summary(snapshot_properties)
        finally:
            self._added_data_files = data_files


def _added(snapshot_id: int, data_file: DataFile) -> ManifestEntry:
    return ManifestEntry.from_args(
        status=ManifestEntryStatus.ADDED,
        snapshot_id=snapshot_id,
        sequence_number=None,
        file_sequence_number=None,
        data_file=data_file,
    )


class _Replace(_SnapshotProducer["_Replace"]):
    """Data and delete files removed, data files added, rows unchanged (see the module docstring)."""

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str] = EMPTY_DICT) -> None:
        super().__init__(
            operation=Operation.REPLACE,
            transaction=transaction,
            io=transaction._table.io,
            snapshot_properties=snapshot_properties,
        )

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # written by `_manifests`, in manifests of their content

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        # pyiceberg totals only append/overwrite/delete summaries; a replace's totals add up the same.
        self._operation = Operation.OVERWRITE
        try:
            summary = super()._summary(snapshot_properties)
        finally:
            self._operation = Operation.REPLACE
        return Summary(operation=Operation.REPLACE, **summary.additional_properties)

    def _existing_manifests(self) -> list[ManifestFile]:
        return []  # written by `_manifests`

    def _manifests(self) -> list[ManifestFile]:
        manifests: list[ManifestFile] = []
        if self._added_data_files:
            with self.new_manifest_writer(spec=self._transaction.table_metadata.spec()) as writer:
                for data_file in self._added_data_files:
                    writer.add_entry(_added(self._snapshot_id, data_file))
            manifests.append(writer.to_manifest_file())
        return manifests + _manifests_without(self, {f.file_path for f in self._deleted_data_files})


def _manifests_without(producer: _SnapshotProducer[Any], removed: set[str]) -> list[ManifestFile]:
    """The parent snapshot's live manifests with the entries of `removed` (file paths, data or
    delete files) marked `DELETED`: a manifest holding none is kept as it is, one holding some is
    written again, in a manifest of its content and partition spec."""
    manifests: list[ManifestFile] = []
    parent = producer._transaction.table_metadata.snapshot_by_id(producer._parent_snapshot_id or -1)
    for manifest in parent.manifests(producer._io) if parent is not None else ():
        if not (manifest.has_added_files() or manifest.has_existing_files()):
            continue  # every entry deleted already: no snapshot after the parent needs it
        entries = manifest.fetch_manifest_entry(producer._io, discard_deleted=True)
        if not any(e.data_file.file_path in removed for e in entries):
            manifests.append(manifest)
            continue
        kind = _DeleteManifestWriter if manifest.content == ManifestContent.DELETES else ManifestWriterV2
        writer = _manifest_writer(producer, kind, manifest.partition_spec_id)
        with writer:
            for entry in entries:
                if entry.data_file.file_path in removed:
                    writer.delete(entry)
                else:
                    writer.existing(entry)
        manifests.append(writer.to_manifest_file())
    return manifests


def replace_files(
    transaction: Transaction,
    removed: Sequence[DataFile],
    added: Sequence[DataFile],
    summary: dict[str, str],
) -> None:
    """ONE `replace` snapshot of `transaction`: `removed` (the table's data and delete files) out,
    `added` (data files holding the same rows) in, carrying `summary`. The caller checks that no
    row-level change landed on a removed file since it read it."""
    producer = _Replace(transaction, snapshot_properties=summary)
    for data_file in removed:
        producer.delete_data_file(data_file)
    for data_file in added:
        producer.append_data_file(data_file)
    producer.commit()


def add_row_delta(
    transaction: Transaction,
    data_files: Sequence[DataFile],
    delete_files: Sequence[DataFile],
    summary: dict[str, str],
    removed_deletes: Sequence[DataFile] = (),
) -> None:
    """Add `data_files` and `delete_files` (`position_delete_entry`) to `transaction`, and remove the
    table's delete files `removed_deletes` (superseded by added ones holding their positions), as ONE
    snapshot carrying `summary` (operation `overwrite` when it adds and deletes rows, `delete` when it
    only deletes, `append` when it only adds: Iceberg's row delta).
    pyiceberg's commit retries must be off for the transaction (`single_attempt`): a lost race is for
    the caller to verify again, never to re-apply blindly."""
    producer = _RowDelta(transaction, snapshot_properties=summary)
    if not delete_files:
        producer._operation = Operation.APPEND
    elif not data_files:
        producer._operation = Operation.DELETE
    for data_file in data_files:
        producer.append_data_file(data_file)
    for delete_file in delete_files:
        producer.add_delete_file(delete_file)
    for delete_file in removed_deletes:
        producer.remove_delete_file(delete_file)
    producer.commit()


def _manifest_writer(producer: Any, kind: Any, spec_id: int) -> Any:
    """A new manifest of `kind` (data or delete) for `producer`'s snapshot, in partition spec `spec_id`."""
    return kind(
        spec=producer.spec(spec_id),
        schema=producer.schema(),
        output_file=producer.new_manifest_output(),
        snapshot_id=producer._snapshot_id,
        avro_compression=producer._compression,
    )
