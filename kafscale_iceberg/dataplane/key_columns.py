"""A decoded `key_format`: the record keys read into the mapping's `key_` columns.

With `key_format` other than `raw`, a column of `schema.columns` named `key_<field>`
(`KEY_COLUMN_PREFIX`) holds the decoded key's field `<field>` (at the top level of the key's record,
message or object); the other columns come from the value, and the binary `key` base column stays.
Keys are read exactly as values of that format are: the same decoders (`dataplane/formats/`, with the
mapping's `key_subject`/`key_message` where a value would use `value_subject`/`value_message`), the
same projection onto the columns by name (`formats/decoding.conform`) or, for `json`, the same JSON
column readers, so a key's column converts, is counted when it does not, and is required exactly as
a value's. With a self-described `value_format` and the columns from the records' schemas
(`schema.source: none`), the observation stage adds each key schema's top-level fields as `key_`
columns (`key_schemas`), which evolve as the value's do; a value field named `key_…` is then left
out (`without_key_columns`).

A key whose schema is not a record (an Avro `"string"` or `"long"`, a JSON Schema `{"type":
"string"}`, a Connect envelope with a primitive schema) is read as a record of the one field `value`
(`KEY_VALUE_FIELD`), so it lands in the column `key_value`, listed or from its schemas; a `json` key
that is a scalar or an array (`"order-7"`, `42`) lands in a listed `key_value` column too (without
one it is a dead letter saying it is not an object). Key fields named like base fields are columns
too (`key_offset`). A null or empty key leaves every `key_` column null (a required one makes the
record a `required_column` dead letter). A key that does not decode is a dead letter of the same
kinds as a value (`wire_format`, `unknown_schema`, `undecodable`, `invalid_json`), its reason
starting with `record key:` (strict mode: the run fails naming it).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import pyarrow as pa

from kafscale_iceberg.dataplane.columns import ColumnScanner, ExtractedColumns, parse_columns, scannable
from kafscale_iceberg.dataplane.formats.choice import decoder_for
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.runs import KEY_COLUMN_PREFIX, KEY_VALUE_FIELD, ColumnSpec, ConversionSettings
from kafscale_iceberg.ports import ValueDecoder


class KeyColumnReader:
    """Reads a batch's keys into the mapping's `key_` columns (see the module docstring)."""

    def __init__(self, settings: ConversionSettings, schemas: SchemaCache | None) -> None:
        """Raises `ConfigError` when `settings.key_format` is `raw` or has no decoder."""
        key_format = settings.key_format
        self.columns: tuple[ColumnSpec, ...] = settings.key_columns
        self._fields = tuple(
            c.model_copy(update={"name": c.name.removeprefix(KEY_COLUMN_PREFIX)}) for c in self.columns
        )
        # The key read as a value of its format would be (a copy: no validator runs on it).
        as_value = settings.model_copy(
            update={
                "value_format": key_format,
                "value_subject": settings.key_subject,
                "value_message": settings.key_message,
                "columns": self._fields,
            }
        )
        self._decoder = decoder_for(as_value, schemas, part="key")
        scanned = self._decoder is None and all(scannable(c) for c in self._fields)
        self._scanner = ColumnScanner(self._fields) if scanned else None
        self._whole_json = self._decoder is None and any(f.name == KEY_VALUE_FIELD for f in self._fields)

    def read(self, keys: pa.Array) -> tuple[ExtractedColumns, Mapping[int, str]]:
        """The `key_` columns of `keys` in batch order (an `ExtractedColumns` whose errors name the
        keys that do not decode), and the dead-letter kind of each such key (empty: `invalid_json`)."""
        if self._decoder is not None:
            decoded = conform(self._decoder.decode(keys), self._fields)
            return decoded, decoded.kinds
        if self._whole_json:
            keys = _json_scalars_wrapped(keys)
        if self._scanner is not None:
            return self._scanner.scan(keys), {}
        return parse_columns(keys, self._fields, documents=False), {}


def _json_scalars_wrapped(keys: pa.Array) -> pa.Array:
    """JSON keys that are not objects (scalars, arrays) as `{"value": key}`; objects, keys that are not
    JSON (a dead letter naming their own text) and null keys as they are."""
    wrapped: list[bytes | None] = []
    for key in keys.to_pylist():
        if key and key.lstrip()[:1] not in (b"{", b""):
            try:
                msgspec.json.decode(key)
            except msgspec.DecodeError:
                wrapped.append(key)
                continue
            wrapped.append(b'{"' + KEY_VALUE_FIELD.encode() + b'":' + key + b"}")
            continue
        wrapped.append(key)
    return pa.array(wrapped, pa.binary())


def key_decoder_for(settings: ConversionSettings, schemas: SchemaCache | None) -> ValueDecoder | None:
    """The decoder of a mapping's decoded keys whose columns come from their schemas (None: keys
    `raw`, or `json`, which names no schema)."""
    key_format = settings.key_format
    if key_format is None or not key_format.self_described:
        return None
    as_value = settings.model_copy(
        update={
            "value_format": key_format,
            "value_subject": settings.key_subject,
            "value_message": settings.key_message,
            "columns": (),
        }
    )
    return decoder_for(as_value, schemas, part="key")


def key_schemas(
    decoder: ValueDecoder, keys: pa.Array, offsets: pa.Array, *, partition: int
) -> dict[str, tuple[ColumnSpec, ...]]:
    """The columns of each schema `keys` were written with, as `key_<field>` columns, keyed
    `key:<schema>` (after the values' schemas)."""
    found = decoder.schemas_of(keys, offsets, partition=partition)
    return {
        f"key:{schema}": tuple(c.model_copy(update={"name": f"{KEY_COLUMN_PREFIX}{c.name}"}) for c in columns)
        for schema, columns in found.items()
    }


def without_key_columns(found: Mapping[str, tuple[ColumnSpec, ...]]) -> dict[str, tuple[ColumnSpec, ...]]:
    """Value schemas' columns less those named `key_…` (the keys' columns with a decoded key)."""
    return {
        schema: tuple(c for c in columns if not c.name.startswith(KEY_COLUMN_PREFIX))
        for schema, columns in found.items()
    }
