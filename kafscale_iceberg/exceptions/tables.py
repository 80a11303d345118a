"""The Iceberg catalog and its tables: loading, creating, evolving, the markers, files a table refuses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafscale_iceberg.exceptions.base import KafscaleIcebergError, TransientError


class CatalogError(KafscaleIcebergError):
    """The Iceberg catalog could not be loaded or refused a request.

    Names the catalog type and URI (never a token or password), the operation and the table.
    """

    def __init__(self, catalog: str, operation: str, problem: str) -> None:
        self.catalog = catalog
        self.operation = operation
        self.problem = problem
        super().__init__(f"iceberg catalog {catalog}: {operation} failed: {problem}")


class CatalogUnavailableError(CatalogError, TransientError):
    """The catalog (or its warehouse storage) did not answer, or answered with a server error. Transient."""


class TableMissingError(KafscaleIcebergError):
    """A mapped table does not exist and the mapping does not allow creating it. Terminal."""

    def __init__(self, table: str) -> None:
        self.table = table
        super().__init__(
            f"table {table!r} does not exist (create it, or set create_table_if_missing: true on its mapping)"
        )


class SchemaChangeError(KafscaleIcebergError):
    """A column's type in the table and in the mapping differ in a way that is not applied. Terminal.

    Names the table, the column, the table's type and the mapping's type, and what to do.
    """

    def __init__(self, table: str, column: str, table_type: str, mapped_type: str, advice: str) -> None:
        self.table = table
        self.column = column
        self.table_type = table_type
        self.mapped_type = mapped_type
        super().__init__(
            f"table {table!r} column {column!r}: the table has type {table_type}, the mapping asks for "
            f"{mapped_type}: {advice}"
        )


class PartitionSpecMismatchError(KafscaleIcebergError):
    """The table is partitioned by a field the run's files are not split by. Terminal."""

    def __init__(self, table: str, table_fields: str, mapped_fields: str) -> None:
        self.table = table
        super().__init__(
            f"table {table!r} is partitioned by [{table_fields}] but the mapping's partition_by is "
            f"[{mapped_fields}]: each data file must hold one value per table partition field; make "
            "partition_by list every partition field of the table (or evolve the table's spec)"
        )


class TableMarkerError(KafscaleIcebergError):
    """A `kafscale.*` property of a table is not what this product writes. Terminal: inspect it."""

    def __init__(self, table: str, key: str, problem: str) -> None:
        self.table = table
        self.key = key
        super().__init__(
            f"table {table!r} property {key!r}: {problem} (it is written only by the commit step; "
            "restore it from the newest snapshot summary's kafscale.* keys)"
        )


class OffsetNotInHistoryError(KafscaleIcebergError):
    """No retained snapshot of the table committed the offset (`history --partition --offset`). Terminal."""

    def __init__(self, topic: str, table: str, partition: int, offset: int, span: str) -> None:
        self.topic = topic
        self.table = table
        self.partition = partition
        self.offset = offset
        super().__init__(
            f"topic {topic!r} partition {partition} offset {offset}: no retained snapshot of table "
            f"{table!r} committed it ({span}); it is not committed yet (see `status`), its snapshot was "
            "expired by maintenance, or it is in another table of the topic (--table)"
        )


class DataFileRejectedError(KafscaleIcebergError):
    """The catalog refused to add a run's data file (schema, partition values, missing file). Terminal."""

    def __init__(
        self,
        table: str,
        run_id: str,
        problem: str,
        action: str = "fix the Spark output or the table, then retry the commit",
    ) -> None:
        self.table = table
        self.run_id = run_id
        super().__init__(
            f"run {run_id!r}: the data files could not be added to table {table!r}: {problem} "
            f"(nothing was committed; {action})"
        )


class FieldIdMismatchError(DataFileRejectedError):
    """A run's files carry field ids that are not the table's (it changed after planning). Terminal."""

    def __init__(self, table: str, run_id: str, mismatches: Mapping[str, tuple[int, int | None]]) -> None:
        self.mismatches = dict(mismatches)
        described = ", ".join(
            f"{name}: file id {planned}, table id {'none' if found is None else found}"
            for name, (planned, found) in sorted(mismatches.items())
        )
        super().__init__(
            table,
            run_id,
            f"the files' Parquet field ids differ from the table's ({described}); the table's schema "
            "changed after the run was planned",
            "the topic is planned again at once, with the table's ids - no action needed",
        )


