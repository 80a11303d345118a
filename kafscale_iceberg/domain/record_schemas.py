"""A record schema as a schema registry holds it (Confluent's REST API: `GET /schemas/ids/{id}`,
`/subjects/{subject}/versions/latest`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchemaReference:
    """A schema another one imports (`references[]`: its import name, subject and version)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    """One registered schema: its id, type (`AVRO`, `PROTOBUF`, `JSON`), text and references."""

    schema_id: int
    schema_type: str
    text: str
    references: tuple[SchemaReference, ...] = ()
    subject: str | None = None
    version: int | None = None

    @property
    def label(self) -> str:
        """How messages name it: `schema id 7` (and its subject when known)."""
        if self.subject is not None:
            return f"schema id {self.schema_id} ({self.subject} v{self.version})"
        return f"schema id {self.schema_id}"
