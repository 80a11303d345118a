"""Iceberg field ids for the data files a run writes, known to the launcher without a catalog.

The Spark job writes the table's field ids into every Parquet file (`PARQUET:field_id`), so engines
read the files by id, with or without the table's name mapping. The launcher has no catalog client:
it plans from `field-ids.json` beside the topic's runs (`{runs.location}/{topic}/field-ids.json`),
which the commit step rewrites after each commit from the tables' schemas. Columns the table does
not have yet get the ids evolution will give them (`last_column_id + 1, + 2, …` in mapping order,
as the commit step adds them); with no document, the ids a table created by this product gets
(1, 2, … in field order). The commit step checks the plan's ids against the table before adding a
file: a wrong guess (the table changed meanwhile) refuses the run, writing nothing, and the
rewritten document makes the next attempt right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from kafscale_iceberg.domain.runs import ColumnType
from kafscale_iceberg.domain.schema import FieldSpec
from kafscale_iceberg.domain.tickets import join_uri

FIELD_IDS_NAME = "field-ids.json"


def field_ids_uri(runs_location: str, topic: str) -> str:
    """Where the field ids of a topic's tables are kept: `{runs.location}/{topic}/field-ids.json`."""
    return join_uri(runs_location, topic, FIELD_IDS_NAME)


class TableFieldIds(BaseModel):
    """One table's top-level column ids and the highest id it ever assigned."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    identifier: str
    field_ids: dict[str, int]
    last_column_id: int


class TopicFieldIds(BaseModel):
    """`field-ids.json`: the field ids of the tables a topic's runs write (table, dead-letter table)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    tables: tuple[TableFieldIds, ...] = ()

    def table(self, identifier: str) -> TableFieldIds | None:
        """The ids recorded for `identifier`, None when not recorded."""
        return next((t for t in self.tables if t.identifier == identifier), None)


NESTED_TYPES = frozenset({ColumnType.STRUCT, ColumnType.LIST, ColumnType.MAP})


def planned_field_ids(fields: Sequence[FieldSpec], known: TableFieldIds | None) -> dict[str, int] | None:
    """The field id of each of `fields` once the table holds them (see the module docstring).

    None (files without ids, read through the name mapping) when a field is nested: the ids of a
    struct's, list's or map's parts are not planned here, and a file with ids on some columns but
    not on their parts would be read with those parts missing by engines that trust the ids.
    """
    if any(f.type in NESTED_TYPES for f in fields):
        return None
    if known is None:
        return {f.name: index for index, f in enumerate(fields, start=1)}
    ids: dict[str, int] = {}
    next_id = known.last_column_id
    for f in fields:
        if f.name in known.field_ids:
            ids[f.name] = known.field_ids[f.name]
        else:
            next_id += 1
            ids[f.name] = next_id
    return ids


def field_id_mismatches(
    planned: Mapping[str, int], table: Mapping[str, int]
) -> dict[str, tuple[int, int | None]]:
    """Columns whose planned id differs from the table's: `{name: (planned, table's or None)}`."""
    return {
        name: (planned_id, table.get(name))
        for name, planned_id in sorted(planned.items())
        if table.get(name) != planned_id
    }
