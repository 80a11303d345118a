"""The compiled Protobuf wire reader (`dataplane/formats/protobuf_wire.py`): what it lands in a
message's flat columns is what the protobuf runtime parses from the same bytes, and what the runtime
refuses it never lands.

The oracle is the protobuf runtime (upb or pure Python, an independent parser): payloads are made by
its serializer, several messages back to back (the wire's merge rules: the last scalar wins, a message
seen twice merges, a oneof member clears the others), with unknown fields, and then mutated (bytes
cut, flipped, inserted). Schemas are served over HTTP by `tests/support/schema_registry.py`, a
stand-in for a Confluent registry (none installs here).
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafscale_iceberg.adapters.confluent_registry import ConfluentSchemaRegistry
from kafscale_iceberg.dataplane.formats.protobuf import ProtobufDecoder
from kafscale_iceberg.dataplane.formats.protobuf_reader import WireReader
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.domain.protobuf_schemas import protobuf_columns
from kafscale_iceberg.domain.runs import RegistrySettings
from tests.support.protobuf_messages import compile_proto, message
from tests.support.schema_registry import StandInRegistry

FLAT_PROTO = """
syntax = "proto3";
package flat;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Size { SIZE_UNSPECIFIED = 0; SMALL = 1; LARGE = 2; }

message Note { string text = 1; repeated sint32 marks = 2; map<string, Note2> more = 3; }
message Note2 { bytes blob = 1; fixed64 sum = 2; }

message Flat {
  int32 i32 = 1;
  int64 i64 = 2;
  uint32 u32 = 3;
  uint64 u64 = 4;
  sint32 s32 = 5;
  sint64 s64 = 6;
  fixed32 f32 = 7;
  fixed64 f64 = 8;
  sfixed32 sf32 = 9;
  sfixed64 sf64 = 10;
  float fl = 11;
  double db = 12;
  bool flag = 13;
  string text = 14;
  bytes blob = 15;
  Size size = 16;
  google.protobuf.Timestamp at = 17;
  google.protobuf.Int64Value w_i64 = 18;
  google.protobuf.StringValue w_text = 19;
  google.protobuf.FloatValue w_fl = 20;
  google.protobuf.BoolValue w_flag = 21;
  google.protobuf.UInt64Value w_u64 = 22;
  google.protobuf.BytesValue w_blob = 23;
  optional int64 maybe = 24;
  oneof pick { string p_text = 25; google.protobuf.Timestamp p_at = 26; int32 p_num = 27; Note p_note = 28; }
  repeated double scores = 29;
  Note note = 30;
  map<string, int64> counts = 31;
  int32 far = 100000;
}
"""
POOL = compile_proto({"flat.proto": FLAT_PROTO})
Flat = message(POOL, "flat.Flat")
Note = message(POOL, "flat.Note")
UNREAD = ("p_note", "scores", "note", "counts")
READ = tuple(f.name for f in Flat.DESCRIPTOR.fields if f.name not in UNREAD)

_TIMESTAMPS = st.tuples(
    st.integers(-62_135_596_800, 253_402_300_799), st.integers(0, 999_999_999)
) | st.tuples(
    st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1)
)  # valid ones, and sometimes what the wire can carry but is no Timestamp
_FLOAT32 = st.floats(width=32, allow_nan=False)
_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "i32": st.integers(-(2**31), 2**31 - 1),
    "i64": st.integers(-(2**63), 2**63 - 1),
    "u32": st.integers(0, 2**32 - 1),
    "u64": st.integers(0, 2**64 - 1),
    "s32": st.integers(-(2**31), 2**31 - 1),
    "s64": st.integers(-(2**63), 2**63 - 1),
    "f32": st.integers(0, 2**32 - 1),
    "f64": st.integers(0, 2**64 - 1),
    "sf32": st.integers(-(2**31), 2**31 - 1),
    "sf64": st.integers(-(2**63), 2**63 - 1),
    "fl": _FLOAT32,
    "db": st.floats(allow_nan=False),
    "flag": st.booleans(),
    "text": st.text(max_size=8),
    "blob": st.binary(max_size=8),
    "size": st.integers(0, 4),  # 3 and 4 are numbers the enum does not name
    "maybe": st.integers(-(2**63), 2**63 - 1),
    "far": st.integers(-(2**31), 2**31 - 1),
    "p_text": st.text(max_size=8),
    "p_num": st.integers(-(2**31), 2**31 - 1),
}
_WRAPPED: dict[str, st.SearchStrategy[Any]] = {
    "w_i64": st.integers(-(2**63), 2**63 - 1),
    "w_text": st.text(max_size=8),
    "w_fl": _FLOAT32,
    "w_flag": st.booleans(),
    "w_u64": st.integers(0, 2**64 - 1),
    "w_blob": st.binary(max_size=8),
}


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    """One message's bytes with some of its fields set (a oneof's members in a random order)."""
    made = Flat()
    names = draw(st.lists(st.sampled_from([*_SCALARS, *_WRAPPED, "at", "p_at", *UNREAD])))
    for name in names:
        if name in _SCALARS:
            setattr(made, name, draw(_SCALARS[name]))
        elif name in _WRAPPED:
            getattr(made, name).value = draw(_WRAPPED[name])
        elif name in ("at", "p_at"):
            seconds, nanos = draw(_TIMESTAMPS)
            getattr(made, name).seconds = seconds
            getattr(made, name).nanos = nanos
        elif name == "p_note":
            made.p_note.text = draw(st.text(max_size=4))
        elif name == "scores":
            made.scores.extend(draw(st.lists(st.floats(allow_nan=False), max_size=3)))
        elif name == "note":
            made.note.marks.extend(draw(st.lists(st.integers(-100, 100), max_size=3)))
            made.note.more["k"].sum = draw(st.integers(0, 2**64 - 1))
        else:
            made.counts["n"] = draw(st.integers(-5, 5))
    data = made.SerializeToString()
    if draw(st.booleans()):  # fields this schema does not know: every wire type
        data += b"\xf8\x07\x96\x01" + b"\xf9\x07" + bytes(8) + b"\xfa\x07\x02hi" + b"\xfd\x07" + bytes(4)
    return data


@st.composite
def mutated(draw: st.DrawFn, payload: bytes) -> bytes:
    """`payload` with a few bytes cut, flipped or inserted (the runtime decides what still parses)."""
    data = bytearray(payload)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        change = draw(st.sampled_from(["cut", "flip", "insert"]))
        if change == "cut":
            del data[at:]
        elif change == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        else:
            data[at:at] = bytes([draw(st.integers(0, 255))])
    return bytes(data)


def _expected(parsed: Any) -> dict[str, Any] | str:
    """The read columns of a message the runtime parsed, as the mapping table writes them down; or
    `undecodable` when the runtime refuses a read Timestamp's value (`ToDatetime`)."""
    row: dict[str, Any] = {}
    for name in READ:
        field = parsed.DESCRIPTOR.fields_by_name[name]
        if field.has_presence and not parsed.HasField(name):
            row[name] = None
            continue
        value = getattr(parsed, name)
        if field.enum_type is not None:
            named = field.enum_type.values_by_number.get(value)
            value = named.name if named is not None else str(value)
        elif field.message_type is not None and field.message_type.name == "Timestamp":
            try:
                value = value.ToDatetime(tzinfo=datetime.UTC)
            except ValueError:
                return "undecodable"
        elif field.message_type is not None:
            value = value.value
        if name in ("u64", "f64", "w_u64"):
            value = decimal.Decimal(value)
        row[name] = value
    return row


