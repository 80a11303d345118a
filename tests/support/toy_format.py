"""A toy value format, added as a new format is: this module (its decoder and `decoder` factory) plus
one `ValueFormatSpec` line in the registry (`tests/test_value_formats.py` registers it for a test).

A value is `name=value;name=value` text; every field is a string, so a record's columns are strings
named by its fields, and a part without `=` makes the record a dead letter naming it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch, DecodedGroup
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, ConversionSettings


class ToyDecoder:
    """Decodes `name=value;…` values, one group per set of field names (the toy's "schema")."""

    def decode(self, values: Any) -> DecodedBatch:
        """See `ValueDecoder.decode`."""
        by_fields: dict[tuple[str, ...], tuple[list[int], list[dict[str, str]]]] = {}
        errors: dict[int, tuple[str, str]] = {}
        for position, value in enumerate(values.to_pylist()):
            if not value:
                continue
            parts = [part.partition("=") for part in value.decode().split(";")]
            broken = [name for name, equals, _ in parts if not equals]
            if broken:
                errors[position] = ("undecodable", f"toy value part {broken[0]!r} has no '='")
                continue
            record = {name: text for name, _, text in parts}
            positions, records = by_fields.setdefault(tuple(sorted(record)), ([], []))
            positions.append(position)
            records.append(record)
        groups = tuple(
            DecodedGroup(
                positions=pa.array(positions, pa.int64()).to_numpy(),
                records=pa.array(records, pa.struct([(name, pa.string()) for name in fields])),
                columns=tuple(ColumnSpec(name=name, type=ColumnType.STRING) for name in fields),
                label=f"toy fields {', '.join(fields)}",
            )
            for fields, (positions, records) in by_fields.items()
        )
        return DecodedBatch(count=len(values), groups=groups, errors=errors)

    def schemas_of(self, values: Any, offsets: Any, *, partition: int) -> dict[str, tuple[ColumnSpec, ...]]:
        """See `ValueDecoder.schemas_of`: the columns of each set of field names."""
        del offsets, partition
        return {group.label: group.columns for group in self.decode(values).groups}


def decoder(settings: ConversionSettings, schemas: SchemaCache | None, *, part: str) -> ToyDecoder:
    """The toy format's decoder (its `ValueFormatSpec.decoder`)."""
    del settings, schemas, part
    return ToyDecoder()
