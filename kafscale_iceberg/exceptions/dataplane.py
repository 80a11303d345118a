"""Inside the Spark job: a record, a mapping or a plan the data plane cannot use (also `ValueError`s)."""

from __future__ import annotations

from kafscale_iceberg.exceptions.base import KafscaleIcebergError


class EnvelopeError(KafscaleIcebergError, ValueError):
    """An LFS envelope that cannot be used: not JSON of the envelope's shape, or a required field missing."""


class PartitioningError(KafscaleIcebergError, ValueError):
    """A partition field names a column the table lacks, or a transform its type does not allow."""


class InvalidJsonSchemaError(KafscaleIcebergError, ValueError):
    """The plan's JSON Schema is not a valid schema for its own meta-schema."""


class FieldIdError(KafscaleIcebergError, ValueError):
    """The plan's field ids do not cover the columns of a file, or give one id twice."""


class RecordSchemaError(KafscaleIcebergError, ValueError):
    """A record schema (Avro, a Kafka Connect envelope's, ...) cannot be turned into columns: a recursive
    type, a decimal wider than 38 digits, a schema that does not parse. The message names the schema
    (id or subject) and the part at fault."""


class ColumnRenameError(RecordSchemaError):
    """A record schema renames a column (Avro `aliases`, the same Protobuf field number) to a name
    another column of the table already has (in some case): refused, never merged into that column.
    Terminal until the schema or the table changes."""

    def __init__(self, column: str, new_name: str, clash: str) -> None:
        self.column = column
        self.new_name = new_name
        self.clash = clash
        super().__init__(
            f"a record schema renames column {column!r} to {new_name!r}, but the table already has a "
            f"column {clash!r}: rename or drop {clash!r} in the table (ALTER TABLE ... RENAME COLUMN), or "
            f"give the field another name in the schema; until then its records are not converted"
        )
