"""Keyed upsert as a run carries it (`mappings[].mode: upsert`): the key columns and how records change them.

An upsert table holds each key's latest row. Per run the last record of a key (by offset in its Kafka
partition) wins; a delete removes the key's row. How records become changes is `cdc`: `none` (the
value is the key's new row, a tombstone deletes the key named by the record key) or `debezium`
(Debezium envelopes: `c`/`r`/`u` write `after`, `d` deletes by `before`'s key).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from kafscale_iceberg.domain.runs.documents import DocumentModel


class UpsertWrite(StrEnum):
    """`upsert.write`: how an upsert run removes the rows its changed keys replace (`choose_write`)."""

    MERGE_ON_READ = "merge-on-read"
    """Position delete files name the replaced rows; no table file is rewritten."""
    COPY_ON_WRITE = "copy-on-write"
    """The files holding a replaced row are written again without it."""
    AUTO = "auto"
    """Copy-on-write when the files to rewrite are few and small, merge-on-read otherwise."""


class CdcFormat(StrEnum):
    """`upsert.cdc`: how a record's value says what changed."""

    NONE = "none"
    """The value is the key's new row; a tombstone (null value) deletes the record key's row."""
    DEBEZIUM = "debezium"
    """A Debezium change event (`op`, `before`, `after`, `source`, `ts_ms`)."""


class UpsertSettings(DocumentModel):
    """`mappings[].upsert` of a mapping in `mode: upsert`: its key columns (the table's identifier
    fields, required columns of the mapping) and how records change the table."""

    key: tuple[str, ...] = Field(min_length=1)
    cdc: CdcFormat = CdcFormat.NONE
    delete_on_tombstone: bool = True
    """A tombstone (a record with a null value) deletes the row of the key its record key names."""
    write: UpsertWrite = UpsertWrite.AUTO
    """How replaced rows are removed (`upsert.write`)."""

    @model_validator(mode="after")
    def _key_columns_once(self) -> UpsertSettings:
        if len(set(self.key)) != len(self.key):
            raise ValueError(f"upsert key {list(self.key)} lists a column twice")
        return self


class ReplacedFile(DocumentModel):
    """A table file an upsert run replaces (rewritten without the rows of changed keys, or dropped)."""

    uri: str
    size_bytes: int = Field(ge=0)


class PositionDeleteFile(DocumentModel):
    """An Iceberg v2 position delete file an upsert run wrote (`dataplane/position_deletes.py`): the
    rows (`file_path`, `pos`) it deletes, in the data files it `targets` (sorted; all of one partition),
    with the metrics the commit gives the table (bounds of both columns, their Parquet sizes)."""

    uri: str
    record_count: int = Field(ge=1)
    size_bytes: int = Field(ge=0)
    targets: tuple[str, ...] = Field(min_length=1)
    pos_lower: int = Field(ge=0)
    pos_upper: int = Field(ge=0)
    file_path_bytes: int = Field(default=0, ge=0)
    """The compressed bytes of the `file_path` column."""
    pos_bytes: int = Field(default=0, ge=0)
    """The compressed bytes of the `pos` column."""
    replaces: tuple[str, ...] = ()
    """Delete files of the table it supersedes (it holds their positions too): removed in the
    snapshot that adds it, so a data file keeps at most one delete file."""


class UpsertOutcome(DocumentModel):
    """What an upsert run's tasks made of its changes (`RunResult.upsert`): the table version it located
    the changed keys in, the table files it replaces (its rewritten ones are in `data_files`, with its
    own rows), and the keys it inserted, updated and deleted there.

    The commit refuses the run when that version no longer stands (a replaced file left the table, or
    a commit other than a compaction landed after it): the run is planned again, never half applied.
    """

    located_snapshot_id: int | None = None
    """The snapshot the run located in (None: the table had none, or the launcher knew no version)."""
    located_version: str | None = None
    """The table metadata file read (`TableTarget.metadata_location` of the plan)."""
    changed_keys: int = Field(default=0, ge=0)
    """How many keys the run changed (none: the commit only moves the offsets)."""
    replaced: tuple[ReplacedFile, ...] = ()
    policy: UpsertWrite = UpsertWrite.AUTO
    """`upsert.write` of the plan: what the table's `write.*.mode` properties tell other writers."""
    write: UpsertWrite = UpsertWrite.COPY_ON_WRITE
    """How the run removed replaced rows: `copy-on-write` (`replaced`) or `merge-on-read` (`deletes`)."""
    deletes: tuple[PositionDeleteFile, ...] = ()
    """Merge-on-read: the position delete files, each naming rows of table files it leaves in place."""
    located_bytes_read: int = Field(default=0, ge=0)
    """Bytes the run read from table files to locate its changed keys (key columns only)."""
    inserted: int = Field(default=0, ge=0)
    updated: int = Field(default=0, ge=0)
    deleted: int = Field(default=0, ge=0)
