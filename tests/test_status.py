"""Status on real parts: moto server S3, SQLite or etcd checkpoints, a SQLite Iceberg catalog, the real
launcher and run steps for attempts. Every number is checked exactly."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.catalog import Catalog

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.iceberg_catalog import load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, make_s3_client
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.adapters.step_functions import StepFunctionsRunStarter
from kafscale_iceberg.cli import main
from kafscale_iceberg.commands.status import render_status
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.exceptions import UnmappedTopicError
from kafscale_iceberg.metrics import PrometheusMetricsSink, record_status
from kafscale_iceberg.ports import CheckpointStore
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.launch import Launcher, LaunchStatus
from kafscale_iceberg.services.run_steps import RunSteps
from kafscale_iceberg.services.status import PartitionStatus, StatusService, TopicStatus
from tests.support.config_documents import local_document
from tests.support.iceberg_runs import RunFactory, sql_settings
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

TOPIC, TABLE, NAMESPACE = "orders", "lake.orders", "prod"
TIMESTAMP_BASE = 1_790_000_000_000
"""RunFactory's results: a partition's newest record timestamp is this plus its last offset."""


class World:
    """A KafScale bucket, a checkpoint store, a SQLite catalog, and a status service over them."""

    def __init__(self, moto: MotoEndpoint, tmp_path: Path, store: CheckpointStore) -> None:
        self.root = tmp_path
        self.s3: Any = moto.client("s3")
        self.bucket = moto.new_bucket()
        self.store = store
        catalog = sql_settings(tmp_path)
        self.config_data: dict[str, Any] = local_document(
            tmp_path,
            moto,
            bucket=self.bucket,
            namespace=NAMESPACE,
            runs={"location": str(tmp_path / "runs")},
            mappings=[{"topic": TOPIC, "table": TABLE, "create_table_if_missing": True}],
        )
        self.config: KafscaleConfig = config_from_mapping(self.config_data, source="test")
        self.catalog: Catalog = load_iceberg_catalog(catalog)
        self.tables = IcebergTableCommitter(self.catalog)
        self.s3_calls: list[tuple[str, dict[str, Any]]] = []
        client = make_s3_client(moto.s3_settings())
        client.meta.events.register("before-parameter-build.s3", self._record_call)
        self.segments = S3SegmentStore(client, self.bucket, NAMESPACE)
        self.documents = DocumentStore(moto.s3_settings())
        self.now_ms = int(time.time() * 1000) + 100_000
        self.status = StatusService(
            self.config, store, self.segments, self.tables, self.documents, clock=lambda: self.now_ms / 1000
        )
        self.runs = RunFactory(tmp_path, topic=TOPIC, table=TABLE, dead_letter_table=f"{TABLE}__dlq")

    def _record_call(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.s3_calls.append((model.name, dict(params)))

    def put(self, partition: int, base: int, count: int) -> None:
        put_segment(self.s3, self.bucket, NAMESPACE, TOPIC, partition, base, count)

    def landed_ms(self, partition: int, base: int) -> int:
        """The `.kfs`'s S3 LastModified, as the listing reports it."""
        key = format_segment_key(NAMESPACE, TOPIC, partition, base)
        head = self.s3.head_object(Bucket=self.bucket, Key=key)
        return int(head["LastModified"].timestamp() * 1000)

    def commit_run(self, ranges: Mapping[int, tuple[int, int]]) -> str:
        """Commit a run over `ranges` to the table and the store (as the commit step does); its id."""
        plan = self.runs.plan(ranges)
        result = self.runs.result(plan)
        CommitService(self.tables, self.store).commit_run(
            plan, result, self.claim(plan.run_id), TablePolicy(create_table_if_missing=True)
        )
        return plan.run_id

    def claim(self, run_id: str, owner: str = "test") -> LeaseGrant:
        grant = self.store.claim_lease(TOPIC, owner_id=owner, run_id=run_id)
        assert isinstance(grant, LeaseGrant), grant
        return grant

    def set_store(self, offsets: Mapping[int, tuple[int, int]], *, rewind: bool = False) -> None:
        """Write `{partition: (offset, last_timestamp_ms)}` to the store only, under a lease."""
        grant = self.claim("hand-edit")
        updates = {p: OffsetUpdate(o, t) for p, (o, t) in offsets.items()}
        if rewind:
            self.store.reset_offsets(grant, updates)
        else:
            self.store.commit_offsets(grant, updates)
        self.store.release_lease(grant)

    def topic(self) -> TopicStatus:
        (topic,) = self.status.report().topics
        return topic


