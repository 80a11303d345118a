"""`value_format: protobuf` with `schema_registry.type: glue`: Protobuf behind the AWS Glue Schema
Registry's header (`glue_wire.py`).

After the header (its payload inflated when compressed) comes the message index, one unsigned varint,
then the message. The index is not Confluent's path: the serializers of awslabs/aws-glue-schema-registry
list every message of the schema's file, nested ones included, sort them by full name and number them
from 0 (`glue_message_names`). Everything after the grouping (parsing, columns, dead letters) is
`ProtobufDecoder`'s. A value without the header is read as `ProtobufDecoder` reads one (the latest
version of `value_subject`, message `value_message`); an index the schema has no message for, or a
malformed one, is a dead letter naming the schema version id.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from kafscale_iceberg.dataplane.formats.frames import Frames
from kafscale_iceberg.dataplane.formats.glue_wire import GLUE_MISSING, glue_frames
from kafscale_iceberg.dataplane.formats.protobuf import (
    Grouped,
    Pieces,
    ProtobufDecoder,
    _assembled,
    _Layout,
    read_varint,
)
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache, no_registry
from kafscale_iceberg.domain.record_schemas import SchemaId
from kafscale_iceberg.domain.runs import ConversionSettings, RegistryType


def glue_message_names(file: Any) -> list[str]:
    """The full names of a file descriptor's messages in the Glue serializers' index order: every
    message, nested ones included, sorted by full name."""
    names: list[str] = []
    queue = list(file.message_types_by_name.values())
    while queue:
        message = queue.pop(0)
        names.append(message.full_name)
        queue.extend(message.nested_types)
    return sorted(names)


class GlueProtobufDecoder(ProtobufDecoder):
    """Decodes Protobuf records behind the Glue header (see the module docstring)."""

    _framed: tuple[pa.Array, Frames] | None = None

    def _layout_of(self, values: pa.Array) -> _Layout:
        """The values' payloads (header off, inflated); a value without the header as it is."""
        frames = glue_frames(values)
        self._framed = (values, frames)
        payloads = list(frames.raw)
        for position in frames.errors:
            payloads[position] = None
        for members in frames.members.values():
            for position, payload in members:
                payloads[position] = payload
        return _Layout.of(pa.array(payloads, pa.binary()))

    def _grouped(self, values: pa.Array, layout: _Layout, errors: dict[int, tuple[str, str]]) -> Grouped:
        framed, self._framed = self._framed, None
        frames = framed[1] if framed is not None and framed[0] is values else glue_frames(values)
        errors.update(frames.errors)
        pieces: Pieces = {}
        unprefixed = np.flatnonzero(frames.present & ~frames.prefixed)
        self._add_unprefixed(
            pieces, errors, unprefixed, layout.starts[unprefixed], frames.first_bytes, GLUE_MISSING
        )
        for version_id, members in frames.members.items():
            by_index: dict[int, tuple[list[int], list[int]]] = {}
            for position, _payload in members:
                try:
                    index, start = read_varint(
                        layout.data, int(layout.starts[position]), int(layout.ends[position]), most_bytes=5
                    )
                except ValueError as exc:
                    errors[position] = (
                        "wire_format",
                        f"schema version id {version_id}: the message index after the Glue header is "
                        f"malformed ({exc})",
                    )
                    continue
                entry = by_index.setdefault(index, ([], []))
                entry[0].append(position)
                entry[1].append(start)
            for index, (positions, starts) in by_index.items():
                where = self._message_name(version_id, index)
                if where is None:
                    for position in positions:
                        errors[position] = (
                            "undecodable",
                            f"schema version id {version_id} has no message at index {index} (the Glue "
                            "serializers number a schema's messages by full name): the record was written "
                            "with another schema",
                        )
                    continue
                self._add_piece(
                    pieces,
                    errors,
                    version_id,
                    where,
                    np.asarray(positions, np.int64),
                    np.asarray(starts, np.int64),
                )
        return _assembled(pieces)

    def _message_name(self, version_id: SchemaId, index: int) -> str | None:
        """The full name of message `index` of the schema (`glue_message_names`), None when it has
        none; "" when the schema itself is unusable (`_add_piece` meets that error and names it)."""
        compiled = self._file(version_id)
        if isinstance(compiled, Exception):
            return ""
        names = glue_message_names(compiled.file)
        return names[index] if 0 <= index < len(names) else None


def decoder(settings: ConversionSettings, schemas: SchemaCache | None, *, part: str) -> ProtobufDecoder:
    """`value_format: protobuf`'s decoder (its `ValueFormatSpec.decoder`): behind Glue's header with a
    Glue registry, Confluent's wire format otherwise (here, not in `protobuf.py`, which this module
    builds on)."""
    glue = schemas is not None and schemas.registry_type is RegistryType.GLUE
    protobuf = GlueProtobufDecoder if glue else ProtobufDecoder
    return protobuf(
        schemas or no_registry("protobuf"),
        subject=settings.value_subject,
        message=settings.value_message,
        columns=[name for c in settings.columns for name in (c.name, *c.aliases)],
        part=part,
    )
