"""The locate step of an upsert run (`domain/upsert.py`), in the run's driver: which data files of the
table version the plan names may hold a changed key.

The driver needs no catalog: the plan carries the table's metadata file (`TableTarget.metadata_location`,
as the launcher knew it), and the Iceberg metadata is read as the spec lays it out - the metadata JSON,
the current snapshot's manifest list and its data manifests (Avro, through `fastavro`) - over the
`ObjectReader` port. A file is a candidate unless its manifest entry rules every changed key out:

- **partition**: a partition field over a key column (`identity`, `bucket[N]`, `truncate[W]`: what an
  upsert table is partitioned by) whose value in the file is none of the changed keys' values;
- **bounds**: a key column whose lower/upper bounds hold none of the changed keys (integers, dates,
  timestamps, strings and binaries; other types are never pruned by bounds).

Only the candidates' key columns are then read, by the run's tasks (`upsert_positions.py`). Each
candidate carries the table's position delete files whose `file_path` bounds (or referenced data
file) hold it: the rows they delete are gone, neither replaced again nor brought back by a rewrite;
and which of them delete rows of it alone (a merge-on-read run replaces those by one merged file).
A table with equality delete files is refused (`UpsertTableError`): no position says which rows
they delete.
"""

from __future__ import annotations

import bisect
import io
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import fastavro
import pyarrow as pa

from kafscale_iceberg.dataplane.partitioning import partition_value, transform_values
from kafscale_iceberg.dataplane.upsert_keys import KeyChanges
from kafscale_iceberg.domain.runs import PartitionField, PartitionTransform, PartitionValue
from kafscale_iceberg.exceptions import UpsertTableError
from kafscale_iceberg.ports import ObjectReader

_ENTRY_DELETED = 2
_DATA_CONTENT = 0
_POSITION_DELETES = 1
_FILE_PATH_FIELD_ID = 2147483546
# Iceberg's single-value serialization of the types bounds prune by: how to decode each.
_SIGNED = {"int": "<i", "long": "<q", "date": "<i", "timestamp": "<q", "timestamptz": "<q"}
_TEXT = {"string"}
_BYTES = {"binary"}


@dataclass(frozen=True)
class TableFile:
    """A data file of the located table version: where it is, its size, and the partition values a
    file written from some of its rows must carry (those of fields its bounds cannot give: buckets)."""

    uri: str
    size_bytes: int
    partition_values: Mapping[str, PartitionValue]
    partition_key: str = ""
    """Its partition spec and values: the files of one key share an Iceberg partition."""
    delete_files: tuple[str, ...] = ()
    """The table's position delete files that may delete rows of it (their path bounds hold it)."""
    own_delete_files: tuple[str, ...] = ()
    """Of `delete_files`, those deleting rows of this file only (its referenced data file): a
    merge-on-read run that deletes more of its rows writes one file of all and removes these."""

    def with_deletes(self, deletes: Sequence[_DeleteFile]) -> TableFile:
        """The file with the delete files of `deletes` that may delete rows of it."""
        mine = [d for d in deletes if d.may_delete_in(self.uri)]
        return replace(
            self,
            delete_files=tuple(d.uri for d in mine),
            own_delete_files=tuple(d.uri for d in mine if d.lowest == d.highest == self.uri),
        )


@dataclass(frozen=True)
class Located:
    """The candidates of a run's changed keys in one table version (its snapshot id; None: no data)."""

    snapshot_id: int | None
    candidates: tuple[TableFile, ...]
    table_files: int
    """How many data files the version has (what pruning started from)."""


@dataclass(frozen=True)
class _SpecField:
    name: str
    source: str | None
    """The key column the field is computed from (None: not a key column, never pruned by)."""
    transform: str


