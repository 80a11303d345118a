"""An upsert mapping's records as changes: the keys' new rows, and the keys deleted (`mode: upsert`).

`ChangeReader.read(records)` splits a batch of decoded records into:

- `upserts`: the records whose value is a key's new row - the value itself (`cdc: none`), or a
  Debezium event's `after` (`op` `c`, `r`, `u`) - with `value` replaced by that row for the
  conversion (the row keeps the record's own value: `restore_values`);
- `deletes`: the records deleting a key, with `value` replaced by the key's columns as a JSON object:
  a tombstone (null value, `upsert.delete_on_tombstone`) names its key by the record key - JSON, an
  object holding the key columns, or for a one-column key a bare scalar or its text; a Debezium `d`
  by `before`. A Debezium tombstone follows its `d`, so deleting again is a no-op;
- `rejected`: dead letters with their reason (positions in `upserts`, which carries them with their
  value as it arrived): a tombstone when tombstones do not delete, a record key that names no key,
  a value that is not a Debezium event.

A record key written by Kafka Connect's JsonConverter with schemas (`{"schema", "payload"}`) names
its key by its `payload`; with a registered `value_format` (`avro`), a key with the registry's header
(Confluent's wire format, or the Glue header with `schema_registry.type: glue`: `formats/framing.py`
tells them) is decoded through the registry as a decoded `key_format` key is (Debezium with the Avro
converter), and its fields name the key columns; a key whose schema is not a record (a bare Avro
`"long"` or `"string"`, read as the one field `value`: `dataplane/key_columns.py`) names a key of one
column, as a JSON scalar key does.

With `cdc: debezium` and `value_format: json`, an event inside Kafka Connect's `{"schema", "payload"}`
envelope (a connector's `schemas.enable` flipped mid-stream) is read by its `payload`, as a record key
is: a topic holding both lands whole (its values are the plain events' JSON, the schema unread).
With `cdc: debezium` and a `value_format` other than `json` (`connect_json`: Debezium's default
output, the envelope inside Connect's `{"schema", "payload"}`; `avro` through the registry), the
mapping's decoder reads the envelopes (`dataplane/debezium_envelopes.py`) and the changes carry the
decoded rows: `decoded_upserts` (each upsert's `after`) and `decoded_deletes` (each `d`'s `before`,
and each tombstone's decoded registry-framed key), read by the converter instead of `value`.

Records without their key columns become dead letters in the conversion (the key columns are
required columns). Which change of a key wins is decided per run by the commit (`domain/upsert.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane.conversion import ConvertedRecords, ErrorKind, RecordConverter
from kafscale_iceberg.dataplane.debezium_envelopes import DELETE, UPSERT, envelope_changes
from kafscale_iceberg.dataplane.formats.choice import decoder_for
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
from kafscale_iceberg.dataplane.formats.decoding import take_decoded
from kafscale_iceberg.dataplane.formats.framing import frames_of
from kafscale_iceberg.dataplane.formats.schema_cache import SchemaCache
from kafscale_iceberg.domain.runs import (
    KEY_VALUE_FIELD,
    CdcFormat,
    ConversionSettings,
    RegistryType,
    UpsertSettings,
)
from kafscale_iceberg.ports import ValueDecoder

CDC_ENVELOPE = ErrorKind.CDC_ENVELOPE.value
TOMBSTONE = ErrorKind.TOMBSTONE.value

_DEBEZIUM_WRITES = frozenset({"c", "r", "u"})
_DEBEZIUM_DELETE = "d"


@dataclass(frozen=True)
class Changes:
    """A batch of records as changes (see the module docstring)."""

    upserts: pa.Table
    deletes: pa.Table
    rejected: Mapping[int, tuple[str, str]] = field(default_factory=dict)
    """Position in `upserts` -> (error kind, reason): dead letters as they arrived."""
    decoded_upserts: DecodedBatch | None = None
    """Envelopes a value decoder read: the rows of `upserts` decoded (their `after`)."""
    decoded_deletes: DecodedRecords | None = None
    """The records deleting a key named by a decoded `before` or record key (not in `deletes`)."""


@dataclass(frozen=True)
class DecodedRecords:
    """Records and their values as a decoder read them (record `i` is `batch` position `i`)."""

    records: pa.Table
    batch: DecodedBatch


class ChangeReader:
    """Reads the records of one upsert mapping as changes (`read`).

    `decoder`: the mapping's value decoder (None for `json`), which reads Debezium envelopes;
    `key_decoder`: a registered format's decoder of record keys with the header of `key_header`'s
    registry.
    """

    def __init__(
        self,
        settings: UpsertSettings,
        decoder: ValueDecoder | None = None,
        key_decoder: ValueDecoder | None = None,
        key_header: RegistryType = RegistryType.CONFLUENT,
    ) -> None:
        self._key = settings.key
        self._debezium = settings.cdc is CdcFormat.DEBEZIUM
        self._tombstones_delete = settings.delete_on_tombstone
        self._decode = msgspec.json.Decoder().decode
        self._encode = msgspec.json.Encoder().encode
        self._envelopes = decoder if self._debezium else None
        self._key_decoder = key_decoder if self._tombstones_delete else None
        self._key_header = key_header

    def read(self, records: pa.Table) -> Changes:
        """The batch's changes; never raises for a bad record (it is rejected with its reason)."""
        values = records.column("value").to_pylist()
        keys = records.column("key").to_pylist()
        upsert_rows: list[int] = []
        upsert_values: list[bytes | None] = []
        delete_rows: list[int] = []
        delete_values: list[bytes] = []
        rejected: dict[int, tuple[str, str]] = {}
        decoded_delete_rows: list[int] = []
        envelopes: dict[int, tuple[str, str]] = {}
        envelope_batch = key_batch = None
        if self._envelopes is not None:
            envelope_batch = self._envelopes.decode(records.column("value").combine_chunks())
            envelopes = envelope_changes(envelope_batch)
        wire_keys = set()
        if self._key_decoder is not None:
            tombstone_keys = pa.array(
                [k if not v else None for k, v in zip(keys, values, strict=True)], pa.binary()
            )
            wire_keys = set(np.flatnonzero(frames_of(tombstone_keys, self._key_header).prefixed).tolist())
            if wire_keys:
                masked = [keys[row] if row in wire_keys else None for row in range(len(keys))]
                key_batch = self._key_decoder.decode(pa.array(masked, pa.binary()))

        def reject(row: int, kind: str, reason: str) -> None:
            rejected[len(upsert_rows)] = (kind, reason)
            upsert_rows.append(row)
            upsert_values.append(values[row])

        for row, value in enumerate(values):
            if not value:
                if not self._tombstones_delete:
                    reject(row, TOMBSTONE, "a tombstone (null value) and upsert.delete_on_tombstone is false")
                    continue
                if key_batch is not None and row in wire_keys:
                    failed = key_batch.errors.get(row)
                    if failed is not None:
                        reject(row, TOMBSTONE, f"a tombstone whose record key does not decode: {failed[1]}")
                    else:
                        decoded_delete_rows.append(row)
                    continue
                named, problem = self._record_key(keys[row])
                if named is None:
                    reject(row, TOMBSTONE, f"a tombstone whose record key names no key: {problem}")
                    continue
                delete_rows.append(row)
                delete_values.append(named)
                continue
            if not self._debezium:
                upsert_rows.append(row)
                upsert_values.append(value)
                continue
            if envelope_batch is not None:
                kind, reason = envelopes.get(row, (CDC_ENVELOPE, "the value decoder read nothing of it"))
                if kind == UPSERT:
                    upsert_rows.append(row)
                    upsert_values.append(value)
                elif kind == DELETE:
                    decoded_delete_rows.append(row)
                else:
                    reject(row, kind, reason)
                continue
            kind, change = self._debezium_change(value)
            if kind == "upsert":
                upsert_rows.append(row)
                upsert_values.append(change)
            elif kind == "delete":
                assert change is not None
                delete_rows.append(row)
                delete_values.append(change)
            else:
                reject(row, CDC_ENVELOPE, str(change, "utf-8") if change else "not a Debezium event")
        decoded_upserts = decoded_deletes = None
        if envelope_batch is not None:
            written = [row if envelopes.get(row, ("",))[0] == UPSERT else -1 for row in upsert_rows]
            decoded_upserts = take_decoded(envelope_batch, written, "after")
        if decoded_delete_rows:
            groups: list[DecodedBatch] = []
            if envelope_batch is not None:
                groups.append(take_decoded(envelope_batch, _where(decoded_delete_rows, envelopes), "before"))
            if key_batch is not None:
                taken = take_decoded(key_batch, [r if r in wire_keys else -1 for r in decoded_delete_rows])
                groups.append(_named_by_key(taken, self._key))
            decoded_deletes = DecodedRecords(
                records=records.take(pa.array(np.asarray(decoded_delete_rows, dtype=np.int64))),
                batch=DecodedBatch(
                    count=len(decoded_delete_rows), groups=tuple(g for b in groups for g in b.groups)
                ),
            )
        return Changes(
            upserts=_with_values(records, upsert_rows, upsert_values),
            deletes=_with_values(records, delete_rows, delete_values),
            rejected=rejected,
            decoded_upserts=decoded_upserts,
            decoded_deletes=decoded_deletes,
        )

    def _record_key(self, raw: bytes | None) -> tuple[bytes | None, str]:
        """The key columns a record key names, as a JSON object; else None and why."""
        if not raw:
            return None, "the record key is null"
        try:
            parsed = self._decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            parsed = None
            if len(self._key) == 1:
                try:
                    return self._encode({self._key[0]: raw.decode()}), ""
                except UnicodeDecodeError:
                    return None, "the record key is neither JSON nor text"
            return None, f"the record key is not JSON (a key of {len(self._key)} columns needs an object)"
        if isinstance(parsed, dict) and parsed.keys() == {"schema", "payload"}:
            parsed = parsed["payload"]  # Kafka Connect's JsonConverter with schemas.enable=true
        if isinstance(parsed, dict):
            missing = [name for name in self._key if parsed.get(name) is None]
            if missing:
                return None, f"the record key {_preview(raw)} lacks key column(s) {', '.join(missing)}"
            return self._encode({name: parsed[name] for name in self._key}), ""
        if len(self._key) == 1 and isinstance(parsed, str | int | float | bool):
            return self._encode({self._key[0]: parsed}), ""
        return None, f"the record key {_preview(raw)} is not an object holding {', '.join(self._key)}"

    def _debezium_change(self, raw: bytes) -> tuple[str, bytes | None]:
        """`("upsert", after)`, `("delete", before's key)` or `("reject", reason)` for a Debezium event."""
        try:
            event = self._decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return "reject", b"the value is not JSON, so not a Debezium event"
        if not isinstance(event, dict):
            return "reject", b"the value is not a JSON object, so not a Debezium event"
        if event.keys() == {"schema", "payload"}:  # Connect's JsonConverter, schemas.enable=true
            event = event["payload"]
            if not isinstance(event, dict):
                return "reject", b"a Kafka Connect {schema, payload} envelope whose payload is not an object"
        op = event.get("op")
        if op in _DEBEZIUM_WRITES:
            after = event.get("after")
            if not isinstance(after, dict):
                return "reject", f"Debezium op {op!r} without an 'after' object".encode()
            return "upsert", self._encode(after)
        if op == _DEBEZIUM_DELETE:
            before = event.get("before")
            if not isinstance(before, dict):
                return "reject", b"Debezium op 'd' without a 'before' object (REPLICA IDENTITY?)"
            missing = [name for name in self._key if before.get(name) is None]
            if missing:
                return (
                    "reject",
                    f"Debezium op 'd' whose 'before' lacks key column(s) {', '.join(missing)}".encode(),
                )
            return "delete", self._encode({name: before[name] for name in self._key})
        return "reject", f"not a Debezium event: 'op' is {op!r} (expected c, r, u or d)".encode()


