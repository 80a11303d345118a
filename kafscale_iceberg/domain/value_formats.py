"""The record value formats (`mappings[].value_format`, `.key_format`): each described once, here.

A format is a `ValueFormatSpec`: where its records get their schema (`schema_kind`: none, carried
inline, or named in a registry - from which follow `registered` and `self_described`, so a schemaless
format is never taken for a self-described one), whether `mode: upsert` reads it (`upsert`), whether
keys may be written in it (`key`), whether its schemas define several messages one is chosen from
(`named_message`), and where its decoder is made (`decoder`: `"module:function"`, imported only by
the tasks that read the format, so the config and the launcher load no format library). Every other place
asks the spec: the config's rules (`config/formats.py`), the plan (`domain/runs/plan.py`), the decoder
choice (`dataplane/formats/choice.py`).

**To add a format**: its decoder module under `dataplane/formats/` with a factory
`decoder(settings, schemas, *, part) -> ValueDecoder` (`DecoderFactory`), and one `ValueFormatSpec`
line in `VALUE_FORMATS` below. `tests/test_value_formats.py` checks that every spec answers every
capability and that its decoder factory imports, and lands records through a toy format registered so.

`json` is schemaless JSON, read by `RecordConverter` itself (no decoder). The YAML values and the plan's
JSON are the formats' names; a plan or a config names a format by it (`ValueFormatName`, `KeyFormatName`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema


class SchemaKind(StrEnum):
    """Where a format's records get their schema, which decides where a table's columns can come from."""

    NONE = "none"
    """Schemaless: the columns are listed, read from `schema.registry` or inferred (`json`)."""
    INLINE = "inline"
    """Each record carries its schema (`connect_json`'s envelope)."""
    REGISTRY = "registry"
    """Each record names its schema in a schema registry by id (Confluent's wire format, Glue's header)."""


@dataclass(frozen=True, kw_only=True)
class ValueFormatSpec:
    """One value format and what it can do (see the module docstring); every answer is required."""

    name: str
    """The YAML and plan value (`mappings[].value_format: <name>`)."""
    schema_kind: SchemaKind
    upsert: bool
    """`mode: upsert` reads it (Debezium's and the plain change events, `domain/runs/upsert.py`)."""
    key: bool
    """Record keys may be written in it (`key_format`), read into the `key_` columns."""
    named_message: bool
    """Its schemas define several record types, `value_message` / `key_message` naming the one read."""
    decoder: str | None
    """`"module:function"` making its `ValueDecoder` (`dataplane/formats/choice.DecoderFactory`);
    None: read as JSON by `RecordConverter`."""

    @property
    def registered(self) -> bool:
        """Its values name a schema in a schema registry (`value_subject` reads values without one)."""
        return self.schema_kind is SchemaKind.REGISTRY

    @property
    def self_described(self) -> bool:
        """Its records carry or name their own schema, so the table's columns can come from them."""
        return self.schema_kind is not SchemaKind.NONE

    def __str__(self) -> str:
        return self.name


# fmt: off
JSON = ValueFormatSpec(
    name="json", schema_kind=SchemaKind.NONE, upsert=True, key=True, named_message=False, decoder=None,
)
CONNECT_JSON = ValueFormatSpec(
    name="connect_json", schema_kind=SchemaKind.INLINE, upsert=True, key=True, named_message=False,
    decoder="kafscale_iceberg.dataplane.formats.connect_json:decoder",
)
AVRO = ValueFormatSpec(
    name="avro", schema_kind=SchemaKind.REGISTRY, upsert=True, key=True, named_message=False,
    decoder="kafscale_iceberg.dataplane.formats.avro:decoder",
)
PROTOBUF = ValueFormatSpec(  # Glue's header or Confluent's, by the registry: glue_protobuf.py chooses
    name="protobuf", schema_kind=SchemaKind.REGISTRY, upsert=False, key=True, named_message=True,
    decoder="kafscale_iceberg.dataplane.formats.glue_protobuf:decoder",
)
JSON_SCHEMA = ValueFormatSpec(
    name="json_schema", schema_kind=SchemaKind.REGISTRY, upsert=False, key=True, named_message=False,
    decoder="kafscale_iceberg.dataplane.formats.json_schema:decoder",
)
# fmt: on

VALUE_FORMATS: dict[str, ValueFormatSpec] = {
    spec.name: spec for spec in (JSON, CONNECT_JSON, AVRO, PROTOBUF, JSON_SCHEMA)
}
"""The registry: every format this version reads, by name (one line a format)."""

RAW_KEYS = "raw"
"""`key_format: raw` (the default): keys are kept as bytes, not decoded (`None` in a plan or config)."""


def value_format_named(name: str) -> ValueFormatSpec:
    """The format called `name`. Raises `ValueError` naming the known formats when there is none."""
    spec = VALUE_FORMATS.get(name.strip().lower())
    if spec is None:
        raise ValueError(
            f"unknown value format {name!r} (this version reads {', '.join(sorted(VALUE_FORMATS))})"
        )
    return spec


def names_of(capable: Callable[[ValueFormatSpec], bool]) -> str:
    """`a, b, c`: the names of the registry's formats for which `capable` holds (for messages)."""
    return ", ".join(sorted(name for name, spec in VALUE_FORMATS.items() if capable(spec)))


def _value_format(value: object) -> ValueFormatSpec:
    if isinstance(value, ValueFormatSpec):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a value format is named by a string (one of {', '.join(sorted(VALUE_FORMATS))})")
    return value_format_named(value)


def _key_format(value: object) -> ValueFormatSpec | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == RAW_KEYS):
        return None
    spec = _value_format(value)
    if not spec.key:
        known = names_of(lambda s: s.key)
        raise ValueError(f"keys cannot be written in {spec.name} (key formats: {RAW_KEYS}, {known})")
    return spec


def key_format_name(spec: ValueFormatSpec | None) -> str:
    """The YAML and plan value of a key format (`raw` for None)."""
    return RAW_KEYS if spec is None else spec.name


ValueFormatName = Annotated[
    ValueFormatSpec,
    PlainValidator(_value_format),
    PlainSerializer(lambda spec: spec.name, return_type=str),
    WithJsonSchema({"type": "string"}),
]
"""A pydantic field holding a format, written and read as its name."""
KeyFormatName = Annotated[
    ValueFormatSpec | None,
    PlainValidator(_key_format),
    PlainSerializer(key_format_name, return_type=str),
    WithJsonSchema({"type": "string"}),
]
"""A pydantic field holding a key format (None: `raw`), written and read as its name."""
