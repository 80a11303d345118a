"""Arrow schemas of the files the data plane writes, from the table layouts in `domain.schema`.

The Parquet files are added to Iceberg tables as they are (pyiceberg `add_files`), carrying the
table's field ids when the plan gives them (`with_field_ids`), so their physical schema must be
what the table expects: microsecond timestamps without zone (Iceberg `timestamp`), `date32` for
`date`, and a column is non-nullable exactly when the table field is required.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType
from kafscale_iceberg.domain.schema import DEAD_LETTER_FIELDS, FieldSpec, table_fields
from kafscale_iceberg.exceptions import FieldIdError

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
    ColumnType.TIMESTAMPTZ: pa.timestamp("us", "UTC"),
    ColumnType.UUID: pa.binary(16),  # Parquet FIXED_LEN_BYTE_ARRAY(16): what Iceberg `uuid` reads
}


def arrow_type(column_type: ColumnType) -> pa.DataType:
    """The Arrow type a column of `column_type` is written with (types without parts only)."""
    return _ARROW_TYPES[column_type]


def column_arrow_type(column: ColumnSpec) -> pa.DataType:
    """The Arrow type of a mapping column, parts included: `decimal128(P, S)`, structs, lists and
    maps (string keys) whose parts are all nullable (Iceberg `optional`)."""
    if column.type is ColumnType.DECIMAL:
        return pa.decimal128(column.precision or 1, column.scale or 0)
    if column.type is ColumnType.STRUCT:
        return pa.struct([pa.field(f.name, column_arrow_type(f)) for f in column.fields])
    if column.type is ColumnType.LIST and column.element is not None:
        return pa.list_(column_arrow_type(column.element))
    if column.type is ColumnType.MAP and column.value is not None:
        return pa.map_(pa.string(), column_arrow_type(column.value))
    return _ARROW_TYPES[column.type]


def _field_arrow_type(field: FieldSpec) -> pa.DataType:
    return column_arrow_type(field.column) if field.column is not None else arrow_type(field.type)


def arrow_schema(fields: Sequence[FieldSpec]) -> pa.Schema:
    """An Arrow schema for `fields`: required fields are non-nullable, no field-id metadata."""
    return pa.schema([pa.field(f.name, _field_arrow_type(f), nullable=not f.required) for f in fields])


def data_schema(columns: Sequence[ColumnSpec]) -> pa.Schema:
    """The schema of a mapped table's data files: the eight base fields, then the mapping columns."""
    return arrow_schema(table_fields(columns))


FIELD_ID_KEY = b"PARQUET:field_id"
"""The Arrow field metadata key pyarrow writes as the Parquet field id (Iceberg's column id)."""


def with_field_ids(schema: pa.Schema, field_ids: Mapping[str, int] | None, *, table: str) -> pa.Schema:
    """`schema` with each column's Iceberg field id as Parquet field-id metadata; as it is for None.

    Raises `FieldIdError` naming the table and columns when an id is missing or repeated.
    """
    if field_ids is None:
        return schema
    missing = [name for name in schema.names if name not in field_ids]
    if missing:
        raise FieldIdError(f"table {table}: the plan gives no field id for column(s) {', '.join(missing)}")
    ids = [field_ids[name] for name in schema.names]
    if len(set(ids)) != len(ids):
        raise FieldIdError(
            f"table {table}: the plan's field ids repeat an id: {dict(zip(schema.names, ids, strict=True))}"
        )
    return pa.schema(
        [f.with_metadata({FIELD_ID_KEY: str(field_ids[f.name]).encode()}) for f in schema],
        metadata=schema.metadata,
    )


DEAD_LETTER_SCHEMA: pa.Schema = arrow_schema(DEAD_LETTER_FIELDS)
"""The schema of dead-letter files (the same for every topic)."""
