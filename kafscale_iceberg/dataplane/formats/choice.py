"""Which decoder reads a mapping's values: by its `value_format` (see the package docstring)."""

from __future__ import annotations

from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache, no_registry
from kafscale_iceberg.domain.runs import ConversionSettings, RegistryType, ValueFormat
from kafscale_iceberg.exceptions import ConfigError
from kafscale_iceberg.ports import ValueDecoder


def decoder_for(
    settings: ConversionSettings, schemas: SchemaCache | None, *, part: str = "value"
) -> ValueDecoder | None:
    """The decoder of `settings.value_format` (None for `json`: `RecordConverter` reads JSON itself).

    `part`: `key` when it decodes keys (`dataplane/key_columns.py` gives it the key's format, subject
    and message as a value's), so dead-letter reasons name `key_subject`.

    A registered format without `schemas` gets a decoder that raises `ConfigError` when it is used
    (a plan is checked before its tasks get a registry). Raises `ConfigError` for a format this
    version does not decode yet.
    """
    value_format = settings.value_format
    if value_format is ValueFormat.JSON:
        return None
    # Each decoder imports its format's libraries (fastavro, polars): only the tasks that read it.
    if value_format is ValueFormat.CONNECT_JSON:
        from kafscale_iceberg.dataplane.formats.connect_json import ConnectJsonDecoder  # noqa: PLC0415

        return ConnectJsonDecoder(part=part)
    if value_format is ValueFormat.AVRO:
        from kafscale_iceberg.dataplane.formats.avro import AvroDecoder  # noqa: PLC0415

        return AvroDecoder(
            schemas or no_registry(value_format.value), subject=settings.value_subject, part=part
        )
    if value_format is ValueFormat.PROTOBUF:
        from kafscale_iceberg.dataplane.formats.protobuf import ProtobufDecoder  # noqa: PLC0415

        protobuf = ProtobufDecoder
        if schemas is not None and schemas.registry_type is RegistryType.GLUE:
            from kafscale_iceberg.dataplane.formats.glue_protobuf import GlueProtobufDecoder  # noqa: PLC0415

            protobuf = GlueProtobufDecoder
        return protobuf(
            schemas or no_registry(value_format.value),
            subject=settings.value_subject,
            message=settings.value_message,
            columns=[c.name for c in settings.columns],
            part=part,
        )
    if value_format is ValueFormat.JSON_SCHEMA:
        from kafscale_iceberg.dataplane.formats.json_schema import JsonSchemaDecoder  # noqa: PLC0415

        return JsonSchemaDecoder(
            schemas or no_registry(value_format.value),
            subject=settings.value_subject,
            columns=settings.columns,
            part=part,
        )
    raise ConfigError("mappings[].value_format", f"{value_format.value} is not decoded yet by this version")
