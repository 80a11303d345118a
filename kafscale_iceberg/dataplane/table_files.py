"""A task's Parquet writers, one per destination table, and what each table got."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from kafscale_iceberg.dataplane.parquet_files import RollingParquetWriter
from kafscale_iceberg.dataplane.schemas import with_field_ids
from kafscale_iceberg.domain.runs import ConversionSettings, TableOutput, TableRole, TableTarget
from kafscale_iceberg.ports import FileSink


class TableFiles:
    """The task's file writers, one per table, opened when the table's first rows arrive; what each
    table got (rows, conversion failures)."""

    def __init__(self, sink: FileSink, task_index: int) -> None:
        self._sink = sink
        self._task_index = task_index
        self._writers: dict[str, RollingParquetWriter] = {}
        self._roles: dict[str, tuple[TableRole, int]] = {}
        self._records: dict[str, int] = {}
        self._failures: dict[str, dict[str, int]] = {}

    def writer(
        self,
        target: TableTarget,
        schema: pa.Schema,
        role: TableRole,
        mapping: int,
        settings: ConversionSettings,
        partition_file_min_bytes: bool = False,
    ) -> RollingParquetWriter:
        writer = self._writers.get(target.identifier)
        if writer is None:
            writer = self._writers[target.identifier] = RollingParquetWriter(
                sink=self._sink,
                data_uri=target.data_uri,
                schema=with_field_ids(schema, target.field_ids, table=target.identifier),
                task_index=self._task_index,
                target_file_size_bytes=settings.target_file_size_bytes,
                delta_columns=frozenset(settings.upsert.key if settings.upsert is not None else ()),
                **(
                    {"partition_file_min_bytes": settings.partition_file_min_bytes}
                    if partition_file_min_bytes
                    else {}
                ),
            )
            self._roles[target.identifier] = (role, mapping)
        return writer

    def count(self, identifier: str, records: int, failures: Mapping[str, int] | None = None) -> None:
        self._records[identifier] = self._records.get(identifier, 0) + records
        if failures:
            table = self._failures.setdefault(identifier, {})
            for column, count in failures.items():
                if count:
                    table[column] = table.get(column, 0) + count

    def close(self) -> tuple[TableOutput, ...]:
        outputs = []
        for identifier, writer in self._writers.items():
            role, mapping = self._roles[identifier]
            outputs.append(
                TableOutput(
                    identifier=identifier,
                    role=role,
                    mapping=mapping,
                    files=tuple(writer.close()),
                    records=self._records.get(identifier, 0),
                    conversion_failures=dict(sorted(self._failures.get(identifier, {}).items())),
                )
            )
        return tuple(outputs)

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.abort()
