"""A topic's dead letters through pyiceberg, for `redrive` (the `DeadLetterStore` port).

Reads the dead-letter rows a selection names, the (partition, offset) sets earlier redrives landed
(`kafscale.redriven` summaries of the table's current lineage), and makes the redrive's two commits:
ONE append of the converted rows to the mapping's table carrying the set, then ONE transaction of the
dead-letter table deleting the resolved rows and appending those still failing with their new reason.
Neither touches the `kafscale.offsets.<topic>` marker: a redrive moves no offset. The rules:
`domain/redrive.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TypeVar

import pyarrow as pa
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    LessThanOrEqual,
    Reference,
)
from pyiceberg.expressions.literals import literal

from kafscale_iceberg.adapters.iceberg_catalog import CatalogTableAccess
from kafscale_iceberg.domain.redrive import (
    SUMMARY_REDRIVE_ID,
    SUMMARY_REDRIVE_RESOLVED,
    SUMMARY_REDRIVE_TOPIC,
    SUMMARY_REDRIVEN,
    Pair,
    RedriveSelection,
    decode_pairs,
    encode_pairs,
)
from kafscale_iceberg.exceptions import KafscaleIcebergError

_T = TypeVar("_T")


class IcebergDeadLetters(CatalogTableAccess):
    """Dead-letter rows read, and a redrive's commits made, in one catalog."""

    def read_dead_letters(self, table: str, topic: str, selection: RedriveSelection) -> pa.Table:
        """The rows of `topic` in dead-letter table `table` that `selection` names (Arrow).

        Raises `TableMissingError`, `CatalogUnavailableError` or `CatalogError`."""
        loaded = self._load(table)
        return self._call(
            f"read the dead letters of {table!r}",
            lambda: loaded.scan(row_filter=_filter(topic, selection)).to_arrow(),
        )

    def redriven_pairs(self, table: str, topic: str) -> set[Pair]:
        """Every (partition, offset) of `topic` a redrive landed in `table`, from the retained snapshots."""
        metadata = self._load(table).metadata
        pairs: set[Pair] = set()
        for snapshot in metadata.snapshots:
            summary = snapshot.summary
            if summary is not None and summary.get(SUMMARY_REDRIVE_TOPIC) == topic:
                pairs |= decode_pairs(summary.get(SUMMARY_REDRIVEN) or "{}")
        return pairs

    def land_redriven(
        self, table: str, topic: str, rows: pa.Table, pairs: Collection[Pair], redrive_id: str
    ) -> None:
        """ONE append of `rows` to `table`, its summary naming `pairs` (what makes the landing exactly once).

        Not idempotent by itself: the caller checks `redriven_pairs` first, under the topic's lease."""
        loaded = self._load(table)
        summary = {
            SUMMARY_REDRIVE_TOPIC: topic,
            SUMMARY_REDRIVE_ID: redrive_id,
            SUMMARY_REDRIVEN: encode_pairs(pairs),
        }
        typed = _as_table_types(rows, loaded.schema().as_arrow())
        self._call(
            f"append the re-driven rows of {topic!r} to {table!r}",
            lambda: loaded.append(typed, snapshot_properties=summary),
        )

    def resolve_dead_letters(
        self, table: str, topic: str, record_ids: Collection[str], failing: pa.Table, redrive_id: str
    ) -> None:
        """ONE commit of dead-letter table `table`: delete the rows of `record_ids`, append `failing`
        (rows still failing, rewritten with their new reason; their ids are among `record_ids`).

        Idempotent: a second call finds no row to delete and appends `failing` again only if the
        caller passes it again (it re-reads the rows first, so it does not)."""
        if not record_ids and not failing.num_rows:
            return
        loaded = self._load(table)
        summary = {
            SUMMARY_REDRIVE_TOPIC: topic,
            SUMMARY_REDRIVE_ID: redrive_id,
            SUMMARY_REDRIVE_RESOLVED: str(len(record_ids) - failing.num_rows),
        }

        def commit() -> None:
            with loaded.transaction() as transaction:
                if record_ids:
                    transaction.delete(
                        In(term=Reference("record_id"), values={literal(i) for i in record_ids}),
                        snapshot_properties=summary,
                    )
                if failing.num_rows:
                    transaction.append(
                        _as_table_types(failing, loaded.schema().as_arrow()), snapshot_properties=summary
                    )

        self._call(f"resolve the re-driven dead letters of {topic!r} in {table!r}", commit)

    def _call(self, operation: str, action: Callable[[], _T]) -> _T:
        try:
            return action()
        except KafscaleIcebergError:
            raise
        except Exception as exc:
            raise self._translate(operation, exc) from exc


def _as_table_types(rows: pa.Table, table: pa.Schema) -> pa.Table:
    """`rows` with the table's Arrow types and nullability for the columns both have (a column the
    table kept but the mapping no longer lists is left out: it lands null, as in a run)."""
    fields = [table.field(name) for name in rows.column_names if name in table.names]
    return rows.select([f.name for f in fields]).cast(pa.schema(fields))


def _filter(topic: str, selection: RedriveSelection) -> BooleanExpression:
    parts: list[BooleanExpression] = [EqualTo(term=Reference("topic"), value=literal(topic))]
    if selection.reason:
        parts.append(EqualTo(term=Reference("error_kind"), value=literal(selection.reason)))
    if selection.partition is not None:
        parts.append(EqualTo(term=Reference("partition"), value=literal(selection.partition)))
    if selection.from_offset is not None:
        parts.append(GreaterThanOrEqual(term=Reference("offset"), value=literal(selection.from_offset)))
    if selection.to_offset is not None:
        parts.append(LessThanOrEqual(term=Reference("offset"), value=literal(selection.to_offset)))
    expression: BooleanExpression = AlwaysTrue()
    for part in parts:
        expression = And(expression, part)
    return expression
