"""Avro payloads that do not decode with the schema their id names (`dataplane/formats/avro_skip.py`):
each is an `undecodable` dead letter naming the schema id, the field and what is wrong, the group's
other records land exactly, and no reader ever hangs on one.

The oracle is fastavro (an independent reader), record by record, with a check that it used every
byte. Records are written by fastavro with one generated schema and read with another (a
mis-registered id), or damaged on the way (cut, flipped, inserted bytes). Schemas are served over
HTTP by `tests/support/schema_registry.py`, a stand-in for a Confluent registry (none installs
here). A hang (the Rust block reader spins for ever on a block with bytes left over) would be inside
native code, so each decode runs under `hang_limit`, which ends the process: the test fails, the
suite goes on.
"""

from __future__ import annotations

import datetime
import decimal
import io
import itertools
import json
import math
import struct
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.dataplane.formats.avro import (
    AvroDecoder,
    _container_header,
    _normalized,
    _varint,
)
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.domain.avro_schemas import avro_columns
from kafscale_iceberg.domain.runs import RegistrySettings
from tests.support.hang_limit import hang_limit
from tests.support.schema_registry import StandInRegistry
from tests.test_record_decoders import PIZZA_V1, pizza

HANG_SECONDS = 60
"""Far above a decode's time (milliseconds, or a few seconds when numba compiles under load)."""
ORDER_KEY = {
    "type": "record",
    "name": "OrderKey",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}],
}


def _payload(schema: object, record: object) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _decode(registry: StandInRegistry, schema: object, payloads: list[bytes]) -> DecodedBatch:
    """`payloads` framed with the id `schema` has in the registry, decoded (under `hang_limit`)."""
    schema_id = registry.register("orders-value", json.dumps(schema))
    values = [b"\x00" + struct.pack(">I", schema_id) + p for p in payloads]
    decoder = AvroDecoder(SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=registry.url))))
    with hang_limit(HANG_SECONDS):
        return decoder.decode(pa.array(values, pa.binary()))


_BEYOND_PYTHON = ("out of range", "ordinal must be >= 1")
"""What fastavro (Python's `datetime`) says of a date or time before year 1 or after 9999."""
BEYOND_PYTHON = object()
"""A record holding a date or time Python's `datetime` cannot (after year 9999): Iceberg's columns
can, so the block reader lands it, while fastavro (which makes Python values) refuses it."""


def _landed(decoded: DecodedBatch) -> dict[int, Any]:
    """Per position: the record's columns (`BEYOND_PYTHON` for one Python cannot show), or
    `undecodable: <reason>`."""
    landed: dict[int, Any] = {p: f"{kind}: {why}" for p, (kind, why) in decoded.errors.items()}
    for group in decoded.groups:
        for position, record in zip(group.positions.tolist(), group.records, strict=True):
            try:
                landed[position] = record.as_py()
            except (OverflowError, ValueError):  # a date or timestamp beyond Python's
                landed[position] = BEYOND_PYTHON
    return landed


def test_a_record_written_with_another_schema_than_its_id_names_is_a_dead_letter_not_a_hang(
    schema_registry: StandInRegistry,
) -> None:
    # The repro: a pizza read with a `{long id, string region}` schema takes 8 of its 23
    # bytes; before the check, the rest was left in the block, where polars-avro 0.13 spun for ever.
    key = _payload(ORDER_KEY, {"id": 7, "region": "eu"})
    pizzas = [_payload(PIZZA_V1, pizza(n)) for n in (1, 2)]
    landed = _landed(_decode(schema_registry, ORDER_KEY, [key, *pizzas]))
    assert landed[0] == {"id": 7, "region": "eu"}
    for position in (1, 2):
        assert landed[position].startswith("undecodable: ")
        assert "schema id 1" in landed[position]
        assert "15 bytes left over after the record (it ends at byte 8 of 23)" in landed[position]


