"""A routed mapping's converted rows split by destination table (`mappings[].route`).

The route field is read with the same column machinery as mapping columns (the compiled scanner for
a top-level field, the per-record path for a dotted path into objects), as a `string` column, so a
number or an object is seen as "present but not a string", never matched by its text. The split is
vectorised: the values are dictionary-encoded, each *distinct* value is looked up once
(`domain.routing`'s rules), and the rows are taken per table with Arrow kernels.

A mapping with a self-described `value_format` (`avro`, `protobuf`, `json_schema`, `connect_json`)
routes by the field of its *decoded* records (`formats/decoding.strings_at`, through the mapping's
decoder, or a batch the caller decoded already): a string field routes, a field of another type
(an `int`, a record) is `route_invalid`, a field the record's schema lacks or a null is
missing; a value that does not decode is the decoder's dead letter (`wire_format`, `undecodable`,
`unknown_schema`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale_iceberg.dataplane.columns import ColumnScanner, ExtractedColumns, parse_columns
from kafscale_iceberg.dataplane.conversion import ErrorKind, dead_letter_rows
from kafscale_iceberg.dataplane.formats.decoded import DecodedBatch
from kafscale_iceberg.dataplane.formats.decoding import strings_at
from kafscale_iceberg.domain.routing import ROUTE_VALUE_RULE, route_path, template_identifier
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RoutePlan, TableTarget
from kafscale_iceberg.ports import ValueDecoder

UNROUTED = -1
INVALID = -2


@dataclass(frozen=True)
class RoutedRows:
    """Rows of one routed batch: per destination table its rows (and their positions in the batch),
    and the dead letters of the records no table took."""

    tables: tuple[tuple[TableTarget, pa.Table, np.ndarray], ...]
    dead_letters: pa.Table


class RecordRouter:
    """Splits a routed mapping's rows by table; one per task and mapping (caches value lookups)."""

    def __init__(self, route: RoutePlan, *, run_id: str, decoder: ValueDecoder | None = None) -> None:
        """`decoder`: the mapping's value decoder (a self-described `value_format`; None for `json`)."""
        self._route = route
        self._run_id = run_id
        self._decoder = decoder
        path = route_path(route.field)
        self._path = path
        spec = ColumnSpec(name=path[-1], type=ColumnType.STRING)
        for part in reversed(path[:-1]):
            spec = ColumnSpec(name=part, type=ColumnType.STRUCT, fields=(spec,))
        self._spec = spec
        self._depth = len(path) - 1
        self._scanner = ColumnScanner([spec]) if self._depth == 0 else None
        self._targets: list[TableTarget] = []
        self._index: dict[str, int] = {}
        self._lookups: dict[str, tuple[int, str]] = {}

    def reuses(self, columns: tuple[ColumnSpec, ...]) -> bool:
        """Whether the route field is a top-level `string` column of the mapping: its converted column
        is the route value, and the field is not read again (`split`'s `column`)."""
        return self._depth == 0 and any(
            c.name == self._route.field and c.type is ColumnType.STRING for c in columns
        )

    def split(
        self,
        rows: pa.Table,
        *,
        segment_key: str,
        column: pa.Array | None = None,
        not_string: np.ndarray | None = None,
        decoded: DecodedBatch | None = None,
    ) -> RoutedRows:
        """Each row to its table, or a dead letter (`unrouted`, `route_invalid`, `invalid_json`, or a
        decoder's kind).

        `column` (when `reuses` says so): the mapping's converted column of the route field, with
        `not_string` the positions whose present value did not convert (the conversion's failures);
        `decoded`: the rows' values decoded already (record `i` is row `i`)."""
        count = rows.num_rows
        destination, reasons, leaf = self._destinations(
            count,
            None if column is not None else rows.column("value").combine_chunks(),
            column,
            not_string,
            decoded,
        )
        default = self._route.default_table
        if default is None:
            for row in np.flatnonzero(destination == UNROUTED).tolist():
                reasons[row] = (ErrorKind.UNROUTED.value, self._unrouted_reason(leaf, row))
        tables = []
        for index, target in enumerate(self._targets):
            positions = np.flatnonzero(destination == index)
            if positions.size:
                tables.append((target, rows.take(pa.array(positions)), positions))
        dead = np.fromiter(sorted(reasons), np.int64, len(reasons))
        dead_letters = dead_letter_rows(
            rows,
            dead,
            [reasons[i][0] for i in dead.tolist()],
            [reasons[i][1] for i in dead.tolist()],
            run_id=self._run_id,
            segment_key=segment_key,
        )
        return RoutedRows(tuple(tables), dead_letters)

    def assign(
        self, values: pa.Array, decoded: DecodedBatch | None = None
    ) -> tuple[tuple[TableTarget, np.ndarray], ...]:
        """Each record value's table by the same rules as `split`, without building rows: per table,
        the positions of `values` (binary; `decoded`: as the mapping's decoder read them) routed to it
        (the others are `split`'s dead letters)."""
        destination, _reasons, _leaf = self._destinations(len(values), values, None, None, decoded)
        found = []
        for index, target in enumerate(self._targets):
            positions = np.flatnonzero(destination == index)
            if positions.size:
                found.append((target, positions))
        return tuple(found)

    def _destinations(
        self,
        count: int,
        values: pa.Array | None,
        column: pa.Array | None,
        not_string: np.ndarray | None,
        decoded: DecodedBatch | None = None,
    ) -> tuple[np.ndarray, dict[int, tuple[str, str]], pa.Array]:
        """Per row its table index (`UNROUTED` rows left without a default), the dead-letter reasons
        of the invalid rows, and the route value column."""
        errors: dict[int, tuple[str, str]] = {}
        describe: Callable[[int, int], str] | None = None
        if column is not None:
            leaf = column
            failed = np.zeros(count, bool)
            if not_string is not None:
                failed[not_string] = True
        elif decoded is not None or self._decoder is not None:
            if decoded is None:
                assert self._decoder is not None
                assert values is not None
                decoded = self._decoder.decode(values)
            leaf, not_strings = strings_at(decoded, self._path)
            failed = np.zeros(count, bool)
            failed[list(not_strings)] = True
            errors = dict(decoded.errors)
            describe = _described(not_strings)
        else:
            assert values is not None
            extracted: ExtractedColumns = (
                self._scanner.scan(values)
                if self._scanner is not None
                else parse_columns(values, [self._spec], documents=False)
            )
            leaf = extracted.arrays[0]
            for _ in range(self._depth):
                leaf = pc.struct_field(leaf, [0])
            failed = extracted.failed(0)
            errors = {row: (ErrorKind.INVALID_JSON.value, reason) for row, reason in extracted.errors.items()}
            describe = extracted.describe
        destination = np.full(count, UNROUTED, np.int64)
        reasons: dict[int, tuple[str, str]] = {}
        encoded = pc.dictionary_encode(leaf)
        codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        lookup = np.asarray(
            [self._lookup(value) for value in encoded.dictionary.to_pylist()] or [0], np.int64
        )
        has_value = codes >= 0
        destination[has_value] = lookup[codes[has_value]]
        invalid_values = np.flatnonzero(destination == INVALID)
        for row in invalid_values.tolist():
            value = leaf[row].as_py()
            reasons[row] = (ErrorKind.ROUTE_INVALID.value, self._lookups[value][1])
        for row in np.flatnonzero(~has_value & failed).tolist():
            destination[row] = INVALID
            what = describe(0, row) if describe is not None else "a number, boolean, object or array"
            reasons[row] = (
                ErrorKind.ROUTE_INVALID.value,
                f"route field {self._route.field!r} is not a string: {what}",
            )
        for row, (kind, reason) in errors.items():
            destination[row] = INVALID
            reasons[row] = (kind, reason)
        default = self._route.default_table
        if default is not None:
            destination[destination == UNROUTED] = self._table_index(default)
        return destination, reasons, leaf

    def _unrouted_reason(self, leaf: pa.Array, row: int) -> str:
        value = leaf[row].as_py()
        field = self._route.field
        if value is None:
            return f"route field {field!r} is missing or null, and the route has no default_table"
        return f"route field {field!r} is {value!r}: no route.tables entry matches, and no default_table"

    def _table_index(self, target: TableTarget) -> int:
        index = self._index.get(target.identifier)
        if index is None:
            index = self._index[target.identifier] = len(self._targets)
            self._targets.append(target)
        return index

    def _lookup(self, value: str) -> int:
        """The destination of a route value: a table index, `UNROUTED` or `INVALID` (reason cached)."""
        cached = self._lookups.get(value)
        if cached is not None:
            return cached[0]
        route = self._route
        found: tuple[int, str]
        target = route.tables.get(value)
        if target is not None:
            found = (self._table_index(target), "")
        elif route.table_template is None:
            found = (UNROUTED, "")
        else:
            identifier = template_identifier(route.table_template, value)
            if identifier is None:
                found = (
                    INVALID,
                    f"route field {route.field!r} is {value!r}, which is not a table name for "
                    f"{route.table_template!r} ({ROUTE_VALUE_RULE})",
                )
            elif identifier in route.reserved:
                found = (
                    INVALID,
                    f"route field {route.field!r} is {value!r}, which names {identifier!r}, a table "
                    "another mapping (or a dead-letter table) of the config owns",
                )
            else:
                found = (self._table_index(route.template_target(identifier)), "")
        self._lookups[value] = found
        return found[0]


def _described(not_strings: dict[int, str]) -> Callable[[int, int], str]:
    """`describe(column, row)` for a decoded route field: what its value is."""
    return lambda _column, row: not_strings[row]
