"""Which decoder reads a mapping's values: the one its `value_format`'s spec names
(`domain/value_formats.py`)."""

from __future__ import annotations

import importlib
from typing import Protocol, cast

from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.runs import ConversionSettings
from kafscale_iceberg.domain.value_formats import ValueFormatSpec
from kafscale_iceberg.exceptions import ConfigError
from kafscale_iceberg.ports import ValueDecoder


class DecoderFactory(Protocol):
    """A format module's `decoder` function: the decoder of `settings.value_format`, reading its
    schemas through `schemas` (None: no registry; a registered format's decoder then raises
    `ConfigError` when it is used)."""

    def __call__(
        self, settings: ConversionSettings, schemas: SchemaCache | None, *, part: str
    ) -> ValueDecoder: ...


def decoder_for(
    settings: ConversionSettings, schemas: SchemaCache | None, *, part: str = "value"
) -> ValueDecoder | None:
    """The decoder of `settings.value_format` (None for a format read as JSON by `RecordConverter`).

    `part`: `key` when it decodes keys (`dataplane/key_columns.py` gives it the key's format, subject
    and message as a value's), so dead-letter reasons name `key_subject`.

    A registered format without `schemas` gets a decoder that raises `ConfigError` when it is used
    (a plan is checked before its tasks get a registry). Raises `ConfigError` when the format's
    decoder cannot be imported.
    """
    factory = decoder_factory(settings.value_format)
    return None if factory is None else factory(settings, schemas, part=part)


def decoder_factory(spec: ValueFormatSpec) -> DecoderFactory | None:
    """The function making `spec`'s decoders, imported now (each format module imports its own
    libraries - fastavro, polars, protobuf - so only the tasks reading the format load them)."""
    if spec.decoder is None:
        return None
    module_name, _, function = spec.decoder.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            "mappings[].value_format",
            f"{spec.name}'s decoder {spec.decoder!r} cannot be loaded ({exc}): install the format's "
            "libraries, or fix its line in domain/value_formats.py",
        ) from exc
    return cast("DecoderFactory", factory)