@pytest.mark.parametrize(
    ("field", "payload", "what"),
    [
        ("string", b"\x04\xc3\x28", "field `a`: a string that is not UTF-8 (at byte 0 of 3)"),
        ("string", b"\x01ab", "field `a`: a negative length (at byte 0 of 3)"),
        ("string", b"\x0aab", "field `a`: the payload ends early (at byte 0 of 3)"),
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, b"\x06", "an index beyond its 2 symbols"),
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, b"\x01", "an index beyond its 2 symbols"),
        (["null", "int"], b"\x06\x02", "field `a`: an index beyond its 2 branches (at byte 0 of 2)"),
        ("boolean", b"\x02", "field `a`: a boolean byte that is neither 0 nor 1"),
        ("int", b"\x80\x80\x80\x80\x80\x01", "field `a`: an int beyond 32 bits"),
        ("long", b"\x80" * 10 + b"\x01", "field `a`: a varint longer than 10 bytes"),
        ({"type": "array", "items": "int"}, b"\x03\x08\x02\x04\x00", "byte size is not what its items take"),
        ({"type": "array", "items": "int"}, b"\xfe\xff\xff\x01", "field `a`: an impossible block count"),
        (  # items of no bytes: a count costs nothing, so it is bounded (`ZERO_WIDTH_ITEMS`)
            {"type": "array", "items": {"type": "fixed", "name": "Z", "size": 0}},
            b"\x80\x80\x80\x80\x80\x02\x00",
            "field `a`: an impossible block count",
        ),
        ({"type": "map", "values": "int"}, b"\x02\x02k", "field `a{}`: the payload ends early"),
        ({"type": "fixed", "name": "F", "size": 4}, b"ab", "field `a`: the payload ends early"),
        (  # 100.00: five digits, beyond decimal(4,2); a reader would put it in the column unchecked
            {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
            b"\x04\x27\x10",
            "field `a`: a decimal of more digits than its precision 4 (at byte 0 of 3)",
        ),
        (
            {"type": "fixed", "name": "D", "size": 2, "logicalType": "decimal", "precision": 4, "scale": 2},
            b"\xd8\xf0",  # -100.00
            "field `a`: a decimal of more digits than its precision 4",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else None,
)
def test_a_value_its_schema_does_not_allow_is_named_in_the_dead_letter(
    field: object, payload: bytes, what: str, schema_registry: StandInRegistry
) -> None:
    # polars-avro, given these in a block, refuses some (invalid UTF-8, an enum index out of range),
    # reads others wrong (a branch index out of range, a boolean byte of 2) or spins (bytes left
    # over): none is ever handed to it.
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": field}]}
    good = _payload(schema, {"a": None if field == ["null", "int"] else _sample(field)})
    landed = _landed(_decode(schema_registry, schema, [good, payload, good]))
    assert landed[0] == landed[2] != landed[1]
    assert landed[1].startswith("undecodable: the payload does not decode with schema id 1: ")
    assert what in landed[1]


def test_a_map_with_a_key_twice_keeps_its_last_value_as_fastavro_does(
    schema_registry: StandInRegistry,
) -> None:
    # The block reader would land both entries; an Iceberg map holds a key once.
    nested = {"type": "map", "values": {"type": "map", "values": "int"}}
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "m", "type": {"type": "map", "values": "int"}}, {"name": "n", "type": nested}],
    }
    twice = b"\x04\x02k\x02\x02k\x04\x00" + b"\x00"  # m: {k: 1, k: 2} in one block, n: {}
    in_two_blocks = b"\x02\x02k\x02\x02\x02k\x04\x00" + b"\x00"  # m: {k: 1}, then {k: 2}
    inner_keys_alike = _payload(schema, {"m": {"k": 1}, "n": {"a": {"k": 1}, "b": {"k": 2}}})
    landed = _landed(_decode(schema_registry, schema, [twice, inner_keys_alike, in_two_blocks]))
    assert landed == {
        0: {"m": [("k", 2)], "n": []},
        1: {"m": [("k", 1)], "n": [("a", [("k", 1)]), ("b", [("k", 2)])]},
        2: {"m": [("k", 2)], "n": []},
    }


