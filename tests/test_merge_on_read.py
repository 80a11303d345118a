"""Merge-on-read upsert (`upsert.write`): a run writes position delete files for the rows its changed
keys replace, never rewriting a table file, and every reader - pyiceberg, DuckDB and Spark reading
the files themselves (`tests/support/table_readers.py`) - sees each key's last state, through
inserts, updates, deletes, a deleted key inserted again, several changes of one key in one run, and
compactions folding the deletes in between. Real parts: the run driver in this process, the commit
service, a SQLite catalog, the real maintainer (`tests/support/upsert_world.py`)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import ManifestContent

from kafscale_iceberg.adapters.data_files import StagedFileStore
from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_maintenance import IcebergTableMaintainer
from kafscale_iceberg.dataplane.upsert_keys import KeyChanges
from kafscale_iceberg.dataplane.upsert_positions import locate_rows
from kafscale_iceberg.domain.runs import UpsertSettings, UpsertWrite
from kafscale_iceberg.domain.upsert import AUTO_COPY_ON_WRITE_MAX_FILES, choose_write
from kafscale_iceberg.exceptions import UpsertLocateStaleError
from tests.support.table_readers import duckdb_rows, full_compaction, snapshot_files, spark_rows
from tests.support.upsert_world import TABLE, UpsertWorld

KEYS = 40
FILE_PATH = 2147483546  # the `file_path` column of a position delete file


def mor_world(root: Path) -> UpsertWorld:
    return UpsertWorld(root, upsert=UpsertSettings(key=("id",), write=UpsertWrite.MERGE_ON_READ))


def change(model: dict[int, str], key: int, name: str | None) -> tuple[object, object]:
    """A record changing `key` (None: a tombstone), applied to the model too."""
    if name is None:
        model.pop(key, None)
        return ({"id": key}, None)
    model[key] = name
    return ({"id": key}, {"id": key, "name": name})


def history(world: UpsertWorld, model: dict[int, str]) -> None:
    """Inserts over two Kafka partitions, then updates, deletes, a re-insert and one key changed
    three times in one run, each as its own run."""
    world.write(0, [change(model, k, f"a{k}") for k in range(0, KEYS, 2)])
    world.write(1, [change(model, k, f"a{k}") for k in range(1, KEYS, 2)])
    world.run()
    world.write(0, [change(model, k, f"b{k}") for k in (2, 10, 30)])
    world.write(1, [change(model, 7, None), change(model, 21, "b21")])
    world.run()
    world.write(1, [change(model, 7, "again7"), change(model, 9, None)])
    world.write(0, [change(model, 4, "c4"), change(model, 4, None), change(model, 4, "e4")])
    world.run()


def readers_agree(world: UpsertWorld, model: dict[int, str], spark: Any | None = None) -> None:
    table = world.catalog.load_table(TABLE)
    assert world.names() == model  # pyiceberg (also: no key twice)
    duck = duckdb_rows(table, "id, name")
    assert sorted(duck) == sorted(model.items())
    if spark is not None:
        assert sorted(spark_rows(spark, table, ["id", "name"])) == sorted(model.items())


def test_runs_write_position_deletes_and_no_table_file_is_rewritten(tmp_path: Path) -> None:
    world, model = mor_world(tmp_path), {}
    history(world, model)
    table = world.catalog.load_table(TABLE)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    summary = snapshot.summary
    assert summary is not None
    assert summary["kafscale.upsert.files-rewritten"] == "0"
    # One delete file per data file: the last run deleted the rows of keys 4 (one row, three changes)
    # and 9, each in a first-run file that already had a delete file (keys 2, 10, 30; 7, 21): each
    # new file holds all its data file's positions and the old one left in the same snapshot.
    assert summary["added-delete-files"] == "2"
    assert summary["added-position-deletes"] == "7"
    assert summary["removed-position-deletes"] == "5"
    assert summary["total-delete-files"] == "2"
    assert int(summary["kafscale.upsert.bytes-located"]) > 0
    assert summary.operation.value == "overwrite"
    data, deletes = snapshot_files(table)
    assert len(data) == 6  # each run's file per Kafka partition stays: nothing replaced
    assert len(deletes) == 2
    # One delete manifest, rewritten by each run that deletes rows (not one more per run).
    delete_manifests = [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DELETES]
    assert len(delete_manifests) == 1
    for task in table.scan().plan_files():  # each delete file names its one data file by its bounds
        path = task.file.file_path.encode()
        assert all(d.lower_bounds[FILE_PATH] == d.upper_bounds[FILE_PATH] == path for d in task.delete_files)
    for name in ("write.update.mode", "write.delete.mode", "write.merge.mode"):
        assert table.properties[name] == "merge-on-read"
    readers_agree(world, model)


@pytest.mark.slow
def test_every_reader_agrees_through_compactions(tmp_path: Path, spark: Any) -> None:
    world, model = mor_world(tmp_path), {}
    history(world, model)
    readers_agree(world, model, spark)
    assert world.compact()
    assert snapshot_files(world.catalog.load_table(TABLE))[1] == []  # every delete folded in
    readers_agree(world, model, spark)
    world.write(0, [change(model, 4, None), change(model, 12, "f12")])
    world.write(1, [change(model, 9, "back9")])
    world.run()
    readers_agree(world, model, spark)
    assert world.compact()
    table = world.catalog.load_table(TABLE)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary.operation.value == "replace"
    assert snapshot.summary["total-delete-files"] == "0"
    readers_agree(world, model, spark)


def test_a_run_merges_the_data_manifests_once_min_count_to_merge_stand(tmp_path: Path) -> None:
    world, model = mor_world(tmp_path), {}
    history(world, model)  # three runs: three data manifests
    table = world.catalog.load_table(TABLE)
    with table.transaction() as transaction:
        transaction.set_properties({"commit.manifest.min-count-to-merge": "3"})
    world.write(0, [change(model, 6, "m6")])
    world.run()
    table = world.catalog.load_table(TABLE)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    contents = [m.content for m in snapshot.manifests(table.io)]
    assert contents.count(ManifestContent.DATA) == 1  # Iceberg's row delta merges; a fast append would not
    assert contents.count(ManifestContent.DELETES) == 1
    readers_agree(world, model)


def test_a_compaction_landing_first_refuses_the_run_whose_deletes_it_moved(tmp_path: Path) -> None:
    world, model = mor_world(tmp_path), {}
    world.write(0, [change(model, k, f"a{k}") for k in range(KEYS)])
    world.run()
    world.write(0, [change(model, k, f"b{k}") for k in range(0, KEYS, 2)])
    world.run()
    world.write(0, [change(model, 3, "c3")])  # its row: in the first run's file, which has deletes
    plan = world.plan()
    result = world.execute(plan)
    assert result.upsert is not None
    assert result.upsert.deletes
    assert world.compact()  # folds the first run's file: takes key 3's row
    with pytest.raises(UpsertLocateStaleError, match="left the table"):
        world.commit(plan, result)
    world.run()  # planned again, located in the compacted table
    readers_agree(world, model)


def test_a_compaction_racing_a_run_that_deleted_its_rows_abandons(tmp_path: Path) -> None:
    world, model = mor_world(tmp_path), {}
    world.write(0, [change(model, k, f"a{k}") for k in range(KEYS)])
    world.run()
    world.write(0, [change(model, k, f"b{k}") for k in range(0, KEYS, 3)])
    world.run()
    maintainer = IcebergTableMaintainer(world.catalog, StagedFileStore())
    written = full_compaction(
        maintainer, TABLE, data_prefix=str(tmp_path / "compacted"), target_file_size_bytes=1 << 30
    )
    world.write(0, [change(model, 1, "c1"), change(model, 5, None)])
    world.run()  # deletes rows of the files the compaction is replacing
    outcome = maintainer.commit_compaction(written, now_ms=0)
    assert not outcome.committed
    assert outcome.abandoned
    readers_agree(world, model)  # no row came back, none was lost


def test_copy_on_write_rewrites_and_says_so_in_the_table_properties(tmp_path: Path) -> None:
    world = UpsertWorld(tmp_path, upsert=UpsertSettings(key=("id",), write=UpsertWrite.COPY_ON_WRITE))
    model: dict[int, str] = {}
    history(world, model)
    table = world.catalog.load_table(TABLE)
    assert snapshot_files(table)[1] == []
    assert table.properties["write.update.mode"] == "copy-on-write"
    readers_agree(world, model)


def test_auto_rewrites_few_small_files_and_writes_deletes_beyond() -> None:
    few = [1024] * AUTO_COPY_ON_WRITE_MAX_FILES
    assert choose_write(UpsertWrite.AUTO, few) is UpsertWrite.COPY_ON_WRITE
    assert choose_write(UpsertWrite.AUTO, [*few, 1024]) is UpsertWrite.MERGE_ON_READ
    assert choose_write(UpsertWrite.AUTO, [1 << 30]) is UpsertWrite.MERGE_ON_READ
    assert choose_write(UpsertWrite.AUTO, []) is UpsertWrite.COPY_ON_WRITE
    assert choose_write(UpsertWrite.COPY_ON_WRITE, [1 << 30] * 9) is UpsertWrite.COPY_ON_WRITE
    assert choose_write(UpsertWrite.MERGE_ON_READ, [1]) is UpsertWrite.MERGE_ON_READ


def test_locating_reads_the_key_column_not_the_file(tmp_path: Path) -> None:
    ids = list(range(20_000))
    noise = random.Random(3)
    payload = [noise.randbytes(160).hex() for _ in ids]  # incompressible: the file is mostly payload
    wide = pa.table({"id": pa.array(ids, pa.int64()), "payload": payload})
    path = tmp_path / "table-file.parquet"
    pq.write_table(wide, path, compression="zstd")
    size = path.stat().st_size
    rows = pa.table({"id": pa.array([5, 19_999], pa.int64()), "partition": [0, 0], "offset": [1, 2]})
    none = rows.slice(0, 0)
    changes = KeyChanges(("id",), rows, none)
    located = locate_rows(DocumentStore(), f"file://{path}", size, changes)
    assert located.replaced.tolist() == [5, 19_999]
    assert located.deleted.tolist() == []
    assert 0 < located.bytes_read < size / 20  # the footer and the key column chunk, not the payload


@pytest.fixture
def local_runner(spark: Any) -> Any:
    """The one-machine job runner on the session's local Spark: the code EMR runs (`spark_app`)."""
    from kafscale_iceberg.local.spark_runner import LocalSparkJobRunner

    runner = LocalSparkJobRunner(master="local[2]", keep_session_warm=True)
    yield runner
    runner.close()