class UpsertConversion:
    """An upsert mapping's batch converted: `ChangeReader`'s upserts with the mapping's converter, its
    deletes with one of the key columns only (`ConvertedRecords.deleted_keys`); every row and dead
    letter keeps the value its record arrived with."""

    def __init__(
        self,
        converter: RecordConverter,
        settings: ConversionSettings,
        *,
        topic: str,
        run_id: str,
        schemas: SchemaCache | None = None,
    ):
        """`schemas`: the task's schema cache (a registered `value_format` needs it)."""
        assert settings.upsert is not None
        key = set(settings.upsert.key)
        key_columns = tuple(c for c in settings.columns if c.name in key)
        key_decoder = None
        if settings.value_format.registered:
            key_format = settings.model_copy(
                update={"value_subject": None, "value_message": None, "columns": key_columns}
            )
            key_decoder = decoder_for(key_format, schemas, part="key")
        key_header = schemas.registry_type if schemas is not None else RegistryType.CONFLUENT
        self._reader = ChangeReader(settings.upsert, decoder_for(settings, schemas), key_decoder, key_header)
        self._converter = converter
        self._keys = RecordConverter(
            topic=topic, run_id=run_id, settings=ConversionSettings(columns=key_columns)
        )

    def convert(self, records: pa.Table, *, partition: int, segment_key: str) -> ConvertedRecords:
        """The batch's rows, deleted keys and dead letters (rejected changes among them)."""
        changes = self._reader.read(records)
        upserts = self._converter.convert(
            changes.upserts,
            partition=partition,
            segment_key=segment_key,
            rejected=changes.rejected,
            decoded=changes.decoded_upserts,
        )
        deletes = [self._keys.convert(changes.deletes, partition=partition, segment_key=segment_key)]
        if changes.decoded_deletes is not None:
            deletes.append(
                self._keys.convert(
                    changes.decoded_deletes.records,
                    partition=partition,
                    segment_key=segment_key,
                    decoded=changes.decoded_deletes.batch,
                )
            )
        dead = pa.concat_tables([restore_values(part.dead_letters, records) for part in (upserts, *deletes)])
        first_invalid = min(
            (part.first_invalid for part in (upserts, *deletes) if part.first_invalid is not None),
            key=lambda invalid: invalid.offset,
            default=None,
        )
        deleted = pa.concat_tables([restore_values(part.rows, records) for part in deletes])
        return ConvertedRecords(
            rows=restore_values(upserts.rows, records),
            dead_letters=dead,
            first_invalid=first_invalid,
            conversion_failures=upserts.conversion_failures,
            failed_rows=upserts.failed_rows,
            deleted_keys=deleted.sort_by("offset") if len(deletes) > 1 else deleted,
        )


