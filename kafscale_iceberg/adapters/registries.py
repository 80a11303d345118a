"""The schema registry a run reads record schemas from, by `schema_registry.type`: a Confluent-compatible
registry (`confluent_registry.py`) or the AWS Glue Schema Registry (`glue_registry.py`)."""

from __future__ import annotations

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry, RegistryCredentials
from kafscale_iceberg.domain.runs import RegistrySettings, RegistryType
from kafscale_iceberg.ports import RecordSchemaRegistry


def record_schema_registry(
    settings: RegistrySettings, credentials: RegistryCredentials | None = None
) -> RecordSchemaRegistry:
    """The `RecordSchemaRegistry` of `settings` (`credentials`: a Confluent registry's; a Glue
    registry is reached with the AWS credential chain)."""
    if settings.type is RegistryType.GLUE:
        from kafscale_iceberg.adapters.glue_registry import GlueSchemaRegistry  # noqa: PLC0415

        return GlueSchemaRegistry(settings)
    return ConfluentSchemaRegistry(settings, credentials)