@pytest.fixture
def world(moto_server: MotoEndpoint, tmp_path: Path, store: CheckpointStore) -> World:
    return World(moto_server, tmp_path, store)


@pytest.fixture
def sqlite_world(moto_server: MotoEndpoint, tmp_path: Path) -> World:
    return World(moto_server, tmp_path, SqliteCheckpointStore(tmp_path / "offsets.sqlite"))


def test_lag_is_the_newest_complete_offset_minus_the_committed_one(world: World) -> None:
    for base in (0, 10, 20):
        world.put(0, base, 10)
    world.put(1, 0, 5)
    run_id = world.commit_run({0: (-1, 9)})

    topic = world.topic()

    stored = world.store.load_committed_offsets(TOPIC).state(0)
    assert stored is not None
    assert topic.partitions == (
        PartitionStatus(
            partition=0,
            committed_offset=9,
            table_offset=9,
            store_offset=9,
            newest_offset=29,
            lag_records=20,
            lag_seconds=(world.now_ms - (TIMESTAMP_BASE + 9)) / 1000,
            pending_segments=2,
            blocked_segment=None,
            last_record_timestamp_ms=TIMESTAMP_BASE + 9,
            store_updated_at_ms=stored.updated_at_ms,
            watermark_age_seconds=(world.now_ms - (TIMESTAMP_BASE + 9)) / 1000,
        ),
        # Nothing committed: the table records the topic but not this partition; the oldest pending
        # segment's landing time stands in for a committed record's timestamp.
        PartitionStatus(
            partition=1,
            committed_offset=-1,
            table_offset=-1,
            store_offset=-1,
            newest_offset=4,
            lag_records=5,
            lag_seconds=(world.now_ms - world.landed_ms(1, 0)) / 1000,
            pending_segments=1,
            blocked_segment=None,
            last_record_timestamp_ms=None,
            store_updated_at_ms=None,
        ),
    )
    snapshot = world.catalog.load_table(TABLE).current_snapshot()
    assert snapshot is not None
    assert (topic.table_exists, topic.last_commit_ms, topic.last_commit_source) == (
        True,
        snapshot.timestamp_ms,
        "table",
    )
    assert (topic.last_run_id, topic.lease, topic.run_in_flight, topic.consecutive_failures) == (
        run_id,
        None,
        None,
        0,
    )
    assert topic.lag_records == 25


def test_a_caught_up_partition_has_no_lag(world: World) -> None:
    world.put(0, 0, 10)
    world.commit_run({0: (-1, 9)})
    (partition,) = world.topic().partitions
    assert (partition.committed_offset, partition.newest_offset, partition.lag_records) == (9, 9, 0)
    assert (partition.lag_seconds, partition.pending_segments) == (0.0, 0)
    # Caught up, the watermark still ages: how old the newest committed record is.
    assert partition.watermark_age_seconds == (world.now_ms - (TIMESTAMP_BASE + 9)) / 1000


def test_table_and_store_offsets_are_shown_apart_and_the_table_wins(sqlite_world: World) -> None:
    world = sqlite_world
    for base in (0, 10, 20):
        world.put(0, base, 10)
    world.commit_run({0: (-1, 9)})
    world.set_store({0: (5, 123)}, rewind=True)  # a hand edit: the store now lags the table

    (partition,) = world.topic().partitions

    assert (partition.table_offset, partition.store_offset, partition.committed_offset) == (9, 5, 9)
    assert (partition.newest_offset, partition.lag_records) == (29, 20)
    assert partition.last_record_timestamp_ms == 123
    assert partition.lag_seconds == (world.now_ms - 123) / 1000


