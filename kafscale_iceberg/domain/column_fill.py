"""Mapping columns no record of a run filled: the most common mapping mistake (a column named
`store` while the records carry `store_id`) lands every row with that column null, silently.

Per mapping column, the records that carried it (`column_fill`): the rows minus the column's nulls,
read from the statistics the run's data files carry (`DataFile.stats`, no file read), plus the
records whose value was present but did not convert (stored null, counted per column). A column
carried by no record is *unfilled*: warned once per run with the nearest field names the records do
carry (`describe_unfilled`), and refused before the commit under `schema.mode: strict`
(`refuse_unfilled`, the same decision in the one-machine loop and the AWS commit step).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafscale_iceberg.domain.runs import RunPlan, RunResult, SchemaMode
from kafscale_iceberg.exceptions import UnfilledColumnError

FIELD_SAMPLE_RECORDS = 20
"""How many records' top-level keys the hint reads (from one of the run's data files' `value`)."""


@dataclass(frozen=True)
class ColumnFill:
    """Per mapping column (in mapping order), how many of the run's `records` carried it."""

    records: int
    carried: Mapping[str, int]

    @property
    def unfilled(self) -> tuple[str, ...]:
        """The columns no record carried (none when the run wrote no rows)."""
        if self.records == 0:
            return ()
        return tuple(name for name, count in self.carried.items() if count == 0)

    def describe(self) -> str:
        """`order_id 400, store 0 of 400`: for the run line."""
        counts = ", ".join(f"{name} {count:,}" for name, count in self.carried.items())
        return f"{counts} of {self.records:,}"


def column_fill(plan: RunPlan, result: RunResult) -> ColumnFill | None:
    """The fill of the plan's first mapping's columns in its table's files (`result.data_files`);
    None when the run wrote no rows there, a file carries no statistics, or an upsert run's files hold
    rows of the table it rewrote (copy-on-write: not only the run's records). A column whose
    statistics a file lacks (no null count) is left out."""
    rows = sum(f.record_count for f in result.data_files)
    if rows == 0 or (result.upsert is not None and result.upsert.replaced):
        return None
    nulls: dict[str, int] = {}
    unknown: set[str] = set()
    for data_file in result.data_files:
        if data_file.stats is None:
            return None
        for column in data_file.stats.columns:
            if column.null_count is None or not column.has_stats:
                unknown.add(column.name)
            else:
                nulls[column.name] = nulls.get(column.name, 0) + column.null_count
    failures = result.counts.conversion_failures if not plan.multi_table else {}
    carried = {
        c.name: rows - nulls[c.name] + failures.get(c.name, 0)
        for c in plan.conversion.columns
        if c.name in nulls and c.name not in unknown
    }
    return ColumnFill(records=rows, carried=carried)


def unfilled_columns(plan: RunPlan, result: RunResult) -> tuple[str, ...]:
    """The mapping columns (`plan.conversion.columns`) null in every row of the run's table files;
    empty when the run wrote no rows or a file carries no statistics for a column."""
    fill = column_fill(plan, result)
    return () if fill is None else fill.unfilled


def samples_fields(plan: RunPlan) -> bool:
    """Whether a hint can name the records' fields: JSON values (their top-level keys)."""
    return plan.conversion.value_format.name == "json"


def nearest_fields(column: str, fields: Sequence[str]) -> tuple[str, ...]:
    """The field names closest to `column` (`difflib`), best first; at most three."""
    candidates = [f for f in dict.fromkeys(fields) if f != column]
    return tuple(difflib.get_close_matches(column, candidates, n=3, cutoff=0.7))


def describe_unfilled(column: str, records: int, fields: Sequence[str] | None) -> str:
    """ "`store`: absent in 2,400 of 2,400 records; they carry `store_id`" (`fields`: the sampled
    records' field names; None: not sampled, no hint)."""
    text = f"`{column}`: absent in {records:,} of {records:,} records"
    if fields is None:
        return text
    near = nearest_fields(column, fields)
    if near:
        return text + "; they carry " + " or ".join(f"`{name}`" for name in near)
    listed = ", ".join(f"`{name}`" for name in sorted(set(fields))[:8])
    return text + (f"; they carry none like it ({listed})" if listed else "")


def refuse_unfilled(
    plan: RunPlan, fill: ColumnFill | None, fields: Sequence[str] | None, *, table: str
) -> None:
    """Under `schema.mode: strict`, refuse (`UnfilledColumnError`) a run whose mapping column no record
    carried, before its commit; anything else passes."""
    if fill is None or plan.conversion.schema_mode is not SchemaMode.STRICT or not fill.unfilled:
        return
    problems = "; ".join(describe_unfilled(c, fill.records, fields) for c in fill.unfilled)
    raise UnfilledColumnError(table, plan.run_id, fill.unfilled, problems)
