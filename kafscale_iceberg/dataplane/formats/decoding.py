"""The projection of decoded records (`decoded.py`'s `DecodedBatch`, what the `ValueDecoder` port in
`ports.py` returns) onto a run's columns (`conform`), and the reads of decoded records by field; see
the package docstring."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane.datetimes import TEMPORAL_TYPES, expected, temporal_column
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch, DecodedGroup
from kafscale_iceberg.dataplane.schemas import column_arrow_type
from kafscale_iceberg.dataplane.values import decimal_of
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType


@dataclass
class DecodedColumns:
    """The run's columns of a decoded batch, in batch order (an `ExtractedColumns`)."""

    arrays: list[pa.Array]
    errors: dict[int, str]
    kinds: dict[int, str]
    documents: list[object] | None
    _present: list[np.ndarray]
    _failed: list[np.ndarray]
    _labels: list[str | None]
    _columns: tuple[ColumnSpec, ...]
    _sources: list[list[pa.Array | None]]
    """Per column, per group of the batch: the group's field of that name (None: it has none)."""
    _groups: tuple[DecodedGroup, ...] = ()

    def describe(self, column: int, row: int) -> str:
        """What row `row`'s value of column `column` was (the value itself, when it did not convert)."""
        label = self._labels[row] or "its schema"
        spec = self._columns[column]
        if not self._present[column][row]:
            return f"missing or null (written with {label})"
        shown = self._shown(column, row)
        if shown is None:
            return f"a value written with {label} that is not a valid {spec.type_name}"
        return f"{shown} (written with {label}) is not a valid {spec.type_name}{expected(spec.type)}"

    def _shown(self, column: int, row: int) -> str | None:
        """Row `row`'s decoded value of `column`, as text of at most 80 characters (None if unknown)."""
        for group, source in zip(self._groups, self._sources[column], strict=True):
            index = int(np.searchsorted(group.positions, row))
            if source is None or index >= len(group.positions) or group.positions[index] != row:
                continue
            scalar = source[index]
            try:  # Arrow formats any year; Python's datetime (in `as_py`) stops at 9999
                temporal = pa.types.is_temporal(scalar.type)
                shown = str(scalar.cast(pa.string())) if temporal else repr(scalar.as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError, ValueError):
                shown = f"a {scalar.type} value Python cannot show"
            return shown if len(shown) <= 80 else shown[:77] + "..."
        return None

    def present(self, column: int) -> np.ndarray:
        """Per row: whether the record's schema had the column and the value was not null."""
        return self._present[column]

    def failed(self, column: int) -> np.ndarray:
        """Per row: whether a present value (or a value inside it) did not convert to the column."""
        return self._failed[column]


def conform(batch: DecodedBatch, columns: Sequence[ColumnSpec]) -> DecodedColumns:
    """Every group projected onto `columns` by name and put back in batch order (see the package
    docstring); records in no group (errors, null values) are null in every column."""
    count = batch.count
    labels: list[str | None] = [None] * count
    for group in batch.groups:
        for position in group.positions.tolist():
            labels[position] = group.label
    arrays: list[pa.Array] = []
    present_masks: list[np.ndarray] = []
    failed_masks: list[np.ndarray] = []
    sources: list[list[pa.Array | None]] = []
    for column in columns:
        target = column_arrow_type(column)
        pieces: list[pa.Array] = []
        order: list[np.ndarray] = []
        present = np.zeros(count, bool)
        failed = np.zeros(count, bool)
        sources.append([])
        for group in batch.groups:
            source = _named_field(group.records, column)
            sources[-1].append(source)
            if source is None:  # its schema lacks the field: the declared default (Avro's resolution)
                pieces.append(default_or_nulls(column, len(group.positions)))
            else:
                converted, bad = conform_array(source, column)
                pieces.append(converted)
                present[group.positions] = np.asarray(source.is_valid().to_numpy(zero_copy_only=False), bool)
                failed[group.positions] = bad
            order.append(group.positions)
        arrays.append(_in_batch_order(pieces, order, count, target))
        present_masks.append(present)
        failed_masks.append(failed)
    errors = {row: message for row, (_kind, message) in batch.errors.items()}
    kinds = {row: kind for row, (kind, _message) in batch.errors.items()}
    masks = (present_masks, failed_masks)
    return DecodedColumns(arrays, errors, kinds, None, *masks, labels, tuple(columns), sources, batch.groups)


