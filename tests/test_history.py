"""`history` on real parts: a SQLite catalog, the SQLite checkpoint store, the real commit step and offset
reset. Every answer is checked against the rows the table's files hold as of each snapshot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import Table

from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.cli import main
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.exceptions import OffsetNotInHistoryError
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.history import HistoryService
from kafscale_iceberg.services.offset_reset import OffsetReset
from tests.support.config_documents import local_document
from tests.support.iceberg_runs import RunFactory, sql_settings

TOPIC, TABLE, DLQ = "orders", "lake.orders", "lake.orders__dlq"
RESET_AFTER_RUN, RESET_TO = 10, 25
"""After the 10th run, partition 0 is reset to offset 25 and the next runs read it again."""


def _dead(partition: int, offset: int) -> bool:
    return (partition * 7 + offset) % 13 == 0


class HistoryWorld:
    """A topic of two partitions committed by 20 runs of uneven sizes, one offset reset among them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.document: dict[str, Any] = local_document(
            root, None, bucket="unused", mappings=[{"topic": TOPIC, "table": TABLE, "dead_letter_table": DLQ}]
        )
        self.config = config_from_mapping(self.document, source="test")
        self.catalog = load_iceberg_catalog(sql_settings(root))
        self.tables = IcebergTableCommitter(self.catalog)
        self.store = SqliteCheckpointStore(root / "offsets.sqlite")
        self.runs = RunFactory(root, topic=TOPIC, table=TABLE, dead_letter_table=DLQ)
        self.ends = {0: -1, 1: -1}
        self.service = HistoryService(self.config, IcebergTableCommitter(self.catalog))

    def grant(self, run_id: str) -> LeaseGrant:
        grant = self.store.claim_lease(TOPIC, owner_id="test", run_id=run_id)
        assert isinstance(grant, LeaseGrant), grant
        return grant

    def commit_run(self, number: int) -> None:
        ranges = {}
        for partition, end in self.ends.items():
            # Partition 0 moves every run (1..5 records); partition 1 0..6, so some runs leave it alone.
            size = 1 + number % 5 if partition == 0 else (number * 4) % 7
            if size:
                ranges[partition] = (end, end + size)
        plan = self.runs.plan(ranges)
        dead = {p: [o for o in range(s + 1, e + 1) if _dead(p, o)] for p, (s, e) in ranges.items()}
        result = self.runs.result(plan, dead_letters=dead)
        CommitService(self.tables, self.store).commit_run(
            plan, result, self.grant(plan.run_id), TablePolicy(create_table_if_missing=True)
        )
        self.ends.update({p: e for p, (_, e) in ranges.items()})

    def reset(self, partition: int, to: int) -> None:
        grant = self.grant("reset")
        OffsetReset(self.tables, self.store).reset_offsets(TOPIC, (TABLE, DLQ), {partition: to}, grant)
        self.store.release_lease(grant)
        self.ends[partition] = to


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> HistoryWorld:
    world = HistoryWorld(tmp_path_factory.mktemp("history"))
    for number in range(1, 21):
        world.commit_run(number)
        if number == RESET_AFTER_RUN:
            assert world.ends[0] > RESET_TO
            world.reset(0, RESET_TO)
    return world


def _rows_by_snapshot(table: Table) -> dict[int, set[tuple[int, int]]]:
    """Every snapshot's (partition, offset) rows, read from its data files."""
    rows = {}
    for snapshot in table.metadata.snapshots:
        read = table.scan(
            snapshot_id=snapshot.snapshot_id, selected_fields=("partition", "offset")
        ).to_arrow()
        rows[snapshot.snapshot_id] = set(
            zip(read["partition"].to_pylist(), read["offset"].to_pylist(), strict=True)
        )
    return rows