def test_a_table_never_written_adopts_the_store_and_its_commit_time(sqlite_world: World) -> None:
    world = sqlite_world
    world.put(0, 0, 10)
    world.put(0, 10, 10)
    world.set_store({0: (9, TIMESTAMP_BASE)})  # e.g. the Go processor's offsets

    topic = world.topic()

    stored = world.store.load_committed_offsets(TOPIC).state(0)
    assert stored is not None
    assert (topic.table_exists, topic.last_run_id) == (False, None)
    assert (topic.last_commit_ms, topic.last_commit_source) == (stored.updated_at_ms, "checkpoints")
    (partition,) = topic.partitions
    assert (partition.table_offset, partition.store_offset, partition.committed_offset) == (None, 9, 9)
    assert (partition.newest_offset, partition.lag_records) == (19, 10)


def test_a_segment_without_its_index_blocks_its_partition_but_not_the_newest_offset(
    sqlite_world: World,
) -> None:
    world = sqlite_world
    world.put(0, 0, 10)
    blocked = format_segment_key(NAMESPACE, TOPIC, 0, 10)
    world.s3.put_object(Bucket=world.bucket, Key=blocked, Body=b"x" * 64)
    world.put(0, 20, 10)

    (partition,) = world.topic().partitions

    assert (partition.pending_segments, partition.blocked_segment) == (1, blocked)
    assert (partition.newest_offset, partition.lag_records) == (29, 30)


def test_status_lists_only_after_the_committed_offset(sqlite_world: World) -> None:
    world = sqlite_world
    for base in range(30):  # thirty committed one-record segments
        world.put(0, base, 1)
    world.put(0, 30, 5)
    world.put(0, 35, 5)
    world.set_store({0: (29, TIMESTAMP_BASE)})
    world.s3_calls.clear()

    (partition,) = world.topic().partitions

    assert (partition.newest_offset, partition.lag_records, partition.pending_segments) == (39, 10, 2)
    listings = [params for name, params in world.s3_calls if name == "ListObjectsV2"]
    gets = [params["Key"] for name, params in world.s3_calls if name == "GetObject"]
    partitions_listing, segments_listing = listings
    assert partitions_listing["Delimiter"] == "/"
    assert segments_listing["StartAfter"] == format_segment_key(NAMESPACE, TOPIC, 0, 29)
    assert gets == [format_segment_key(NAMESPACE, TOPIC, 0, 35)]  # one footer, read once


class Steps:
    """The real launcher (runs start on a moto state machine) and abort step over the world's parts."""

    def __init__(self, world: World, moto: MotoEndpoint) -> None:
        sfn: Any = moto.client("stepfunctions")
        arn = sfn.create_state_machine(
            name=f"runs-{world.bucket}",
            definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}',
            roleArn="arn:aws:iam::123456789012:role/steps",
        )["stateMachineArn"]
        self.launcher = Launcher(
            world.config,
            world.store,
            world.segments,
            world.documents,
            StepFunctionsRunStarter(sfn, arn),
            owner_id="test-launcher",
        )
        # The abort step never touches the job runner.
        self.steps = RunSteps(world.config.runs, world.store, None, world.documents)  # type: ignore[arg-type]

    def launch(self) -> Any:
        # The retry backoff after each abort is not under test here (tests/test_launcher.py has it).
        outcome = self.launcher.launch(TOPIC, ignore_backoff=True)
        assert outcome.status is LaunchStatus.STARTED, outcome.detail
        assert outcome.ticket is not None
        return outcome.ticket


