"""Debezium change events read from records a value decoder decoded (`mode: upsert`, `upsert.cdc:
debezium` with `value_format: connect_json` - Debezium's default JsonConverter output, the envelope
inside Kafka Connect's `{"schema", "payload"}` - or `avro` through the schema registry).

The decoder (`dataplane/formats/`) has already read each envelope by its own schema, so `op`,
`before` and `after` are fields of the decoded struct: nothing is parsed twice, and `after`'s values
keep their schema's types (a Connect `Decimal`, `Timestamp` or Avro logical type lands as it does in
an append table). `envelope_changes` says per record what it is:

- `op` `c`, `r` or `u` with an `after` row: the key's new row (`take_decoded(batch, …, "after")`);
- `op` `d` with a `before` row: its key is deleted (`take_decoded(batch, …, "before")`: the key
  columns are read from it by name, a `before` without them is a `required_column` dead letter);
- anything else a dead letter: the decoder's own reason (`wire_format`, `undecodable`,
  `unknown_schema`, `invalid_json`), or `cdc_envelope` for a schema that is not a Debezium envelope,
  another `op`, or a missing `after`/`before`.

Tombstones (null values) are in no group: `ChangeReader` deletes by their record key.
"""

from __future__ import annotations

import pyarrow as pa

from kafscale_iceberg.dataplane.conversion import ErrorKind
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
from kafscale_iceberg.domain.runs import ColumnType

UPSERT = "upsert"
DELETE = "delete"
_WRITES = frozenset({"c", "r", "u"})


def envelope_changes(batch: DecodedBatch) -> dict[int, tuple[str, str]]:
    """Per decoded or failed position of `batch`: `(UPSERT, "")`, `(DELETE, "")`, or a dead letter's
    `(error kind, reason)`."""
    changes: dict[int, tuple[str, str]] = dict(batch.errors)
    for group in batch.groups:
        structs = {c.name for c in group.columns if c.type is ColumnType.STRUCT}
        positions = group.positions.tolist()
        names = set(group.records.type.names) if pa.types.is_struct(group.records.type) else set()
        if "op" not in names or not {"before", "after"} <= structs:
            reason = (
                f"not a Debezium event: {group.label} has no 'op', 'before' and 'after' fields (is "
                "upsert.cdc right for this topic?)"
            )
            changes.update((p, (ErrorKind.CDC_ENVELOPE.value, reason)) for p in positions)
            continue
        ops = group.records.field("op").to_pylist()
        after = _valid(group.records, "after")
        before = _valid(group.records, "before")
        for row, position in enumerate(positions):
            op = ops[row]
            if op in _WRITES:
                changes[position] = (
                    (UPSERT, "") if after[row] else _envelope(f"Debezium op {op!r} without an 'after' row")
                )
            elif op == "d":
                changes[position] = (
                    (DELETE, "")
                    if before[row]
                    else _envelope("Debezium op 'd' without a 'before' row (REPLICA IDENTITY?)")
                )
            else:
                changes[position] = _envelope(f"not a Debezium event: 'op' is {op!r} (expected c, r, u or d)")
    return changes


def _envelope(reason: str) -> tuple[str, str]:
    return ErrorKind.CDC_ENVELOPE.value, reason


def _valid(records: pa.StructArray, name: str) -> list[bool]:
    """Per record: whether it holds its field `name` (the record and the field not null)."""
    field = records.field(name)
    valid = field.is_valid()
    if records.null_count:
        valid = pa.compute.and_(valid, records.is_valid())
    return [bool(v) for v in valid.to_pylist()]
