"""Mapping columns no record of a run filled: the most common mapping mistake (a column named
`store` while the records carry `store_id`) lands every row with that column null, silently.

Read from the statistics the run's data files carry (`DataFile.stats`), so it costs no file read.
"""

from __future__ import annotations

from kafscale_iceberg.domain.runs import RunPlan, RunResult


def unfilled_columns(plan: RunPlan, result: RunResult) -> tuple[str, ...]:
    """The mapping columns (`plan.conversion.columns`) null in every row of the run's table files;
    empty when the run wrote no rows or a file carries no statistics for a column."""
    rows = sum(f.record_count for f in result.data_files)
    if rows == 0:
        return ()
    nulls: dict[str, int] = {}
    for data_file in result.data_files:
        if data_file.stats is None:
            return ()
        for column in data_file.stats.columns:
            if column.null_count is not None and column.has_stats:
                nulls[column.name] = nulls.get(column.name, 0) + column.null_count
    return tuple(c.name for c in plan.conversion.columns if nulls.get(c.name, -1) == rows)
