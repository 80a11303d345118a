"""`mappings[].upsert`: a table holding each key's latest row (`mode: upsert`), and the rules an upsert
mapping must follow.

The rules (`upsert_problems`, each naming its YAML key): the key columns are required columns the
mapping lists (`schema.source: mapping`), of a type Iceberg allows as an identifier field; every
partition field derives from a key column, so a key lives in one partition; and what is not built
yet for upsert (a route, several mappings of one topic - checked by the whole config - LFS,
`schema.source` other than `mapping`) is refused with a message rather than ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, Protocol

from pydantic import BeforeValidator, field_validator

from kafscale_iceberg.config.base import _lowercase, _Section
from kafscale_iceberg.domain.runs import CdcFormat, ColumnType, UpsertSettings, UpsertWrite


class KeyColumnCandidate(Protocol):
    """What the rules read of a listed column (`schema.columns[]`, a `ColumnConfig`)."""

    @property
    def name(self) -> str: ...

    @property
    def required(self) -> bool: ...

    @property
    def type(self) -> ColumnType: ...


# Iceberg refuses float, double and nested fields as identifier fields.
_KEY_TYPES_REFUSED = frozenset(
    {ColumnType.FLOAT, ColumnType.DOUBLE, ColumnType.STRUCT, ColumnType.LIST, ColumnType.MAP}
)


class UpsertConfig(_Section):
    """`mappings[].upsert`: `key` (the key columns), `cdc` (`none` or `debezium`), `delete_on_tombstone`,
    `write` (`merge-on-read`, `copy-on-write` or `auto`: how replaced rows leave the table)."""

    key: tuple[str, ...] = ()
    cdc: Annotated[Literal["none", "debezium"], BeforeValidator(_lowercase)] = "none"
    delete_on_tombstone: bool = True
    write: Annotated[Literal["merge-on-read", "copy-on-write", "auto"], BeforeValidator(_lowercase)] = "auto"

    @field_validator("key", mode="before")
    @classmethod
    def _single_column_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    def to_settings(self) -> UpsertSettings:
        """The settings a run plan carries."""
        return UpsertSettings(
            key=self.key,
            cdc=CdcFormat(self.cdc),
            delete_on_tombstone=self.delete_on_tombstone,
            write=UpsertWrite(self.write),
        )


def upsert_problems(
    upsert: UpsertConfig | None,
    *,
    mode: str,
    routed: bool,
    lfs_on: bool,
    schema_source: str,
    columns: Sequence[KeyColumnCandidate],
    partition_columns: Sequence[str],
) -> list[tuple[str, str]]:
    """`(YAML key, problem)` for each rule of an upsert mapping it breaks (none for `mode: append`
    without an `upsert` section); the arguments are the mapping's keys the rules read."""
    if mode != "upsert":
        if upsert is not None:
            return [("upsert", "is only read with mode: upsert; set mode: upsert or drop the section")]
        return []
    if upsert is None or not upsert.key:
        return [("upsert.key", "is required with mode: upsert: the key columns, e.g. upsert: {key: [id]}")]
    problems: list[tuple[str, str]] = []
    if routed:
        problems.append(("route", "is not supported with mode: upsert yet: give the mapping one table"))
    if lfs_on:
        problems.append(
            ("lfs.mode", "must be off with mode: upsert (LFS values are not supported for upsert yet)")
        )
    if schema_source != "mapping":
        problems.append(
            (
                "schema.source",
                f"must be mapping with mode: upsert (got {schema_source!r}): the key columns are "
                "listed in schema.columns, required",
            )
        )
        return problems
    by_name = {column.name: column for column in columns}
    for index, name in enumerate(upsert.key):
        key = f"upsert.key[{index}]"
        column = by_name.get(name)
        if name in upsert.key[:index]:
            problems.append((key, f"{name!r} is listed twice"))
        elif column is None:
            problems.append(
                (key, f"{name!r} is not a column of schema.columns ({', '.join(by_name) or 'none listed'})")
            )
        elif not column.required:
            problems.append(
                (key, f"column {name!r} must be required (required: true): a row without its key is refused")
            )
        elif column.type in _KEY_TYPES_REFUSED:
            problems.append((key, f"column {name!r} is {column.type.value}, which cannot be a key column"))
    for index, column_name in enumerate(partition_columns):
        if column_name not in upsert.key:
            problems.append(
                (
                    f"partition_by[{index}]",
                    f"partitions {column_name!r}, which is not a key column ({', '.join(upsert.key)}): an "
                    "upsert table's partition fields derive from its key, so a key lives in one partition "
                    "(bucket(N, key) spreads keys evenly)",
                )
            )
    return problems
