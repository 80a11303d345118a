"""What every decoder of registry-framed records shares, whatever the payload's format.

A value with the registry's header (the Confluent wire prefix, or the AWS Glue Schema Registry's:
`framing.py`) names its schema id; a value without it is read with the mapping's `value_subject`'s
latest schema, or is a `wire_format` dead letter naming the first byte. Each schema id is looked up
once (through the task's `SchemaCache`) and compiled once per decoder; an id the registry does not
have is `unknown_schema`, a schema the format cannot read `undecodable`, both naming the id. A
format's decoder subclasses `RegisteredSchemaDecoder` and says how to compile a registered schema
(`_compile_registered`) and how to read a group's payloads (`decode`).
"""

from __future__ import annotations

import contextlib
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.formats.decoded import CompiledRecordSchema
from kafscale_iceberg.dataplane.formats.frames import Frames
from kafscale_iceberg.dataplane.formats.framing import frames_of
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.record_schemas import RegisteredSchema, SchemaId, schema_id_label
from kafscale_iceberg.domain.runs import ColumnSpec
from kafscale_iceberg.exceptions import RecordSchemaError, SchemaNotFoundError

CompiledT = TypeVar("CompiledT", bound=CompiledRecordSchema)

Errors = dict[int, tuple[str, str]]
"""Dead letters of a batch: position → (kind, reason)."""


class RegisteredSchemaDecoder(Generic[CompiledT]):
    """The wire prefix, `value_subject` and the per-id schema look-up of a registry format."""

    def __init__(self, schemas: SchemaCache, *, subject: str | None = None, part: str = "value") -> None:
        """`part`: what is decoded (`value`, or `key` for a decoded `key_format`), as messages name
        its config keys."""
        self._part = part
        self._schemas = schemas
        self._subject = subject
        self._compiled: dict[SchemaId, CompiledT | RecordSchemaError | SchemaNotFoundError] = {}

    def _compile_registered(self, registered: RegisteredSchema) -> CompiledT:
        """`registered` ready to read with; raises `RecordSchemaError` when the format cannot."""
        raise NotImplementedError

    def _frames(self, values: pa.Array) -> Frames:
        """`values` framed by the header of the registry's records (Confluent's or Glue's)."""
        return frames_of(values, self._schemas.registry_type)

    def _members_by_schema(self, frames: Frames, errors: Errors) -> dict[SchemaId, list[tuple[int, bytes]]]:
        """The present values by schema id, as `(position, payload)`; values that name no schema (no
        header and no `value_subject`, a subject the registry does not have, an unusable header) go
        to `errors`."""
        errors.update(frames.errors)
        by_schema = {schema_id: list(members) for schema_id, members in frames.members.items()}
        for position in np.flatnonzero(frames.present & ~frames.prefixed).tolist():
            if self._subject is None:
                errors[position] = (
                    "wire_format",
                    f"{frames.missing_reason(position)}: set the mapping's {self._part}_subject to read "
                    f"such {self._part}s with its latest schema, or fix the producer's serializer",
                )
                continue
            try:
                latest = self._schemas.latest(self._subject)
            except SchemaNotFoundError as exc:
                errors[position] = ("unknown_schema", f"{self._part}_subject {self._subject!r}: {exc}")
                continue
            by_schema.setdefault(latest.schema_id, []).append((position, frames.raw[position]))  # type: ignore[arg-type]
        for members in by_schema.values():
            members.sort(key=lambda member: member[0])
        return by_schema

    def _compiled_groups(
        self, values: pa.Array, errors: Errors
    ) -> list[tuple[CompiledT, list[tuple[int, bytes]]]]:
        """Each schema of the batch compiled, with its members `(position, payload)` in position
        order; values that name no usable schema go to `errors` with the reason."""
        groups = []
        for schema_id, members in self._members_by_schema(self._frames(values), errors).items():
            compiled = self._compiled_for(schema_id, members, errors)
            if compiled is not None:
                groups.append((compiled, members))
        return groups

    def _compiled_for(
        self, schema_id: SchemaId, members: list[tuple[int, bytes]], errors: Errors
    ) -> CompiledT | None:
        """The compiled schema `schema_id`, or None with every member dead-lettered naming why."""
        compiled = self._compile(schema_id)
        if isinstance(compiled, RecordSchemaError | SchemaNotFoundError):
            kind = "unknown_schema" if isinstance(compiled, SchemaNotFoundError) else "undecodable"
            for position, _payload in members:
                errors[position] = (kind, f"{schema_id_label(schema_id)}: {compiled}")
            return None
        return compiled

    def schemas_of(
        self, values: pa.Array, offsets: pa.Array, *, partition: int
    ) -> dict[str, tuple[ColumnSpec, ...]]:
        """See `ValueDecoder.schemas_of`: keyed by schema id (`schema_order_key`); payloads are not read."""
        frames = self._frames(values)
        ids = set(frames.members)
        if self._subject is not None and (frames.present & ~frames.prefixed).any():
            # A missing subject: the conversion stage dead-letters those records, naming it.
            with contextlib.suppress(SchemaNotFoundError):
                ids.add(self._schemas.latest(self._subject).schema_id)
        found: dict[str, tuple[ColumnSpec, ...]] = {}
        for schema_id in ids:
            compiled = self._compile(schema_id)
            if not isinstance(compiled, Exception):
                found[self._schemas.order_key(schema_id)] = compiled.columns
        return dict(sorted(found.items()))

    def _compile(self, schema_id: SchemaId) -> CompiledT | RecordSchemaError | SchemaNotFoundError:
        found = self._compiled.get(schema_id)
        if found is not None:
            return found
        try:
            registered = self._schemas.by_id(schema_id)
        except SchemaNotFoundError as exc:
            return exc  # not cached here: the task's SchemaCache remembers the 404
        try:
            found = self._compile_registered(registered)
        except (RecordSchemaError, SchemaNotFoundError) as exc:  # a reference the registry lacks
            found = exc
        self._compiled[schema_id] = found
        return found