def spark_compaction(world: UpsertWorld, runner: Any) -> Any:
    """`maintain`'s compaction step with `compaction_engine: spark` (the EMR path) on this table:
    plan, the job on `runner`, its result checked and committed; its outcome."""
    from kafscale_iceberg.adapters.iceberg_maintenance import new_compaction_id
    from kafscale_iceberg.config import config_from_mapping
    from kafscale_iceberg.local.config_document import one_machine_document
    from kafscale_iceberg.services.compaction_jobs import SparkCompaction

    columns = [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"}]
    mapping = {
        "topic": "orders",
        "table": TABLE,
        "mode": "upsert",
        "upsert": {"key": ["id"]},
        "schema": {"columns": columns},
    }
    document = one_machine_document(
        world.root,
        bucket="unused",
        mappings=[mapping],
        maintenance={"compaction_engine": "spark", "max_delete_ratio": 0.01, "compaction_wait_seconds": 600},
    )
    config = config_from_mapping(document, source="test")
    maintainer = IcebergTableMaintainer(world.catalog, StagedFileStore())
    compaction = SparkCompaction(
        config, maintainer, runner, DocumentStore(), new_job_id=new_compaction_id, poll_seconds=0.2
    )
    outcome, _planned = compaction.compact(
        config.mappings[0],
        TABLE,
        data_prefix=str(world.root / "compacted"),
        health=maintainer.health(TABLE, small_file_bytes=1 << 30),
        dry_run=False,
        force=False,  # due for its delete files alone
    )
    return outcome


@pytest.mark.slow
def test_the_spark_compaction_job_folds_deletes_and_no_deleted_row_comes_back(
    tmp_path: Path, spark: Any, local_runner: Any
) -> None:
    world, model = mor_world(tmp_path), {}
    history(world, model)
    outcome = spark_compaction(world, local_runner)
    assert outcome is not None
    assert outcome.committed
    table = world.catalog.load_table(TABLE)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary.operation.value == "replace"
    assert snapshot.summary["total-delete-files"] == "0"
    readers_agree(world, model, spark)
    world.write(0, [change(model, 2, None), change(model, 7, "d7")])
    world.run()  # deletes rows of the job's files again: the next job folds those too
    assert spark_compaction(world, local_runner).committed
    assert snapshot_files(world.catalog.load_table(TABLE))[1] == []
    readers_agree(world, model, spark)