def restore_values(rows: pa.Table, records: pa.Table) -> pa.Table:
    """`rows` (converted from `records` by offset, some dropped) with `value` as the records held it
    before `ChangeReader` replaced it: a row carries the base fields of the record that wrote it."""
    if not rows.num_rows:
        return rows
    positions = pc.index_in(rows.column("offset"), value_set=records.column("offset"))
    original = records.column("value").take(positions)
    index = rows.schema.get_field_index("value")
    return rows.set_column(index, rows.schema.field(index), original.cast(rows.schema.field(index).type))


def _named_by_key(batch: DecodedBatch, key: Sequence[str]) -> DecodedBatch:
    """Decoded record keys with a one-column upsert key: a key whose schema is not a record (decoded as
    the one field `KEY_VALUE_FIELD`) names that column."""
    if len(key) != 1 or key[0] == KEY_VALUE_FIELD:
        return batch
    groups = []
    for group in batch.groups:
        if [c.name for c in group.columns] == [KEY_VALUE_FIELD]:
            mask = None if not group.records.null_count else group.records.is_null()
            records = pa.StructArray.from_arrays([group.records.field(0)], names=[key[0]], mask=mask)
            columns = (group.columns[0].model_copy(update={"name": key[0]}),)
            groups.append(dataclasses.replace(group, records=records, columns=columns))
            continue
        groups.append(group)
    return dataclasses.replace(batch, groups=tuple(groups))


def _where(rows: Sequence[int], changes: Mapping[int, tuple[str, str]]) -> list[int]:
    """`rows` with -1 in place of each row that is no Debezium delete."""
    return [row if changes.get(row, ("",))[0] == DELETE else -1 for row in rows]


def _with_values(records: pa.Table, rows: Sequence[int], values: Sequence[bytes | None]) -> pa.Table:
    taken = records.take(pa.array(np.asarray(rows, dtype=np.int64)))
    index = taken.schema.get_field_index("value")
    return taken.set_column(index, taken.schema.field(index), pa.array(values, pa.binary()))


def _preview(raw: bytes, limit: int = 80) -> str:
    text = raw[:limit].decode("utf-8", "replace")
    return repr(text + ("..." if len(raw) > limit else ""))