def locate(reader: ObjectReader, metadata_location: str | None, changes: KeyChanges) -> Located:
    """The data files of the table at `metadata_location` that may hold one of `changes`' keys, each
    with the position delete files that may delete rows of it.

    Raises `UpsertTableError` for a table with equality delete files, a key column the table lacks,
    or metadata this reader cannot parse; storage errors of `reader`.
    """
    if metadata_location is None:
        return Located(snapshot_id=None, candidates=(), table_files=0)
    metadata = _json(reader, metadata_location)
    snapshot_id = metadata.get("current-snapshot-id")
    if snapshot_id is None or snapshot_id == -1:
        return Located(snapshot_id=None, candidates=(), table_files=0)
    snapshot = next((s for s in metadata.get("snapshots", ()) if s.get("snapshot-id") == snapshot_id), None)
    if snapshot is None or "manifest-list" not in snapshot:
        raise UpsertTableError(metadata_location, f"snapshot {snapshot_id} lists no manifest list")
    columns = _key_columns(metadata_location, metadata, changes.key)
    specs = _specs(metadata, columns)
    pruning = _Pruning(changes, columns)
    candidates: list[TableFile] = []
    deletes: list[_DeleteFile] = []
    files = 0
    for manifest in _avro(reader, snapshot["manifest-list"]):
        deleting = manifest.get("content", _DATA_CONTENT) != _DATA_CONTENT
        spec_id = manifest.get("partition_spec_id", 0)
        spec = specs.get(spec_id, ())
        for entry in _avro(reader, manifest["manifest_path"]):
            if entry["status"] == _ENTRY_DELETED:
                continue
            data_file = entry["data_file"]
            if deleting:
                deletes.append(_delete_file(metadata_location, snapshot_id, data_file))
                continue
            files += 1
            partition = list((data_file.get("partition") or {}).values())
            if pruning.may_hold(spec, partition, data_file):
                candidates.append(_table_file(spec_id, spec, partition, data_file))
    with_deletes = tuple(c.with_deletes(deletes) for c in candidates)
    return Located(snapshot_id=int(snapshot_id), candidates=with_deletes, table_files=files)


@dataclass(frozen=True)
class _DeleteFile:
    """A position delete file of the table: the range of data file paths it may delete rows of."""

    uri: str
    lowest: str | None
    highest: str | None

    def may_delete_in(self, uri: str) -> bool:
        if self.lowest is None or self.highest is None:
            return True
        return self.lowest <= uri <= self.highest


def _delete_file(location: str, snapshot_id: object, data_file: Mapping[str, Any]) -> _DeleteFile:
    if data_file.get("content") != _POSITION_DELETES:
        raise UpsertTableError(
            location,
            f"snapshot {snapshot_id} has an equality delete file ({data_file['file_path']}): an upsert "
            "run cannot tell which rows it deletes; rewrite the table's data files (Spark's "
            "rewrite_data_files) or land into a new table",
        )
    referenced = data_file.get("referenced_data_file")
    if referenced:
        return _DeleteFile(data_file["file_path"], referenced, referenced)
    lowers, uppers = _bounds(data_file.get("lower_bounds")), _bounds(data_file.get("upper_bounds"))
    low, high = lowers.get(_FILE_PATH_FIELD_ID), uppers.get(_FILE_PATH_FIELD_ID)
    return _DeleteFile(
        data_file["file_path"],
        low.decode("utf-8") if low is not None else None,
        high.decode("utf-8") if high is not None else None,
    )


def _table_file(
    spec_id: int, spec: Sequence[_SpecField], partition: Sequence[Any], data_file: Mapping[str, Any]
) -> TableFile:
    return TableFile(
        uri=data_file["file_path"],
        size_bytes=int(data_file["file_size_in_bytes"]),
        partition_values={
            f.name: partition_value(v)
            for f, v in zip(spec, partition, strict=False)
            if f.transform.startswith("bucket")
        },
        partition_key=f"{spec_id}:{partition!r}",
    )


class _Pruning:
    """The changed keys, per key column: their values (sorted, for bounds) and per partition field
    their transformed values (for partitions)."""

    def __init__(self, changes: KeyChanges, columns: Mapping[str, tuple[int, str]]) -> None:
        self._columns = columns
        self._values = {name: changes.key_values(name) for name in columns}
        self._sorted = {
            name: _comparable(values)
            for name, values in self._values.items()
            if columns[name][1] in _BOUNDABLE
        }
        self._partitions: dict[tuple[str, str], set[Any]] = {}

    def may_hold(
        self, spec: Sequence[_SpecField], partition: Sequence[Any], data_file: Mapping[str, Any]
    ) -> bool:
        for field, value in zip(spec, partition, strict=False):
            # Only ints and strings are compared: other values (dates, times, decimals) come out of
            # the Avro reader as other Python types than the kernels give, so they never prune.
            plain = isinstance(value, int | str) and not isinstance(value, bool)
            allowed = self._partition_values(field) if plain else None
            if allowed is not None and value not in allowed:
                return False
        lowers = _bounds(data_file.get("lower_bounds"))
        uppers = _bounds(data_file.get("upper_bounds"))
        for name, values in self._sorted.items():
            field_id, type_name = self._columns[name]
            lower, upper = lowers.get(field_id), uppers.get(field_id)
            if lower is None or upper is None:
                continue
            low, high = _decode(type_name, lower), _decode(type_name, upper)
            at = bisect.bisect_left(values, low)
            if at == len(values) or values[at] > high:
                return False
        return True

    def _partition_values(self, field: _SpecField) -> set[Any] | None:
        """The values the field takes for the changed keys; None when it is not pruned by."""
        if field.source is None:
            return None
        key = (field.name, field.transform)
        if key not in self._partitions:
            transform = _domain_transform(field)
            if transform is None:
                return None
            values = transform_values(self._values[field.source], transform)
            self._partitions[key] = {partition_value(v) for v in values.to_pylist()}
        return self._partitions[key]