def test_consecutive_failures_agree_with_the_launchers_attempts(
    sqlite_world: World, moto_server: MotoEndpoint
) -> None:
    world = sqlite_world
    world.put(0, 0, 10)
    world.put(1, 0, 4)
    runs = Steps(world, moto_server)

    first = runs.launch()
    topic = world.topic()
    assert topic.lease is not None
    assert (topic.run_in_flight, topic.lease.owner_id, topic.lease.since_ms) == (
        first.run_id,
        "test-launcher",
        first.grant.claimed_at_ms,
    )
    assert topic.consecutive_failures == 0

    runs.steps.abort(first, "job failed")
    assert (world.topic().run_in_flight, world.topic().consecutive_failures) == (None, 1)

    second = runs.launch()
    assert second.attempt == 1
    assert (world.topic().run_in_flight, world.topic().consecutive_failures) == (second.run_id, 1)

    runs.steps.abort(second, "job failed: the commit was refused (bad column)")
    stuck = world.topic()
    assert stuck.consecutive_failures == 2
    # A stuck topic says why on each partition it holds back (before: `problem` null everywhere).
    reasons = {p.partition: p.problem for p in stuck.partitions}
    assert reasons[0] == (
        f"stuck: 2 attempts of offsets 0..9 ended uncommitted; the last, run {second.run_id}, aborted: "
        "job failed: the commit was refused (bad column)"
    )
    assert str(reasons[1]).startswith("stuck: 2 attempts of offsets 0..3 ended")
    assert stuck.to_json()["partitions"][0]["problem"] == reasons[0]  # type: ignore[index]
    assert f"  partition 0 waits: {reasons[0]}" in render_status(world.status.report()).splitlines()
    third = runs.launch()
    assert third.attempt == 2  # the launcher counts the same two aborted attempts
    assert (world.topic().run_in_flight, world.topic().consecutive_failures) == (third.run_id, 2)


def test_a_new_segment_moves_the_range_on_and_the_count_restarts(
    sqlite_world: World, moto_server: MotoEndpoint
) -> None:
    world = sqlite_world
    world.put(0, 0, 10)
    runs = Steps(world, moto_server)
    runs.steps.abort(runs.launch(), "job failed")
    assert world.topic().consecutive_failures == 1

    world.put(0, 10, 10)

    assert world.topic().consecutive_failures == 0
    assert runs.launch().attempt == 0


def test_status_gauges_for_prometheus(sqlite_world: World) -> None:
    world = sqlite_world
    world.put(0, 0, 10)
    world.put(0, 10, 10)
    world.commit_run({0: (-1, 9)})
    sink = PrometheusMetricsSink()

    record_status(sink, world.status.report())

    scraped = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(sink.exposition().decode())
        for sample in family.samples
    }
    labels = (("partition", "0"), ("topic", TOPIC))
    assert scraped[("kafscale_processor_lag_records", labels)] == 10
    assert scraped[("kafscale_processor_last_offset", labels)] == 9
    assert scraped[("kafscale_processor_watermark_offset", labels)] == 9
    assert scraped[("kafscale_processor_watermark_timestamp_ms", labels)] == TIMESTAMP_BASE + 9
    assert scraped[("kafscale_processor_consecutive_failures", (("topic", TOPIC),))] == 0


# -- the command ------------------------------------------------------------------------------------


def _config_file(world: World) -> Path:
    path = world.root / "config.json"
    path.write_text(json.dumps(world.config_data))
    return path


