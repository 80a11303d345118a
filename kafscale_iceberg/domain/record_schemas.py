"""A record schema as a schema registry holds it (Confluent's REST API: `GET /schemas/ids/{id}`,
`/subjects/{subject}/versions/latest`; the AWS Glue Schema Registry's `GetSchemaVersion`)."""

from __future__ import annotations

from dataclasses import dataclass

SchemaId = int | str
"""What a record's header names its schema by: a Confluent registry's integer id, or the AWS Glue
Schema Registry's schema version id (a UUID, as text)."""


def schema_id_label(schema_id: SchemaId) -> str:
    """How messages name a schema id: `schema id 7`, or `schema version id 6f1c…` (Glue)."""
    if isinstance(schema_id, str):
        return f"schema version id {schema_id}"
    return f"schema id {schema_id}"


@dataclass(frozen=True)
class SchemaReference:
    """A schema another one imports (`references[]`: its import name, subject and version)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    """One registered schema: its id, type (`AVRO`, `PROTOBUF`, `JSON`), text and references; for
    Glue, `subject` is the schema's name and `version` its version number."""

    schema_id: SchemaId
    schema_type: str
    text: str
    references: tuple[SchemaReference, ...] = ()
    subject: str | None = None
    version: int | None = None

    @property
    def label(self) -> str:
        """How messages name it: `schema id 7` (and its subject when known)."""
        if self.subject is not None:
            return f"{schema_id_label(self.schema_id)} ({self.subject} v{self.version})"
        return schema_id_label(self.schema_id)
