"""Arrow schemas of the files the data plane writes, from the table layouts in `domain.schema`.

The Parquet files are added to Iceberg tables as they are (pyiceberg `add_files`, name mapping, no
field ids), so their physical schema must be what the table expects: microsecond timestamps without
zone (Iceberg `timestamp`), `date32` for `date`, and a column is non-nullable exactly when the table
field is required.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, FieldSpec, table_fields

_ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    ColumnType.BOOLEAN: pa.bool_(),
    ColumnType.INT: pa.int32(),
    ColumnType.LONG: pa.int64(),
    ColumnType.FLOAT: pa.float32(),
    ColumnType.DOUBLE: pa.float64(),
    ColumnType.STRING: pa.string(),
    ColumnType.BINARY: pa.binary(),
    ColumnType.TIMESTAMP: pa.timestamp("us"),
    ColumnType.DATE: pa.date32(),
}


def arrow_type(column_type: ColumnType) -> pa.DataType:
    """The Arrow type a column of `column_type` is written with."""
    return _ARROW_TYPES[column_type]


def arrow_schema(fields: Sequence[FieldSpec]) -> pa.Schema:
    """An Arrow schema for `fields`: required fields are non-nullable, no field-id metadata."""
    return pa.schema([pa.field(f.name, arrow_type(f.type), nullable=not f.required) for f in fields])


def data_schema(columns: Sequence[ColumnSpec]) -> pa.Schema:
    """The schema of a mapped table's data files: the eight base fields, then the mapping columns."""
    return arrow_schema(table_fields(columns))


DEAD_LETTER_SCHEMA: pa.Schema = arrow_schema(DEAD_LETTER_FIELDS)
"""The schema of dead-letter files (the same for every topic)."""
