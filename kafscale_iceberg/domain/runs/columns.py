"""The columns a run writes after the base fields, and the table's partition fields."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, JsonValue, model_validator

from kafscale_iceberg.domain.runs.documents import DocumentModel


class TimeColumns(StrEnum):
    """`types.time`: the column type of a schema's time of day (Avro `time-millis`/`time-micros`, Kafka
    Connect `Time`, Debezium `Time`/`MicroTime`) in a table whose columns come from schemas.

    `time`: Iceberg's `time` (exact; read by Trino/Athena, DuckDB, iceberg-rust, pyiceberg, Flink, but
    Spark 3.5 and 4.0 refuse a whole table holding one, apache/iceberg #9006); `long_micros`: a `long`,
    microseconds since midnight; `string`: `HH:MM:SS.ffffff` (fixed width, so it sorts as the time).
    """

    TIME = "time"
    LONG_MICROS = "long_micros"
    STRING = "string"


class ColumnType(StrEnum):
    """Mapping column types, as the KafScale processor config names them."""

    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    FLOAT = "float"
    DOUBLE = "double"
    STRING = "string"
    BINARY = "binary"
    TIMESTAMP = "timestamp"
    DATE = "date"
    # Beyond the Go processor's types (what the Kafka Connect Iceberg sink writes):
    TIMESTAMPTZ = "timestamptz"
    UUID = "uuid"
    TIME = "time"
    """Iceberg `time`: microseconds since midnight, no date, no zone (Avro `time-*`, Connect `Time`)."""
    DECIMAL = "decimal"
    """`decimal(P,S)`: `ColumnSpec.precision` and `.scale`."""
    STRUCT = "struct"
    """`ColumnSpec.fields`."""
    LIST = "list"
    """`ColumnSpec.element`."""
    MAP = "map"
    """String keys; `ColumnSpec.value`."""


NESTED_TYPES = frozenset({ColumnType.STRUCT, ColumnType.LIST, ColumnType.MAP})
DECIMAL_MAX_PRECISION = 38


class PartitionTransform(StrEnum):
    """Iceberg partition transforms this product writes (one value per file for each)."""

    IDENTITY = "identity"
    YEAR = "year"
    MONTH = "month"
    DAY = "day"
    HOUR = "hour"
    BUCKET = "bucket"
    """`bucket[N]`: Iceberg's murmur3 hash of the value, modulo N (`PartitionField.parameter`)."""
    TRUNCATE = "truncate"
    """`truncate[W]`: the value cut to width W (`PartitionField.parameter`)."""


PARAMETRIZED_TRANSFORMS = frozenset({PartitionTransform.BUCKET, PartitionTransform.TRUNCATE})


class ColumnSpec(DocumentModel):
    """One column extracted from the JSON record value, after the eight base fields.

    Nested and parametrized types carry their parts: `decimal` its `precision` and `scale`, `struct`
    its `fields`, `list` its `element`, `map` its `value` (keys are strings). Inside a nested type
    every part is optional (a missing or mistyped inner value is null, and counted).
    """

    name: str
    type: ColumnType
    required: bool = False
    precision: int | None = Field(default=None, ge=1, le=DECIMAL_MAX_PRECISION)
    scale: int | None = Field(default=None, ge=0)
    fields: tuple[ColumnSpec, ...] = ()
    element: ColumnSpec | None = None
    value: ColumnSpec | None = None
    default: JsonValue = Field(default=None, exclude_if=lambda value: value is None)
    """The default a record schema declares for the field (Avro, a scalar), landed for a record written
    with a schema without the field (Avro's schema resolution); None (left out of documents): null."""
    aliases: tuple[str, ...] = Field(default=(), exclude_if=lambda value: not value)
    """Other names the column's values come under in record schemas: an Avro field's `aliases`, and a
    renamed column's former names (`domain/schema_evolution.py`); empty (left out of documents): none."""
    number: int | None = Field(default=None, exclude_if=lambda value: value is None)
    """The field's number in its Protobuf message (a rename keeps it); None (left out): not Protobuf."""

    @model_validator(mode="after")
    def _parts_match_type(self) -> ColumnSpec:
        kind = self.type
        if (kind is ColumnType.DECIMAL) != (self.precision is not None):
            raise ValueError(f"column {self.name!r}: precision is given exactly for decimal columns")
        if self.scale is not None and (self.precision is None or self.scale > self.precision):
            raise ValueError(f"column {self.name!r}: decimal scale must be between 0 and the precision")
        if (kind is ColumnType.STRUCT) != bool(self.fields):
            raise ValueError(f"column {self.name!r}: fields are given exactly for struct columns")
        if (kind is ColumnType.LIST) != (self.element is not None):
            raise ValueError(f"column {self.name!r}: element is given exactly for list columns")
        if (kind is ColumnType.MAP) != (self.value is not None):
            raise ValueError(f"column {self.name!r}: value is given exactly for map columns")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"column {self.name!r}: a struct field is listed twice")
        return self

    @property
    def type_name(self) -> str:
        """The type as written in a mapping: `long`, `decimal(10,2)`, `list<string>`, `struct<a: long>`."""
        if self.type is ColumnType.DECIMAL:
            return f"decimal({self.precision},{self.scale or 0})"
        if self.type is ColumnType.LIST and self.element is not None:
            return f"list<{self.element.type_name}>"
        if self.type is ColumnType.MAP and self.value is not None:
            return f"map<string, {self.value.type_name}>"
        if self.type is ColumnType.STRUCT:
            return "struct<" + ", ".join(f"{f.name}: {f.type_name}" for f in self.fields) + ">"
        return self.type.value


class PartitionField(DocumentModel):
    """One partition field of the target table: `transform(column)`, or `bucket[N]` / `truncate[W]`
    of the column with N or W as `parameter` (given exactly for those two, at least 1)."""

    column: str
    transform: PartitionTransform = PartitionTransform.IDENTITY
    parameter: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _parameter_matches_transform(self) -> PartitionField:
        if (self.transform in PARAMETRIZED_TRANSFORMS) != (self.parameter is not None):
            raise ValueError(
                f"partition field of {self.column!r}: a parameter is given exactly for bucket and truncate"
            )
        return self

    @property
    def iceberg_transform(self) -> str:
        """The transform as Iceberg's metadata writes it: `identity`, `day`, `bucket[16]`, `truncate[4]`."""
        if self.parameter is None:
            return self.transform.value
        return f"{self.transform.value}[{self.parameter}]"