def take_decoded(batch: DecodedBatch, positions: Sequence[int], part: str | None = None) -> DecodedBatch:
    """The decoded records of `batch` at `positions`, as a batch of `len(positions)` records: record
    `i` is record `positions[i]` of `batch` (a position in no group, e.g. -1, is in no group here).

    With `part`, each record's struct field `part` instead of the record (a Debezium envelope's
    `after`), with that field's columns; a group whose schema has no such struct is left out. Errors
    are not carried: the caller has dealt with them.
    """
    wanted = {position: index for index, position in enumerate(positions) if position >= 0}
    groups = []
    for group in batch.groups:
        chosen = [(wanted[p], row) for row, p in enumerate(group.positions.tolist()) if p in wanted]
        if not chosen:
            continue
        records: pa.Array = group.records
        columns, label = group.columns, group.label
        if part is not None:
            column = next((c for c in columns if c.name == part and c.type is ColumnType.STRUCT), None)
            taken = _field(group.records, part)
            if column is None or taken is None:
                continue
            records, columns, label = taken, column.fields, f"{label} ({part})"
        chosen.sort()
        groups.append(
            DecodedGroup(
                positions=np.asarray([index for index, _ in chosen], np.int64),
                records=records.take(pa.array(np.asarray([row for _, row in chosen], np.int64))),
                columns=columns,
                label=label,
            )
        )
    return DecodedBatch(count=len(positions), groups=tuple(groups))


def _field(records: pa.StructArray, name: str) -> pa.Array | None:
    struct_type = records.type
    index = struct_type.get_field_index(name)
    if index < 0:
        return None
    child = records.field(index)
    if records.null_count:
        child = pc.if_else(records.is_valid(), child, pa.nulls(len(child), child.type))
    return child


def _named_field(records: pa.StructArray, column: ColumnSpec) -> pa.Array | None:
    """`records`' field for `column`: of its name, else of one of its aliases (a renamed column's
    former name, written by an older schema version)."""
    for name in (column.name, *column.aliases):
        found = _field(records, name)
        if found is not None:
            return found
    return None


def _in_batch_order(
    pieces: list[pa.Array], order: list[np.ndarray], count: int, target: pa.DataType
) -> pa.Array:
    """The groups' pieces as one array of `count` rows, each value at its batch position."""
    covered = sum(len(p) for p in order)
    if covered < count:
        rest = np.setdiff1d(np.arange(count), np.concatenate(order) if order else np.zeros(0, np.int64))
        pieces.append(pa.nulls(len(rest), target))
        order.append(rest)
    if len(pieces) <= 1:
        return pieces[0] if pieces else pa.nulls(0, target)
    joined = pa.concat_arrays([p.cast(target) for p in pieces])
    inverse = np.empty(count, np.int64)
    inverse[np.concatenate(order)] = np.arange(count)
    return joined.take(pa.array(inverse))


def conform_array(source: pa.Array, column: ColumnSpec) -> tuple[pa.Array, np.ndarray]:
    """`source` (typed by a record schema) as `column`'s Arrow type, and per value whether a present
    value (or one inside it) did not convert (it is then null, or holds a null inside)."""
    count = len(source)
    failed = np.zeros(count, bool)
    target = column_arrow_type(column)
    if source.type == target and not holds_temporal(column):
        return source, failed
    if pa.types.is_dictionary(source.type):
        source = source.dictionary_decode()
    valid = np.asarray(source.is_valid().to_numpy(zero_copy_only=False), bool)
    kind = column.type
    if kind is ColumnType.STRUCT:
        if not pa.types.is_struct(source.type):
            return pa.nulls(count, target), valid
        children = []
        for part in column.fields:
            index = next(
                (i for name in (part.name, *part.aliases) if (i := source.type.get_field_index(name)) >= 0),
                -1,
            )
            if index < 0:
                children.append(default_or_nulls(part, count))
                continue
            child, bad = conform_array(source.field(index), part)
            children.append(child)
            failed |= bad & valid
        mask = pa.array(~valid) if not valid.all() else None
        names = [part.name for part in column.fields]
        return pa.StructArray.from_arrays(children, names=names, mask=mask).cast(target), failed
    if kind is ColumnType.LIST and column.element is not None:
        if not (pa.types.is_list(source.type) or pa.types.is_large_list(source.type)):
            return pa.nulls(count, target), valid
        offsets = np.asarray(source.offsets.to_numpy(zero_copy_only=False), np.int64)
        values = source.values
        element, bad = conform_array(values, column.element)
        rows = np.repeat(np.arange(count), np.diff(offsets))
        failed[rows[bad[offsets[0] : offsets[-1]]] if bad.size else rows[:0]] = True
        element = element.slice(0, len(values))
        mask = pa.array(~valid) if not valid.all() else None
        rebuilt = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), element, mask=mask)
        return rebuilt.cast(target), failed
    if kind is ColumnType.MAP and column.value is not None:
        return _conform_map(source, column, valid)
    if kind in TEMPORAL_TYPES:
        # Plain numbers as epoch milliseconds (days), text as JSON's, years 0001-9999: one rule.
        return temporal_column(source, kind, target)
    textual = pa.types.is_string(source.type) or pa.types.is_large_string(source.type)
    if kind is ColumnType.UUID and textual:
        as_bytes, failed = _per_value(source, pa.binary(16), _uuid_bytes)
        return as_bytes.cast(target), failed
    if kind is ColumnType.DECIMAL and textual:
        # Numbers as their exact text (JSON Schema's, read without a float): the one decimal rule.
        precision, scale = column.precision or 1, column.scale or 0
        return _per_value(source, target, lambda text: _fitted(text, precision, scale))
    return _cast_or_per_value(source, target)


