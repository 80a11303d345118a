"""A run stranded between its tables' commits and finished by a later commit (`FinishedRun`), and how
offsets are printed in log lines and summaries (`describe_offsets`).

Below both `domain/commits.py` and `exceptions/commits.py` (`RunSupersededError` carries the run it
finished), which is why it lives apart from the commit rules: it imports no error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafscale_iceberg.domain.runs import RunPlan, RunResult
from kafscale_iceberg.domain.upsert import UpsertCounts


def describe_offsets(offsets: Mapping[int, int]) -> str:
    """`p0=11, p1=7` (`-` for none): offsets as the product's log lines and summaries print them."""
    return ", ".join(f"p{p}={o}" for p, o in sorted(offsets.items())) or "-"


@dataclass(frozen=True)
class FinishedRun:
    """A run stranded between its tables' commits (a crash after some of them), finished from its own
    plan and result by a later run's commit: what an operator needs to know it is in."""

    run_id: str
    topic: str
    tables: tuple[str, ...]
    """The tables its finishing committed, in commit order (those already holding it left out)."""
    records: int
    dead_letters: int
    offsets: Mapping[int, int]
    """The run's partitions' committed offsets after it."""
    plan: RunPlan | None = None
    result: RunResult | None = None
    """Its plan and result: what its metrics are counted from, once (`metrics.record_finished`)."""
    upsert: UpsertCounts | None = None
    """An upsert run's counts, and its table."""
    upsert_table: str = ""

    def describe(self) -> str:
        """`run R (tables a, b: 17 records, 1 dead letter; offsets p0=11)`."""
        tables = ", ".join(self.tables) or "none left to commit"
        dead = (
            f", {self.dead_letters} dead letter{'' if self.dead_letters == 1 else 's'}"
            if self.dead_letters
            else ""
        )
        return (
            f"run {self.run_id} (tables {tables}: {self.records} records{dead}; "
            f"offsets {describe_offsets(self.offsets)})"
        )