_DECODERS: dict[str, tuple[ProtobufDecoder, int]] = {}


def _decoder(registry: StandInRegistry) -> tuple[ProtobufDecoder, int]:
    """One decoder per registry (a test's examples share it: the schema is compiled once)."""
    if registry.url not in _DECODERS:
        schema_id = registry.register("flat-value", FLAT_PROTO, schema_type="PROTOBUF")
        cache = SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=registry.url)))
        _DECODERS[registry.url] = (ProtobufDecoder(cache, columns=READ), schema_id)
    return _DECODERS[registry.url]


def _wire(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + b"\x02\x04" + payload  # message index [2]: Flat


def _landed(decoder: ProtobufDecoder, schema_id: int, payloads: list[bytes]) -> dict[int, Any]:
    """Per position: the record's read columns, or the dead-letter kind it became."""
    decoded = decoder.decode(pa.array([_wire(schema_id, p) for p in payloads], pa.binary()))
    landed: dict[int, Any] = {position: kind for position, (kind, _) in decoded.errors.items()}
    for group in decoded.groups:
        landed.update(zip(group.positions.tolist(), group.records.to_pylist(), strict=True))
    return landed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(st.lists(messages(), min_size=1, max_size=3), min_size=1, max_size=8))
def test_what_lands_is_what_the_runtime_parses_from_messages_written_back_to_back(
    batch: list[list[bytes]], schema_registry: StandInRegistry
) -> None:
    decoder, schema_id = _decoder(schema_registry)
    payloads = [b"".join(parts) for parts in batch]
    landed = _landed(decoder, schema_id, payloads)
    assert landed == {n: _expected(Flat.FromString(p)) for n, p in enumerate(payloads)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_payload_lands_only_as_the_runtime_reads_it_else_is_undecodable(
    data: st.DataObject, schema_registry: StandInRegistry
) -> None:
    decoder, schema_id = _decoder(schema_registry)
    payloads = [data.draw(mutated(data.draw(messages()))) for _ in range(4)]
    expected: dict[int, Any] = {}
    for n, payload in enumerate(payloads):
        try:
            expected[n] = _expected(Flat.FromString(payload))
        except (DecodeError, UnicodeDecodeError):  # the pure-Python runtime's for bad UTF-8
            expected[n] = "undecodable"
    assert _landed(decoder, schema_id, payloads) == expected


def _timestamped(seconds: int, nanos: int = 0) -> bytes:
    made = Flat(i32=7)
    made.at.seconds = seconds
    made.at.nanos = nanos
    return made.SerializeToString()


@pytest.mark.parametrize("columns", [READ, ("i32", "at", "note")], ids=["wire reader", "runtime"])
def test_a_timestamp_the_runtime_refuses_is_undecodable_naming_the_field_never_wrapped(
    columns: tuple[str, ...], schema_registry: StandInRegistry
) -> None:
    schema_id = schema_registry.register("flat-value", FLAT_PROTO, schema_type="PROTOBUF")
    cache = SchemaCache(ConfluentSchemaRegistry(RegistrySettings(url=schema_registry.url)))
    decoder = ProtobufDecoder(cache, columns=columns)
    payloads = [
        _timestamped(253_402_300_799, 999_999_999),  # 9999-12-31T23:59:59.999999999Z: the last valid one
        _timestamped(2**62),  # its microseconds would wrap around int64 to 0
        _timestamped(-(2**36) - 1),  # before year 1
        _timestamped(0, -1),  # negative nanos
        _timestamped(-62_135_596_800),  # 0001-01-01T00:00:00Z: the first valid one
        b"\x8a\x01\x0b\x08\xff\xff\xff\xff\xff\xfd\xff\xff\xff\x01",  # the full suite's: -68719476737 s
    ]
    decoded = decoder.decode(pa.array([_wire(schema_id, p) for p in payloads], pa.binary()))
    assert sorted(decoded.errors) == [1, 2, 3, 5]
    for kind, why in decoded.errors.values():
        assert kind == "undecodable"
        assert "field at: Timestamp is not valid" in why
    (group,) = decoded.groups
    assert group.positions.tolist() == [0, 4]
    assert group.records.field("at").cast(pa.int64()).to_pylist() == [
        253_402_300_799_999_999,
        -62_135_596_800_000_000,
    ]


def _reader(columns: tuple[str, ...]) -> WireReader | None:
    given = {c.name: c for c in protobuf_columns(Flat.DESCRIPTOR, schema_name="flat")}
    struct_type = pa.struct([pa.field(name, column_arrow_type(given[name])) for name in columns])
    return WireReader.of(Flat.DESCRIPTOR, struct_type)


def _settled(payloads: list[bytes]) -> list[bool]:
    reader = _reader(("i32", "text"))
    assert reader is not None
    data = b"".join(payloads)
    ends = np.cumsum([len(p) for p in payloads])
    settled, _records = reader.read(np.frombuffer(data, np.uint8), ends - [len(p) for p in payloads], ends)
    return settled.tolist()


def test_the_wire_reader_settles_well_formed_messages_itself() -> None:
    good = Flat(i32=-1, text="ok", note=Note(marks=[1, -2])).SerializeToString()
    assert _settled([good, b"", good + good]) == [True, True, True]


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\x0a\x02\xc3\x28", "invalid UTF-8 in a string field (field 1 has the wrong wire type too)"),
        (b"\x72\x02\xc3\x28", "invalid UTF-8 in the read string field `text`"),
        (b"\x08\x80", "a varint cut short"),
        (b"\xf2\x01\x03\x0a\x01", "a nested message (`note`) cut short inside"),
        (b"\x0b\x0c", "a group, which the walker leaves to the runtime"),
    ],
)
def test_a_record_the_walker_is_not_sure_of_is_left_to_the_runtime(payload: bytes, why: str) -> None:
    assert _settled([payload]) == [False], why


def test_a_message_with_a_read_column_that_is_not_flat_is_read_by_the_runtime() -> None:
    assert _reader(("i32", "at", "w_text", "size", "far")) is not None
    for column in ("scores", "note", "counts", "p_note"):
        assert _reader(("i32", column)) is None, column