def _lineage(table: Table) -> Iterator[tuple[int, int | None]]:
    """(snapshot id, parent id) of the current lineage, newest first."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    current = table.metadata.current_snapshot_id
    while current is not None:
        yield current, by_id[current].parent_snapshot_id
        current = by_id[current].parent_snapshot_id


@pytest.mark.parametrize("table_name", [TABLE, DLQ])
def test_every_offset_is_answered_by_the_snapshot_from_which_the_files_hold_it(
    world: HistoryWorld, table_name: str
) -> None:
    table = world.catalog.load_table(table_name)
    rows = _rows_by_snapshot(table)
    lineage = list(_lineage(table))
    final = rows[lineage[0][0]]
    assert {p for p, _ in final} == {0, 1}
    assert len(final) >= 5

    for partition, offset in sorted(final):
        found = world.service.locate(
            TOPIC, partition, offset, table=None if table_name == TABLE else table_name
        )
        held_since = [sid for sid, _ in lineage]
        index = held_since.index(found.snapshot.snapshot_id)
        # Held from the answer to the current snapshot, and not by the answer's parent.
        assert all((partition, offset) in rows[sid] for sid in held_since[: index + 1]), (partition, offset)
        parent = lineage[index][1]
        assert parent is None or (partition, offset) not in rows[parent], (partition, offset)
        assert found.snapshot.range_of(partition) is not None


def test_every_committed_offset_is_in_the_table_or_its_dead_letters(world: HistoryWorld) -> None:
    held = set()
    for name in (TABLE, DLQ):
        read = world.catalog.load_table(name).scan(selected_fields=("partition", "offset")).to_arrow()
        held |= set(zip(read["partition"].to_pylist(), read["offset"].to_pylist(), strict=True))

    assert held == {(p, o) for p, end in world.ends.items() for o in range(end + 1)}


def test_an_offset_the_reset_removed_is_answered_by_the_run_that_read_it_again(world: HistoryWorld) -> None:
    history = world.service.history(TOPIC)
    (reset,) = [s for s in history.snapshots if s.reset]
    offset = RESET_TO + 1
    before = [s for s in history.snapshots[: history.snapshots.index(reset)] if s.range_of(0)]
    assert any(s.range_of(0).holds(offset) for s in before if s.range_of(0))  # type: ignore[union-attr]

    found = world.service.locate(TOPIC, 0, offset)

    assert history.snapshots.index(found.snapshot) > history.snapshots.index(reset)


def test_the_history_lists_each_run_with_its_ranges_and_an_uncommitted_offset_is_refused(
    world: HistoryWorld,
) -> None:
    history = world.service.history(TOPIC)

    runs = [s for s in history.snapshots if not s.reset]
    assert len(runs) == 20
    assert all(s.run_id for s in runs)
    assert [s.timestamp_ms for s in history.snapshots] == sorted(s.timestamp_ms for s in history.snapshots)
    with pytest.raises(OffsetNotInHistoryError, match=rf"partition 1 offset {world.ends[1] + 1}: .*orders"):
        world.service.locate(TOPIC, 1, world.ends[1] + 1)


def test_the_duckdb_sql_reads_the_record_as_of_the_snapshot(world: HistoryWorld) -> None:
    from tests.test_bucket_tables import _duckdb

    found = world.service.locate(TOPIC, 1, 1)

    rows = (
        _duckdb().execute(found.queries.duckdb.replace("SELECT *", 'SELECT "partition", "offset"')).fetchall()
    )
    assert rows == [(1, 1)]
    assert f"VERSION AS OF {found.snapshot.snapshot_id}" in found.queries.spark
    assert f"FOR VERSION AS OF {found.snapshot.snapshot_id}" in found.queries.trino


def test_the_command_prints_the_history_and_an_offsets_snapshot_as_json(
    world: HistoryWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    config = world.root / "config.json"
    config.write_text(json.dumps(world.document))

    assert main(["history", "--config", str(config), "--topic", TOPIC, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert (
        main(["history", "--config", str(config), "--topic", TOPIC, "--partition", "1", "--offset", "3"]) == 0
    )
    text = capsys.readouterr().out
    assert main(["history", "--config", str(config), "--topic", TOPIC, "--partition", "1"]) == 2

    assert len(listed["snapshots"]) == 21
    assert listed["table"] == TABLE
    found = world.service.locate(TOPIC, 1, 3)
    assert f"{found.snapshot.snapshot_id}" in text
    assert "DuckDB: SELECT" in text
