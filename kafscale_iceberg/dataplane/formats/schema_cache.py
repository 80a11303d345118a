"""The schemas a task's decoders read records with, by id: at most one registry look-up per schema id
(and per subject) per task, a missing schema remembered as missing.

Tasks see only this cache; the registry behind it is a `RecordSchemaRegistry` port (adapters:
`adapters/confluent_registry.py`). What each decoder derives from a schema (a parsed Avro schema, its
columns) is kept beside it (`derived`), so that is done once per id too.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from kafscale_iceberg.domain.record_schemas import RegisteredSchema, SchemaId
from kafscale_iceberg.domain.runs import RegistrySettings, RegistryType
from kafscale_iceberg.exceptions import ConfigError, SchemaNotFoundError
from kafscale_iceberg.ports import RecordSchemaRegistry

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class SchemaCache:
    """Schemas by id and subject for one task (not shared between threads).

    `registry_type` says which header the records read through it carry (`framing.py`): a Confluent
    registry's ids are integers, a Glue registry's schema version ids UUIDs (text)."""

    def __init__(
        self, registry: RecordSchemaRegistry, registry_type: RegistryType = RegistryType.CONFLUENT
    ) -> None:
        self._registry = registry
        self.registry_type = registry_type
        self._by_id: dict[SchemaId, RegisteredSchema | SchemaNotFoundError] = {}
        self._latest: dict[str, RegisteredSchema | SchemaNotFoundError] = {}
        self._versions: dict[tuple[str, int], RegisteredSchema | SchemaNotFoundError] = {}
        self._derived: dict[tuple[str, SchemaId], object] = {}
        self.lookups = 0
        """Registry calls made (what tests and logs check: per id per task at most)."""

    def by_id(self, schema_id: SchemaId) -> RegisteredSchema:
        """The schema of `schema_id`. Raises `SchemaNotFoundError` (the registry said 404; asked once)
        or `RegistryUnavailableError` (not remembered: the run fails transiently)."""
        return self._looked_up(self._by_id, schema_id, self._registry.schema_by_id)

    def latest(self, subject: str) -> RegisteredSchema:
        """The subject's latest schema (once per task; errors as `by_id`)."""
        found = self._looked_up(self._latest, subject, self._registry.latest_schema)
        self._by_id.setdefault(found.schema_id, found)
        return found

    def _looked_up(
        self,
        known: dict[K, RegisteredSchema | SchemaNotFoundError],
        key: K,
        fetch: Callable[[K], RegisteredSchema],
    ) -> RegisteredSchema:
        """`known[key]`, fetched (and a 404 remembered) on first use."""
        found = known.get(key)
        if found is None:
            self.lookups += 1
            try:
                found = fetch(key)
            except SchemaNotFoundError as exc:
                found = exc
            known[key] = found
        if isinstance(found, SchemaNotFoundError):
            raise found
        return found

    def version(self, subject: str, version: int) -> RegisteredSchema:
        """A subject's version (what a reference names; once per task; errors as `by_id`)."""
        key = (subject, version)
        found = self._versions.get(key)
        if found is None:
            self.lookups += 1
            try:
                found = self._registry.schema_version(subject, version)
            except SchemaNotFoundError as exc:
                found = exc
            self._versions[key] = found
        if isinstance(found, SchemaNotFoundError):
            raise found
        return found

    def order_key(self, schema_id: SchemaId) -> str:
        """A key that sorts a subject's older schemas first (what `ValueDecoder.schemas_of` keys by):
        a Confluent id (ids grow as schemas are registered), a Glue schema's version number."""
        if isinstance(schema_id, int):
            return f"id:{schema_id:010d}"
        found = self.by_id(schema_id)
        return f"version:{found.subject}:{found.version or 0:010d}:{schema_id}"

    def derived(self, kind: str, schema: RegisteredSchema, make: Callable[[RegisteredSchema], T]) -> T:
        """What `make` derives from `schema` (e.g. `("avro", id)` -> its parsed form), made once."""
        key = (kind, schema.schema_id)
        if key not in self._derived:
            self._derived[key] = make(schema)
        return self._derived[key]  # type: ignore[return-value]


class _NoRegistry:
    """The registry of a task given none: every look-up is a configuration error."""

    def __init__(self, value_format: str) -> None:
        self._value_format = value_format

    def schema_by_id(self, schema_id: SchemaId) -> RegisteredSchema:
        raise ConfigError(
            "schema_registry", f"value_format {self._value_format} reads schemas from a registry: set its url"
        )

    def latest_schema(self, subject: str) -> RegisteredSchema:
        return self.schema_by_id(0)

    def schema_version(self, subject: str, version: int) -> RegisteredSchema:
        return self.schema_by_id(0)


def no_registry(value_format: str) -> SchemaCache:
    """A cache whose every look-up raises `ConfigError` naming `schema_registry` (no registry given)."""
    return SchemaCache(_NoRegistry(value_format))


def task_schemas(
    registry: RecordSchemaRegistry | None, settings: RegistrySettings | None
) -> SchemaCache | None:
    """A task's cache over `registry` (None without one), for records framed as `settings.type` says."""
    if registry is None:
        return None
    return SchemaCache(registry, settings.type if settings is not None else RegistryType.CONFLUENT)
