"""What a commit of a run did (`CommitOutcome`): the value the commit step, the recovery of a stranded
run, the metrics and the callers share, below all of them so none imports another for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kafscale_iceberg.domain.column_fill import ColumnFill
from kafscale_iceberg.domain.commits import TableState
from kafscale_iceberg.domain.finished_runs import FinishedRun
from kafscale_iceberg.domain.upsert import UpsertCounts


@dataclass(frozen=True)
class CommitOutcome:
    """What `commit_run` did."""

    run_id: str
    topic: str
    table_committed: bool
    """False when the table already held the run (a replayed commit)."""
    dead_letter_committed: bool
    table_snapshot_id: int | None
    offsets: Mapping[int, int]
    """The run partitions' committed offsets, as the table records them after the commit."""
    offsets_written: Mapping[int, int] = field(default_factory=dict)
    """What this call wrote to the checkpoint store (empty when it already agreed)."""
    lease_released: bool = False
    states: Mapping[str, TableState] = field(default_factory=dict)
    """The states this call read or committed last, by table (what `field_ids` may use)."""
    upsert: UpsertCounts | None = None
    """An upsert run's counts, when this call's commit landed (None otherwise)."""
    upsert_table: str = ""
    tables_committed: tuple[str, ...] = ()
    """The tables this call committed the run to, in commit order."""
    finished: FinishedRun | None = None
    """A run stranded between its tables' commits that this call finished first."""
    fill: ColumnFill | None = None
    """Per mapping column, the run's records that carried it (None: unknown, e.g. no statistics)."""
    unfilled: tuple[str, ...] = ()
    """One line per mapping column no record of the run carried, naming the nearest fields the
    records do carry (`domain.column_fill.describe_unfilled`)."""