class TableLocationUnknownError(FieldIdMismatchError):
    """The run was planned before its table existed, in a catalog that chooses table locations (a REST
    warehouse name, an S3 Tables bucket ARN), so its files are not under the table's data location.
    The commit step has created the table and records where it keeps its data: a stale plan, re-planned
    at once like a field-id mismatch (nothing committed; one run per new table)."""

    def __init__(self, table: str, run_id: str, data_location: str) -> None:
        self.mismatches = {}
        self.data_location = data_location
        DataFileRejectedError.__init__(
            self,
            table,
            run_id,
            f"the run was planned before the table existed and its catalog chose where the table keeps "
            f"its data ({data_location}), so the run's files are not there. Abort the run: the next "
            "attempt writes under the table's data location",
        )


class UpsertLocateStaleError(DataFileRejectedError):
    """The table version an upsert run located its changed keys in no longer stands: a file the run
    replaces left the table, or a commit other than a compaction landed after it (or that version is
    no longer in the table's history). Terminal for this run (nothing committed); the next attempt is
    planned with the table's current version, which the commit step records (`field-ids.json`)."""

    def __init__(self, table: str, run_id: str, located: int | None, problem: str) -> None:
        self.located = located
        DataFileRejectedError.__init__(
            self,
            table,
            run_id,
            f"the run located its changed keys in snapshot {located}, which no longer stands: {problem}",
            "the topic is planned again at once, located in the table's current version - no action needed",
        )


class DataFileMissingError(KafscaleIcebergError):
    """A file a commit would reference does not exist (deleted after the run wrote it: orphan cleanup,
    an `aws s3 rm`). Terminal for this commit (nothing written); the run is planned again and rewrites
    it - a table never references a file the commit has not seen exist."""

    def __init__(self, run_id: str, tables: Sequence[str], missing: Sequence[str]) -> None:
        self.run_id = run_id
        self.tables = tuple(tables)
        self.missing = tuple(missing)
        super().__init__(
            f"run {run_id!r}: {len(self.missing)} file(s) it would commit to {', '.join(self.tables)} do "
            f"not exist, e.g. {self.missing[0]!r} (deleted after the run wrote them: orphan cleanup or a "
            "manual delete?); nothing was committed - the range is planned again and its files rewritten"
        )


class UpsertTableError(KafscaleIcebergError):
    """An upsert run cannot locate its changed keys in the table's metadata (delete files, a key column
    the table lacks, metadata it cannot read). Terminal: the message says what to do."""

    def __init__(self, location: str, problem: str) -> None:
        self.location = location
        super().__init__(f"upsert table at {location}: {problem}")


class InferredColumnChangedError(FieldIdMismatchError):
    """An inferred column the run wrote has another type in the table than in the run's files (the
    table gained it meanwhile, from another run). Terminal for this run; the next attempt is planned
    with the table's columns, and is refused before any write like a field-id mismatch."""

    def __init__(self, table: str, run_id: str, conflicts: Mapping[str, tuple[str, str]]) -> None:
        self.mismatches = {}
        self.conflicts = dict(conflicts)
        described = ", ".join(
            f"{name}: files {written}, table {found}" for name, (written, found) in sorted(conflicts.items())
        )
        DataFileRejectedError.__init__(
            self,
            table,
            run_id,
            f"inferred columns have another type in the table than in the files ({described}); the "
            "table's schema changed after the run was planned. Abort the run: the next attempt is "
            "planned with the table's columns",
        )


class CompactionResultError(KafscaleIcebergError):
    """A compaction job's result does not match its job (another job's, failed, rows differ, files
    missing): nothing is committed, its files are orphans, the next maintenance pass plans again."""


class UnfilledColumnError(DataFileRejectedError):
    """Under `schema.mode: strict`, a run whose mapping column no record carried (null in every row:
    the mapping names a field the records do not have). Refused before its commit. Terminal."""

    def __init__(self, table: str, run_id: str, columns: tuple[str, ...], problems: str) -> None:
        self.columns = columns
        super().__init__(
            table,
            run_id,
            f"schema.mode strict refuses a column no record fills: {problems}",
            "rename the mapping's column to the field the records carry, or send the field; "
            "`kafscale-iceberg segments inspect` shows the records",
        )