@pytest.mark.parametrize(
    ("field", "payload", "read"),
    [
        ("string", b"\x04\xc3\x28", "refused"),  # invalid UTF-8
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, b"\x06", "refused"),  # symbol 3 of 2
        (["null", "int"], b"\x06\x02", [{"a": 1}]),  # branch 3 of 2, read as the int branch
        ("boolean", b"\x02", [{"a": True}]),
    ],
)
def test_what_the_block_reader_does_with_values_the_check_refuses(
    field: object, payload: bytes, read: object
) -> None:
    """polars-avro 0.13 itself, on a block holding exactly the value: it refuses some (raises, which
    `_fast`'s fallback handles) and reads others wrong, so the check must refuse them first. Should
    an upgrade start to hang on one, this fails."""
    import polars_avro

    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": field}]}
    sync = bytes(range(16))
    block = _varint(1) + _varint(len(payload)) + payload + sync
    data = _container_header(json.dumps(schema).encode(), sync) + block
    with hang_limit(HANG_SECONDS):
        try:
            got: object = polars_avro.read_avro(io.BytesIO(data)).to_arrow().to_pylist()
        except Exception:  # any refusal will do (polars_avro raises its AvroError)
            got = "refused"
    assert got == read


def _sample(field: object) -> object:
    samples = {"string": "ok", "boolean": True, "int": 1, "long": 1}
    if isinstance(field, dict) and field.get("logicalType") == "decimal":
        return decimal.Decimal("-99.99")
    if isinstance(field, dict):
        if field["type"] == "array" and field["items"] != "int":
            return [b""]
        return {"enum": "B", "array": [1], "map": {"k": 1}, "fixed": b"abcd"}[field["type"]]
    return samples[str(field)]


# Generated schemas: a record of fields of the types below, nested records, arrays, maps, unions.
_names = itertools.count()


def _named(kind: str, **more: Any) -> dict[str, Any]:
    return {"type": kind, "name": f"T{next(_names)}", **more}


_LEAVES: list[st.SearchStrategy[Any]] = [
    st.sampled_from(["boolean", "int", "long", "float", "double", "string", "bytes"]),
    st.integers(1, 4).map(lambda n: _named("enum", symbols=[f"S{i}" for i in range(n)])),
    st.integers(0, 6).map(lambda n: _named("fixed", size=n)),
    st.just({"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}),
    st.just({"type": "int", "logicalType": "date"}),
    st.just({"type": "long", "logicalType": "timestamp-micros"}),
]


def _record(fields: list[Any]) -> dict[str, Any]:
    return _named("record", fields=[{"name": f"f{n}", "type": t} for n, t in enumerate(fields)])


_TYPES = st.recursive(
    st.one_of(_LEAVES),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(_record),
        inner.map(lambda t: {"type": "array", "items": t}),
        inner.map(lambda t: {"type": "map", "values": t}),
        inner.map(lambda t: ["null", t] if not isinstance(t, list) else t),
        st.just(["null", "int", "string"]),
    ),
    max_leaves=6,
)
_SCHEMAS = st.lists(_TYPES, min_size=1, max_size=5).map(_record)


def _values(schema: Any) -> st.SearchStrategy[Any]:
    """Values fastavro writes with `schema`."""
    if isinstance(schema, list):
        return st.one_of([_values(branch) for branch in schema])
    kind = schema["type"] if isinstance(schema, dict) else schema
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False),
        "string": st.text(max_size=6),
        "bytes": st.binary(max_size=6),
    }
    if isinstance(schema, dict) and schema.get("logicalType") == "decimal":
        return st.decimals(-(10**6), 10**6, places=2, allow_nan=False, allow_infinity=False)
    if isinstance(schema, dict) and schema.get("logicalType") == "date":
        return st.dates(datetime.date(1900, 1, 1), datetime.date(2200, 1, 1))
    if isinstance(schema, dict) and schema.get("logicalType") == "timestamp-micros":
        return st.datetimes(
            datetime.datetime(1970, 1, 1), datetime.datetime(2200, 1, 1), timezones=st.just(datetime.UTC)
        )
    if kind in simple:
        return simple[kind]
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(_values(schema["items"]), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=3), _values(schema["values"]), max_size=3)
    return st.fixed_dictionaries({f["name"]: _values(f["type"]) for f in schema["fields"]})


@st.composite
def _mutated(draw: st.DrawFn, payload: bytes) -> bytes:
    """`payload` with a few bytes cut, flipped, inserted or appended."""
    data = bytearray(payload)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        change = draw(st.sampled_from(["cut", "flip", "insert", "append"]))
        if change == "cut":
            del data[at:]
        elif change == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif change == "append":
            data += draw(st.binary(min_size=1, max_size=4))
        else:
            data[at:at] = bytes([draw(st.integers(0, 255))])
    return bytes(data)