_BOUNDABLE = {*_SIGNED, *_TEXT, *_BYTES}


def _domain_transform(field: _SpecField) -> PartitionField | None:
    """The field as the data plane's partition kernels take it (None: a transform not pruned by)."""
    assert field.source is not None
    if field.transform == "identity":
        return PartitionField(column=field.source, transform=PartitionTransform.IDENTITY)
    for name, transform in (("bucket", PartitionTransform.BUCKET), ("truncate", PartitionTransform.TRUNCATE)):
        if field.transform.startswith(f"{name}[") and field.transform.endswith("]"):
            return PartitionField(
                column=field.source, transform=transform, parameter=int(field.transform[len(name) + 1 : -1])
            )
    return None


def _key_columns(
    location: str, metadata: Mapping[str, Any], key: Sequence[str]
) -> dict[str, tuple[int, str]]:
    """Each key column's field id and Iceberg type name in the table's current schema."""
    schema_id = metadata.get("current-schema-id")
    schemas = metadata.get("schemas") or [metadata.get("schema")]
    schema = next((s for s in schemas if s and s.get("schema-id") == schema_id), schemas[-1])
    fields = {f["name"]: f for f in schema.get("fields", ())}
    missing = [name for name in key if name not in fields]
    if missing:
        raise UpsertTableError(location, f"the table has no key column {missing[0]!r} (upsert.key)")
    return {
        name: (int(fields[name]["id"]), fields[name]["type"] if isinstance(fields[name]["type"], str) else "")
        for name in key
    }


def _specs(
    metadata: Mapping[str, Any], columns: Mapping[str, tuple[int, str]]
) -> dict[int, tuple[_SpecField, ...]]:
    """Each partition spec's fields, in order, with the key column each is computed from."""
    by_id = {field_id: name for name, (field_id, _type) in columns.items()}
    specs = metadata.get("partition-specs") or [{"spec-id": 0, "fields": metadata.get("partition-spec", [])}]
    return {
        int(spec["spec-id"]): tuple(
            _SpecField(name=f["name"], source=by_id.get(f["source-id"]), transform=str(f["transform"]))
            for f in spec.get("fields", ())
        )
        for spec in specs
    }


def _comparable(values: pa.Array) -> list[Any]:
    """The sorted values as Iceberg's bounds decode (dates as days, timestamps as micros)."""
    if pa.types.is_timestamp(values.type):
        values = values.cast(pa.int64())
    elif pa.types.is_date(values.type):
        values = values.cast(pa.int32())
    return sorted(v for v in values.to_pylist() if v is not None)


def _bounds(entries: Any) -> dict[int, bytes]:
    """A manifest's bounds map (Avro: a list of key/value records) by field id."""
    if not entries:
        return {}
    if isinstance(entries, Mapping):
        return {int(k): v for k, v in entries.items()}
    return {int(e["key"]): e["value"] for e in entries}


def _decode(type_name: str, raw: bytes) -> Any:
    if type_name in _SIGNED:
        return struct.unpack(_SIGNED[type_name], raw)[0]
    if type_name in _TEXT:
        return raw.decode("utf-8")
    return raw


def _json(reader: ObjectReader, uri: str) -> Mapping[str, Any]:
    try:
        document = json.loads(reader.read_bytes(uri))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UpsertTableError(uri, f"the table metadata is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise UpsertTableError(uri, "the table metadata is not a JSON object")
    return document


def _avro(reader: ObjectReader, uri: str) -> list[dict[str, Any]]:
    try:
        return list(fastavro.reader(io.BytesIO(reader.read_bytes(uri))))  # type: ignore[arg-type]
    except (ValueError, EOFError) as exc:
        raise UpsertTableError(uri, f"not an Iceberg manifest Avro file: {exc}") from exc