def test_status_command_prints_the_report_as_json(
    sqlite_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world = sqlite_world
    for base in (0, 10):
        world.put(0, base, 10)
    run_id = world.commit_run({0: (-1, 9)})

    assert main(["status", "--config", str(_config_file(world)), "--json"]) == 0

    document = json.loads(capsys.readouterr().out)
    (topic,) = document["topics"]
    assert {k: topic[k] for k in ("topic", "table", "table_exists", "last_run_id", "run_in_flight")} == {
        "topic": TOPIC,
        "table": TABLE,
        "table_exists": True,
        "last_run_id": run_id,
        "run_in_flight": None,
    }
    (partition,) = topic["partitions"]
    assert {
        k: partition[k] for k in ("committed_offset", "table_offset", "store_offset", "newest_offset")
    } == {
        "committed_offset": 9,
        "table_offset": 9,
        "store_offset": 9,
        "newest_offset": 19,
    }
    assert (partition["lag_records"], topic["lag_records"], topic["consecutive_failures"]) == (10, 10, 0)
    health = topic["table_health"]
    assert {k: health[k] for k in ("files", "small_files", "snapshots", "last_compaction_ms")} == {
        "files": 1,
        "small_files": 1,
        "snapshots": 1,
        "last_compaction_ms": None,
    }


def test_status_command_prints_a_readable_table(
    sqlite_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world = sqlite_world
    for base in (0, 10):
        world.put(0, base, 10)
    world.commit_run({0: (-1, 9)})
    world.claim("orders-abc-a1", owner="host-7/123")

    assert main(["status", "--config", str(_config_file(world))]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert f"{TOPIC} -> {TABLE}" in lines
    assert "  lease         host-7/123, run in flight orders-abc-a1 since" in "\n".join(lines)
    assert "  failures      1 consecutive" in lines
    assert "  table health  1 files (1 small), 1 snapshots, last maintenance -, last compaction -" in lines
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("partition"))
    assert lines[header].split()[:8] == [
        "partition",
        "committed",
        "table",
        "store",
        "newest",
        "lag",
        "lag_s",
        "wm_age_s",
    ]
    row = lines[header + 1].split()
    assert row[:6] == ["0", "9", "9", "9", "19", "10"]
    assert float(row[6]) > 0
    assert float(row[7]) == pytest.approx(float(row[6]), abs=0.1)


def test_status_command_names_an_unreadable_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--config", str(tmp_path / "missing.yaml")]) == 1
    assert "kafscale-iceberg status:" in capsys.readouterr().err


def test_unmapped_topics_are_refused(sqlite_world: World) -> None:
    with pytest.raises(UnmappedTopicError, match="'payments' has no mapping"):
        sqlite_world.status.report(["payments"])


def test_a_malformed_or_truncated_segment_is_reported_beside_the_rest(sqlite_world: World) -> None:
    """Issue 12 §4: `status` exited 1 for every topic because of one such segment."""
    world = sqlite_world
    world.put(0, 0, 10)
    world.s3.put_object(Bucket=world.bucket, Key=f"{NAMESPACE}/{TOPIC}/0/segment-57.kfs", Body=b"x")
    world.put(1, 0, 4)
    world.put(2, 0, 4)
    truncated = format_segment_key(NAMESPACE, TOPIC, 2, 4)
    world.s3.put_object(Bucket=world.bucket, Key=truncated, Body=b"KFS not finished")
    world.s3.put_object(Bucket=world.bucket, Key=truncated.replace(".kfs", ".index"), Body=b"")
    topic = world.topic()
    by_partition = {p.partition: p for p in topic.partitions}
    assert by_partition[0].problem is not None
    assert "segment-57.kfs" in by_partition[0].problem
    assert (by_partition[1].problem, by_partition[1].pending_segments, by_partition[1].newest_offset) == (
        None,
        1,
        3,
    )
    assert by_partition[2].problem is not None
    assert truncated in by_partition[2].problem
    assert "partition 0 waits" in render_status(world.status.report())


def _commit_two_runs_counting(
    world: World, counter: str, first: dict[str, int], second: dict[str, int]
) -> None:
    """Two runs of ten records each committed, their results' `counts.<counter>` being `first`, `second`."""
    for base in (0, 10):
        world.put(0, base, 10)
    for (start, end), counts in (((-1, 9), first), ((9, 19), second)):
        plan = world.runs.plan({0: (start, end)})
        result = world.runs.result(plan)
        result = result.model_copy(update={"counts": result.counts.model_copy(update={counter: counts})})
        CommitService(world.tables, world.store).commit_run(
            plan, result, world.claim(plan.run_id), TablePolicy(create_table_if_missing=True)
        )


def test_conversion_failures_are_summed_over_the_topics_commits_and_printed(
    sqlite_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world = sqlite_world
    _commit_two_runs_counting(world, "conversion_failures", {"at": 2, "total": 1}, {"at": 3})
    assert world.topic().conversion_failures == {"at": 5, "total": 1}
    assert main(["status", "--config", str(_config_file(world))]) == 0
    out = capsys.readouterr().out
    assert "  not converted at 5, total 1 (stored null; the value column keeps them)" in out.splitlines()


def test_dead_letters_are_summed_per_reason_over_the_topics_commits_and_printed(
    sqlite_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world = sqlite_world
    first, second = {"undecodable": 2, "unknown_schema": 1}, {"undecodable": 3, "wire_format": 1}
    _commit_two_runs_counting(world, "dead_letter_reasons", first, second)
    assert world.topic().dead_letters == {"undecodable": 5, "unknown_schema": 1, "wire_format": 1}
    assert main(["status", "--config", str(_config_file(world))]) == 0
    out = capsys.readouterr().out
    expected = (
        "  dead letters undecodable 5, unknown_schema 1, wire_format 1"
        " (rows of the dead-letter table, by error_kind)"
    )
    assert expected in out.splitlines()


def test_a_quarantined_segment_is_shown_with_the_command_that_brings_it_back(
    sqlite_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world = sqlite_world
    world.put(0, 0, 10)
    world.put(0, 10, 10)
    plan = world.runs.plan({0: (-1, 19)})
    CommitService(world.tables, world.store).commit_run(
        plan,
        world.runs.result(plan, quarantined={0: (10, 19)}),
        world.claim(plan.run_id),
        TablePolicy(create_table_if_missing=True),
    )

    (quarantined,) = world.topic().quarantined
    assert quarantined.span == (0, 10, 19)
    assert main(["status", "--config", str(_config_file(world)), "--json"]) == 0
    (topic,) = json.loads(capsys.readouterr().out)["topics"]
    assert [(q["partition"], q["first"], q["last"]) for q in topic["quarantined"]] == [(0, 10, 19)]
    assert main(["status", "--config", str(_config_file(world))]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "quarantined" in x)
    assert line.startswith(f"  partition 0 quarantined: offsets 10..19 of {quarantined.segment_key} skipped")
    assert line.endswith(f"replay --config … --topic {TOPIC} --partition 0 --from-offset 10 --reset-offsets")


def test_a_topic_with_more_pending_than_one_run_takes_shows_falling_behind(
    sqlite_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status` compares the pending bytes with what the launcher's next run takes
    (`runs.max_bytes_per_run`, capped by the runner: domain/run_sizing.py) and says what to raise."""
    world = sqlite_world
    for base in (0, 10, 20):
        world.put(0, base, 10)
    world.put(1, 0, 10)
    sizes = [
        world.s3.head_object(Bucket=world.bucket, Key=format_segment_key(NAMESPACE, TOPIC, p, b))[
            "ContentLength"
        ]
        for p, b in ((0, 0), (0, 10), (0, 20), (1, 0))
    ]
    keeping_up = world.topic().backlog
    assert keeping_up is not None
    assert (keeping_up.falling_behind, keeping_up.pending_bytes) == (False, sum(sizes))
    world.config_data["runs"]["max_bytes_per_run"] = 2 * max(sizes)

    assert main(["status", "--config", str(_config_file(world)), "--json"]) == 0
    (topic,) = json.loads(capsys.readouterr().out)["topics"]
    backlog = topic["backlog"]
    assert (backlog["falling_behind"], backlog["pending_bytes"], backlog["run_bytes"]) == (
        True,
        sum(sizes),
        2 * max(sizes),
    )
    service = StatusService(
        config_from_mapping(world.config_data, source="test"),
        world.store,
        world.segments,
        world.tables,
        world.documents,
        clock=lambda: world.now_ms / 1000,
    )
    (status,) = service.report().topics
    assert status.backlog is not None
    oldest = min(world.landed_ms(p, b) for p, b in ((0, 0), (0, 10), (0, 20), (1, 0)))
    minutes = (world.now_ms - oldest) / 60_000
    assert status.backlog.arriving_bytes_per_min == pytest.approx(sum(sizes) / minutes, rel=1e-6)
    assert [p["pending_bytes"] for p in topic["partitions"]] == [sum(sizes[:3]), sizes[3]]
    assert main(["status", "--config", str(_config_file(world))]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  backlog")]
    assert "falling behind: " in line
    assert "raise runs.max_bytes_per_run or EmrMaximumCpu" in line
