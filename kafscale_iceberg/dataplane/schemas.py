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
    ColumnType.TIME: pa.time64("us"),
    # Parquet FIXED_LEN_BYTE_ARRAY(16) with the UUID logical type (Arrow's `arrow.uuid` extension):
    # what Iceberg `uuid` is, and what readers show as a uuid rather than 16 bytes.
    ColumnType.UUID: pa.uuid(),
}
_UUID_STORAGE = pa.binary(16)


def arrow_type(column_type: ColumnType) -> pa.DataType:
    """The Arrow type a column of `column_type` is written with (types without parts only)."""
    return _ARROW_TYPES[column_type]


def column_arrow_type(column: ColumnSpec, *, storage: bool = False) -> pa.DataType:
    """The Arrow type of a mapping column, parts included: `decimal128(P, S)`, structs, lists and
    maps (string keys) whose parts are all nullable (Iceberg `optional`).

    `storage`: uuids as their storage type, `binary(16)` (Arrow builds nested values from Python
    only without extension types; cast the array to the column's type after).
    """
    if column.type is ColumnType.DECIMAL:
        return pa.decimal128(column.precision or 1, column.scale or 0)
    if column.type is ColumnType.STRUCT:
        return pa.struct([pa.field(f.name, column_arrow_type(f, storage=storage)) for f in column.fields])
    if column.type is ColumnType.LIST and column.element is not None:
        return pa.list_(column_arrow_type(column.element, storage=storage))
    if column.type is ColumnType.MAP and column.value is not None:
        return pa.map_(pa.string(), column_arrow_type(column.value, storage=storage))
    if column.type is ColumnType.UUID and storage:
        return _UUID_STORAGE
    return _ARROW_TYPES[column.type]


def unbounded_columns(schema: pa.Schema) -> list[str]:
    """The Parquet column paths of `schema`'s uuid leaves, at any depth, written without statistics.

    No reader may misread a uuid bound if there is none: Iceberg Java up to 1.10 compares uuids as
    two signed longs (apache/iceberg#14216), not in the unsigned byte order Parquet and Iceberg's
    spec use for the bounds, so a filter on a uuid skipped files and row groups holding the value.
    Without Parquet statistics there is no row-group min/max to misread, and no bounds in the
    manifest (which are taken from them); the cost is the column's null count.
    """
    return [path for path, dtype in _leaves(schema) if dtype == _ARROW_TYPES[ColumnType.UUID]]


def statistics_columns(schema: pa.Schema) -> bool | list[str]:
    """pyarrow's `write_statistics` for a file of `schema`: every column but `unbounded_columns`."""
    unbounded = unbounded_columns(schema)
    return [p for p, _ in _leaves(schema) if p not in unbounded] if unbounded else True


def _leaves(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    """Each Parquet leaf column of `schema`: its path as pyarrow names it, and its Arrow type."""
    leaves: list[tuple[str, pa.DataType]] = []

    def walk(dtype: pa.DataType, path: str) -> None:
        if pa.types.is_struct(dtype):
            for i in range(dtype.num_fields):
                walk(dtype.field(i).type, f"{path}.{dtype.field(i).name}")
        elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
            walk(dtype.value_type, f"{path}.list.element")
        elif pa.types.is_map(dtype):
            walk(dtype.key_type, f"{path}.key_value.key")
            walk(dtype.item_type, f"{path}.key_value.value")
        else:
            leaves.append((path, dtype))

    for field in schema:
        walk(field.type, field.name)
    return leaves


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
    """`schema` with each column's Iceberg field id as Parquet field-id metadata, and each part of a
    nested column's too (paths as `domain.field_ids` plans them: `customer.name`, `tags.element`,
    `attrs.key`, `attrs.value`); as it is for None. Names and types are unchanged.

    Raises `FieldIdError` naming the table and columns when an id is missing or repeated.
    """
    if field_ids is None:
        return schema
    missing: list[str] = []
    used: list[int] = []
    fields = [_with_id(f, f.name, field_ids, missing, used) for f in schema]
    if missing:
        raise FieldIdError(f"table {table}: the plan gives no field id for column(s) {', '.join(missing)}")
    repeated = sorted({i for i in used if used.count(i) > 1})
    if repeated:
        paths = sorted(path for path, i in field_ids.items() if i in repeated)
        raise FieldIdError(f"table {table}: the plan's field ids repeat id(s) {repeated}: {', '.join(paths)}")
    return pa.schema(fields, metadata=schema.metadata)


def _with_id(
    field: pa.Field, path: str, field_ids: Mapping[str, int], missing: list[str], used: list[int]
) -> pa.Field:
    dtype = field.type
    if pa.types.is_struct(dtype):
        dtype = pa.struct(
            [
                _with_id(dtype.field(i), f"{path}.{dtype.field(i).name}", field_ids, missing, used)
                for i in range(dtype.num_fields)
            ]
        )
    elif pa.types.is_list(dtype):
        dtype = pa.list_(_with_id(dtype.value_field, f"{path}.element", field_ids, missing, used))
    elif pa.types.is_large_list(dtype):
        dtype = pa.large_list(_with_id(dtype.value_field, f"{path}.element", field_ids, missing, used))
    elif pa.types.is_map(dtype):
        dtype = pa.map_(
            _with_id(dtype.key_field, f"{path}.key", field_ids, missing, used),
            _with_id(dtype.item_field, f"{path}.value", field_ids, missing, used),
        )
    field_id = field_ids.get(path)
    if field_id is None:
        missing.append(path)
        return field
    used.append(field_id)
    metadata = {**(field.metadata or {}), FIELD_ID_KEY: str(field_id).encode()}
    return pa.field(field.name, dtype, field.nullable, metadata)


DEAD_LETTER_SCHEMA: pa.Schema = arrow_schema(DEAD_LETTER_FIELDS)
"""The schema of dead-letter files (the same for every topic)."""
