"""Property: for generated Avro record schemas and records, what the decoder lands in the columns the
schema gives is what the producer wrote (fast block reader and fastavro paths alike).

Records are encoded by fastavro (an independent writer) with the Confluent wire prefix; the schemas are
served over HTTP by `tests/support/schema_registry.py`, a stand-in for a Confluent registry.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import struct
from typing import Any

import fastavro
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.dataplane.formats.avro import AvroDecoder
from kafscale_iceberg.dataplane.formats.decoding import conform
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.avro_schemas import avro_columns
from kafscale_iceberg.domain.runs import RegistrySettings
from tests.support.schema_registry import StandInRegistry

_INT32 = st.integers(-(2**31), 2**31 - 1)
_TEXT = st.text(max_size=12)
# (Avro type, values of it as the producer writes them, the value as the column holds it)
_FIELD_TYPES: list[tuple[object, st.SearchStrategy[Any]]] = [
    ("boolean", st.booleans()),
    ("int", _INT32),
    ("long", st.integers(-(2**63), 2**63 - 1)),
    ("double", st.floats(allow_nan=False)),
    ("string", _TEXT),
    ("bytes", st.binary(max_size=12)),
    (["null", "string"], st.none() | _TEXT),
    ({"type": "array", "items": "int"}, st.lists(_INT32, max_size=4)),
    ({"type": "map", "values": "long"}, st.dictionaries(_TEXT, st.integers(-(2**40), 2**40), max_size=3)),
    (
        {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3},
        st.decimals(min_value=-(10**8), max_value=10**8, places=3, allow_nan=False, allow_infinity=False),
    ),
    ({"type": "int", "logicalType": "date"}, st.dates(datetime.date(1900, 1, 1), datetime.date(2200, 1, 1))),
    (
        {"type": "long", "logicalType": "timestamp-micros"},
        st.datetimes(
            datetime.datetime(1970, 1, 1), datetime.datetime(2200, 1, 1), timezones=st.just(datetime.UTC)
        ),
    ),
    (["null", "int", "string"], st.none() | _INT32 | _TEXT),
]


@st.composite
def schemas_and_records(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    chosen = draw(st.lists(st.sampled_from(range(len(_FIELD_TYPES))), min_size=1, max_size=6))
    fields = [{"name": f"f{n}", "type": _FIELD_TYPES[kind][0]} for n, kind in enumerate(chosen)]
    schema = {"type": "record", "name": "Generated", "fields": fields}
    record = st.fixed_dictionaries({f"f{n}": _FIELD_TYPES[kind][1] for n, kind in enumerate(chosen)})
    return schema, draw(st.lists(record, min_size=1, max_size=40))


def _expected(value: object) -> object:
    """A written value as the column reads it back (maps as key/value pairs, a union as its struct)."""
    if isinstance(value, dict):
        return list(value.items())
    return value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(generated=schemas_and_records())
def test_generated_records_round_trip_through_their_columns(
    generated: tuple[dict[str, Any], list[dict[str, Any]]], schema_registry: StandInRegistry
) -> None:
    schema, records = generated
    schema_id = schema_registry.register("generated-value", json.dumps(schema))
    parsed = fastavro.parse_schema(schema)
    values = []
    for record in records:
        out = io.BytesIO()
        out.write(b"\x00" + struct.pack(">I", schema_id))
        fastavro.schemaless_writer(out, parsed, record)
        values.append(out.getvalue())
    cache = SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=schema_registry.url)))
    decoded = AvroDecoder(cache).decode(pa.array(values, pa.binary()))
    assert decoded.errors == {}
    columns = avro_columns(schema, schema_name="generated")
    got = conform(decoded, columns)
    for index, (column, array, field) in enumerate(zip(columns, got.arrays, schema["fields"], strict=True)):
        expected = [record[field["name"]] for record in records]
        if isinstance(field["type"], list) and len(field["type"]) == 3:  # the general union: a struct
            expected = [
                None
                if v is None
                else {"int": v if isinstance(v, int) else None, "string": v if isinstance(v, str) else None}
                for v in expected
            ]
        elif isinstance(field["type"], dict) and field["type"].get("type") == "map":
            expected = [_expected(v) for v in expected]
        if column.type_name.startswith("decimal"):
            expected = [decimal.Decimal(v).quantize(decimal.Decimal("0.001")) for v in expected]
        assert array.to_pylist() == expected, column.name
        assert not got.failed(index).any()