_STRICTER = (
    "a boolean byte that is neither 0 nor 1",  # fastavro takes any nonzero byte as true
    "an index beyond its",  # fastavro takes a negative enum index as one from the end
    "a varint longer than 10 bytes",  # fastavro reads it on, dropping the high bits
    "a block whose byte size is not what its items take",  # fastavro ignores a block's size
    "an impossible block count",  # more items than bytes left; fastavro reads until it runs out
)
"""What the check refuses although fastavro reads it (the Avro specification forbids each)."""


def _expected(schema: Any, payload: bytes) -> Any:
    """What fastavro reads from `payload` with `schema`, as the columns hold it; None when it does not
    read all of it, or a value does not fit its column."""
    stream = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(stream, fastavro.parse_schema(schema), None)
    except (OverflowError, ValueError) as exc:
        beyond = any(why in str(exc) for why in _BEYOND_PYTHON)
        return BEYOND_PYTHON if beyond else None
    except Exception:  # fastavro raises EOFError, ValueError, IndexError, ... on bad bytes
        return None
    if stream.tell() != len(payload):
        return None
    columns = avro_columns(schema, schema_name="generated")
    struct_type = pa.struct([pa.field(c.name, column_arrow_type(c, storage=True)) for c in columns])
    try:
        return pa.array([_normalized(record, columns)], struct_type).to_pylist()[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError):
        return None


def _comparable(value: Any) -> Any:
    """`value` with NaN made equal to itself (a flipped byte may make a double NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    if isinstance(value, decimal.Decimal) and value.is_nan():
        return "NaN"
    return value


def _check(schema: Any, payloads: list[bytes], landed: dict[int, Any]) -> None:
    """Each payload landed as fastavro reads it, or is an `undecodable` dead letter: for one
    fastavro reads, only for a rule fastavro is laxer about (`_STRICTER`)."""
    for position, payload in enumerate(payloads):
        got = landed[position]
        if isinstance(got, str) and any(s in got for s in _STRICTER):
            # Not asked of fastavro: a count of items without bytes would keep it busy for ever.
            assert got.startswith("undecodable: the payload does not decode with schema id "), got
            event("a dead letter fastavro may read")
            continue
        expected = _expected(schema, payload)
        if expected is BEYOND_PYTHON:
            # The block reader lands it, the general path (fastavro) not; and fastavro, stopped at
            # the date, did not see whether the bytes after it are a record's.
            assert got is BEYOND_PYTHON or got.startswith("undecodable: the payload does not decode"), got
            event("a date beyond Python's")
        elif isinstance(got, str):
            assert got.startswith("undecodable: the payload does not decode with schema id "), got
            assert expected is None, (got, expected)
            event("a dead letter")
        else:
            assert expected is not None, (position, got)
            event("landed")
            assert _comparable(got) == _comparable(expected), position


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_record_read_with_another_schema_lands_as_fastavro_reads_it_or_is_a_dead_letter(
    data: st.DataObject, schema_registry: StandInRegistry
) -> None:
    writer, reader = data.draw(_SCHEMAS), data.draw(_SCHEMAS)
    records = data.draw(st.lists(_values(writer), min_size=1, max_size=6))
    payloads = [_payload(writer, r) for r in records]
    _check(reader, payloads, _landed(_decode(schema_registry, reader, payloads)))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_record_lands_as_fastavro_reads_it_or_is_a_dead_letter(
    data: st.DataObject, schema_registry: StandInRegistry
) -> None:
    schema = data.draw(_SCHEMAS)
    records = data.draw(st.lists(_values(schema), min_size=1, max_size=6))
    payloads = [_payload(schema, r) for r in records]
    damaged = [data.draw(_mutated(p)) if data.draw(st.booleans()) else p for p in payloads]
    landed = _landed(_decode(schema_registry, schema, damaged))
    _check(schema, damaged, landed)
    for position, (before, after) in enumerate(zip(payloads, damaged, strict=True)):
        if before == after:
            assert not isinstance(landed[position], str), landed[position]