def default_or_nulls(column: ColumnSpec, count: int) -> pa.Array:
    """`count` values of a field a record's schema lacks: the column's declared default, else null."""
    target = column_arrow_type(column)
    if column.default is None:
        return pa.nulls(count, target)
    converted, failed = _cast_or_per_value(pa.array([column.default] * count), target)
    return pa.nulls(count, target) if failed.any() else converted


def holds_temporal(column: ColumnSpec) -> bool:
    """Whether `column` is a timestamp or date or has one inside (its values are range-checked)."""
    parts = [*column.fields, column.element, column.value]
    return column.type in TEMPORAL_TYPES or any(holds_temporal(p) for p in parts if p is not None)


def _conform_map(source: pa.Array, column: ColumnSpec, valid: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """A map from an Arrow map, or from a list of `{key, value}` structs (how polars reads Avro maps)."""
    assert column.value is not None
    count = len(source)
    target = column_arrow_type(column)
    if pa.types.is_map(source.type):
        keys, items, offsets = source.keys, source.items, source.offsets
    elif (pa.types.is_list(source.type) or pa.types.is_large_list(source.type)) and pa.types.is_struct(
        source.type.value_type
    ):
        entries = source.values
        key_index = entries.type.get_field_index("key")
        value_index = entries.type.get_field_index("value")
        if key_index < 0 or value_index < 0:
            return pa.nulls(count, target), valid
        keys, items, offsets = entries.field(key_index), entries.field(value_index), source.offsets
    else:
        return pa.nulls(count, target), valid
    converted, bad = conform_array(items, column.value)
    bounds = np.asarray(offsets.to_numpy(zero_copy_only=False), np.int64)
    rows = np.repeat(np.arange(count), np.diff(bounds))
    failed = np.zeros(count, bool)
    if bad.size:
        failed[rows[bad[bounds[0] : bounds[-1]]]] = True
    mask = pa.array(~valid) if not valid.all() else None
    rebuilt = pa.MapArray.from_arrays(
        pa.array(bounds.astype(np.int32)), keys.cast(pa.string()), converted, mask=mask
    )
    return rebuilt.cast(target), failed


def _cast_or_per_value(source: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """A safe cast (no wrap-around, no lost digits), else value by value."""
    try:
        return source.cast(target, safe=True), np.zeros(len(source), bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return _per_value(source, target, None)


def _per_value(
    source: pa.Array, target: pa.DataType, convert: Callable[[object], object] | None
) -> tuple[pa.Array, np.ndarray]:
    """Value by value: what converts is kept, what does not is null and marked (the rare path)."""
    values: list[object] = []
    failed = np.zeros(len(source), bool)
    for row, scalar in enumerate(source):
        if not scalar.is_valid:
            values.append(None)
            continue
        try:
            if convert is not None:
                values.append(pa.scalar(convert(scalar.as_py()), target).as_py())
            else:
                values.append(scalar.cast(target, safe=True).as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError, TypeError):
            values.append(None)
            failed[row] = True
    return pa.array(values, target), failed


def _fitted(text: object, precision: int, scale: int) -> object:
    """`text` as a `decimal(precision, scale)` value exactly (`domain/decimals.py`), else ValueError."""
    fitted = decimal_of(text, precision, scale)
    if fitted is None:
        raise ValueError(f"{text!r} does not fit decimal({precision},{scale})")
    return fitted


def _uuid_bytes(text: object) -> bytes:
    return uuid.UUID(str(text)).bytes


def strings_at(batch: DecodedBatch, path: Sequence[str]) -> tuple[pa.Array, dict[int, str]]:
    """Per record of `batch`, in batch order, the string at `path` (a top-level field, or a path into
    structs) of its record: null where its schema has no such field, the value is null, or the record
    is in no group; and, by position, what a present value there is when it is not a string (a
    number, a struct: never taken for its text, as a route field is not: `dataplane/routing.py`)."""
    pieces: list[pa.Array] = []
    order: list[np.ndarray] = []
    not_strings: dict[int, str] = {}
    for group in batch.groups:
        child: pa.Array | None = group.records
        for name in path:
            child = _field(child, name) if child is not None and pa.types.is_struct(child.type) else None
        if child is not None and pa.types.is_dictionary(child.type):
            child = child.dictionary_decode()
        if child is not None and (pa.types.is_string(child.type) or pa.types.is_large_string(child.type)):
            pieces.append(child.cast(pa.string()))
        else:
            pieces.append(pa.nulls(len(group.positions), pa.string()))
            if child is not None:
                valid = np.asarray(child.is_valid().to_numpy(zero_copy_only=False), bool)
                for position in group.positions[valid].tolist():
                    not_strings[position] = f"a {child.type} value (written with {group.label})"
        order.append(group.positions)
    return _in_batch_order(pieces, order, batch.count, pa.string()), not_strings
