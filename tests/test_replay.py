"""Replay and `replay --reset-offsets` on real parts: moto server (S3 segments, a FIFO work queue, Step
Functions for the launcher), a SQLite Iceberg catalog, and the SQLite or etcd checkpoint store.

The table is produced by committing runs through the commit step (`RunFactory` writes the files a
Spark job would), over real segments in S3 holding the same offsets, so the launcher's view of the
bucket and the table's offsets agree. Re-ingestion after a reset is driven the same way: the
launcher plans the range from the rewound offsets, the commit step commits it.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog

from functions import runtime
from kafscale_iceberg import cli
from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.adapters.step_functions import StepFunctionsRunStarter
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import load_config_from
from kafscale_iceberg.domain.commits import QuarantinedRange, TableCommit, TableState
from kafscale_iceberg.domain.events import WorkItem, parse_topic_message
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.replay import ReplayRequest
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.exceptions import OffsetResetRefusedError, ReplayLeaseBusyError, ReplayRequestError
from kafscale_iceberg.ports import CheckpointStore
from kafscale_iceberg.segments.keys import format_segment_key
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from kafscale_iceberg.services.launch import Launcher, LaunchStatus
from kafscale_iceberg.services.offset_reset import OffsetReset
from kafscale_iceberg.services.replay import ReplayService
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.iceberg_runs import RunFactory
from tests.support.lambdas import LambdaContext, emf_records, emf_values
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

TOPIC, TABLE, DLQ, NS = "orders", "lake.orders", "lake.orders__dlq", "ns"
CREATE = TablePolicy(create_table_if_missing=True)
EVENTS = Path(__file__).resolve().parent.parent / "events"
# What the world commits: partition 0 in two runs (offsets 0-29), partition 1 (0-19); two dead letters.
SEGMENTS = {0: [(0, 10), (10, 10), (20, 10)], 1: [(0, 10), (10, 10)]}
FIRST_RUN, SECOND_RUN = {0: (-1, 19), 1: (-1, 9)}, {0: (19, 29), 1: (9, 19)}
DEAD = {0: [15, 25]}
ALL_ROWS = sorted([(0, o) for o in range(30) if o not in DEAD[0]] + [(1, o) for o in range(20)])


class World:
    """A KafScale bucket, a FIFO work queue, a SQLite catalog, a checkpoint store, wired by the config."""

    def __init__(
        self,
        moto: MotoEndpoint,
        root: Path,
        monkeypatch: pytest.MonkeyPatch,
        *,
        etcd: EtcdServer | None = None,
        work_queue: bool = True,
    ) -> None:
        self.moto = moto
        self.root = root
        self.s3: Any = moto.client("s3")
        self.sqs: Any = moto.client("sqs")
        self.bucket = moto.new_bucket()
        runs_bucket = moto.new_bucket()
        self.queue_url = ""
        if work_queue:
            self.queue_url = self.sqs.create_queue(
                QueueName=f"{self.bucket}-work.fifo", Attributes={"FifoQueue": "true"}
            )["QueueUrl"]
        data = local_document(
            root,
            moto,
            bucket=self.bucket,
            namespace=NS,
            etcd_url=etcd.url if etcd is not None else None,
            runs={"location": f"s3://{runs_bucket}/runs"},
            notifications={"work_queue_url": self.queue_url},
            mappings=[{"topic": TOPIC, "table": TABLE, "create_table_if_missing": True}],
        )
        self.config_path = root / "config.yaml"
        self.config_path.write_text(json.dumps(data))
        monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto.url)
        monkeypatch.setenv("AWS_ENDPOINT_URL_STEPFUNCTIONS", moto.url)
        self.config = load_config_from(str(self.config_path))
        self.assembly = Assembly(self.config, owner_id="replay-test")
        self.service = self.assembly.replay
        self.checkpoints: CheckpointStore = self.assembly.checkpoints
        self.commits: CommitService = self.assembly.commits
        self.catalog: Catalog = load_iceberg_catalog(CatalogSettings.from_config(self.config))
        self.runs = RunFactory(root, topic=TOPIC, table=TABLE, dead_letter_table=DLQ)

    # -- producing a table -------------------------------------------------------------------------

    def put_segments(self, segments: Mapping[int, Sequence[tuple[int, int]]] = SEGMENTS) -> None:
        for partition, pieces in segments.items():
            for base, count in pieces:
                put_segment(self.s3, self.bucket, NS, TOPIC, partition, base, count)

    def commit(
        self,
        ranges: Mapping[int, tuple[int, int]],
        *,
        dead: Mapping[int, Sequence[int]] | None = None,
        quarantined: Mapping[int, tuple[int, int]] | None = None,
        lease: LeaseGrant | None = None,
    ) -> None:
        """Commit a run of `ranges` through the commit step, as the steps after a Spark job would."""
        plan = self.runs.plan(ranges)
        dead_letters = {p: [o for o in (dead or {}).get(p, ()) if s < o <= e] for p, (s, e) in ranges.items()}
        result = self.runs.result(plan, dead_letters=dead_letters, quarantined=quarantined)
        self.commits.commit_run(plan, result, lease or self.claim(plan.run_id), CREATE)

    def produce_table(self) -> None:
        self.put_segments()
        self.commit(FIRST_RUN, dead=DEAD)
        self.commit(SECOND_RUN, dead=DEAD)

    def claim(self, run_id: str, owner: str = "committer") -> LeaseGrant:
        grant = self.checkpoints.claim_lease(TOPIC, owner_id=owner, run_id=run_id)
        assert isinstance(grant, LeaseGrant), grant
        return grant

    # -- looking at it -----------------------------------------------------------------------------

    def rows(self, table: str = TABLE) -> list[tuple[int, int]]:
        arrow = self.catalog.load_table(table).scan(selected_fields=("partition", "offset")).to_arrow()
        return sorted(zip(arrow["partition"].to_pylist(), arrow["offset"].to_pylist(), strict=True))

    def metadata(self, table: str = TABLE) -> str:
        return str(self.catalog.load_table(table).metadata_location)

    def marker(self, table: str = TABLE) -> dict[int, int]:
        return dict(self.commits._tables.read_state(table, TOPIC).marker.offsets or {})

    def quarantine(self, table: str = TABLE) -> tuple[QuarantinedRange, ...]:
        """The table's `kafscale.quarantine.<topic>` list."""
        return self.assembly.tables.read_state(table, TOPIC).marker.quarantined

    def store(self) -> dict[int, int]:
        return {p: s.offset for p, s in self.checkpoints.load_committed_offsets(TOPIC).states.items()}

    def state(self) -> tuple[object, ...]:
        """Everything a replay may change: rows, metadata files, markers, store offsets."""
        return (
            self.rows(TABLE),
            self.rows(DLQ),
            self.metadata(TABLE),
            self.metadata(DLQ),
            self.marker(TABLE),
            self.marker(DLQ),
            self.store(),
        )

    def drain(self) -> list[dict[str, Any]]:
        """Every message on the work queue (received and deleted)."""
        messages: list[dict[str, Any]] = []
        while True:
            batch = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], WaitTimeSeconds=0
            ).get("Messages", [])
            if not batch:
                return messages
            for message in batch:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
            messages.extend(batch)

    def launcher(self) -> Launcher:
        sfn: Any = self.moto.client("stepfunctions")
        self.state_machine_arn = sfn.create_state_machine(
            name=f"runs-{self.bucket}",
            definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}',
            roleArn="arn:aws:iam::123456789012:role/kafscale-iceberg-job",
        )["stateMachineArn"]
        return Launcher(
            self.config,
            self.checkpoints,
            self.assembly.segments,
            self.assembly.documents,
            StepFunctionsRunStarter(sfn, self.state_machine_arn),
            owner_id="launcher",
        )

    def reingest(self, dead: Mapping[int, Sequence[int]] = DEAD) -> RunPlan:
        """What the pipeline does with the re-enqueued items: the launcher plans, the commit step commits."""
        outcome = self.launcher().launch(TOPIC)
        assert outcome.status is LaunchStatus.STARTED, outcome.detail
        assert outcome.ticket is not None
        plan = RunPlan.model_validate_json(self.assembly.documents.read_text(outcome.ticket.plan_uri))
        self.commit(
            {p.partition: (p.start_exclusive, p.end_inclusive) for p in plan.partitions},
            dead=dead,
            lease=outcome.ticket.grant,
        )
        return plan


@pytest.fixture
def world(moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return World(moto_server, tmp_path, monkeypatch)


@pytest.fixture(params=["sqlite", "etcd"])
def any_store_world(
    request: pytest.FixtureRequest, moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    etcd = request.getfixturevalue("etcd_server") if request.param == "etcd" else None
    world = World(moto_server, tmp_path, monkeypatch, etcd=etcd)
    yield world
    close = getattr(world.checkpoints, "close", None)
    if close is not None:
        close()


def _reset(partitions: Sequence[int] | None = None, from_offset: int | None = 10) -> ReplayRequest:
    return ReplayRequest(
        topic=TOPIC,
        partitions=None if partitions is None else tuple(partitions),
        from_offset=from_offset,
        reset_offsets=True,
    )


# -- replay of a committed range ---------------------------------------------------------------------


def test_replaying_a_committed_range_changes_nothing_and_the_launcher_stays_idle(world: World) -> None:
    world.produce_table()
    before = world.state()

    outcome = world.service.replay(ReplayRequest(topic=TOPIC))

    assert outcome.summary() == (
        "5 segments re-enqueued; all at or below the committed offsets (partition 0: 29, "
        "partition 1: 19): nothing will change"
    )
    messages = world.drain()
    assert len(messages) == 5
    assert world.state() == before
    # The launcher, fed these items, plans from the committed offsets: nothing to run, no lease taken.
    assert {parse_topic_message(m["Body"]).topic for m in messages} == {TOPIC}
    launched = world.launcher().launch(TOPIC)
    assert launched.status is LaunchStatus.IDLE
    assert world.checkpoints.read_lease_holder(TOPIC) is None
    assert world.state() == before


def test_replay_of_one_committed_partition_names_its_committed_offset(world: World) -> None:
    world.produce_table()

    outcome = world.service.replay(ReplayRequest(topic=TOPIC, partitions=(1,), from_offset=10))

    assert (
        outcome.summary() == "1 segment re-enqueued; all at or below committed offset 19: nothing will change"
    )


def test_replay_says_which_offsets_are_not_committed_yet(world: World) -> None:
    world.produce_table()
    put_segment(world.s3, world.bucket, NS, TOPIC, 0, 30, 5)

    outcome = world.service.replay(ReplayRequest(topic=TOPIC, partitions=(0,), from_offset=25))

    assert outcome.summary() == (
        "2 segments re-enqueued; to be ingested by the next runs "
        "(`status` shows them): partition 0 offsets 30-34 (not committed yet)"
    )


# -- what is enqueued --------------------------------------------------------------------------------


def test_replay_enqueues_one_work_item_per_complete_segment_with_distinct_deduplication_ids(
    world: World,
) -> None:
    world.put_segments()
    incomplete = format_segment_key(NS, TOPIC, 1, 20)
    world.s3.put_object(Bucket=world.bucket, Key=incomplete, Body=b"no index yet")

    outcome = world.service.replay(ReplayRequest(topic=TOPIC, from_offset=10))

    messages = world.drain()
    items = [parse_topic_message(m["Body"]) for m in messages]
    assert all(isinstance(i, WorkItem) for i in items)
    assert sorted((i.partition, i.base_offset, i.last_offset) for i in items if isinstance(i, WorkItem)) == [
        (0, 10, 19),
        (0, 20, 29),
        (1, 10, 19),
    ]
    dedup_ids = [m["Attributes"]["MessageDeduplicationId"] for m in messages]
    assert len(set(dedup_ids)) == 3
    assert all(d.endswith(f"#{outcome.nonce}") for d in dedup_ids)
    assert {m["Attributes"]["MessageGroupId"] for m in messages} == {TOPIC}
    (partition_1,) = [p for p in outcome.plan.partitions if p.partition == 1]
    assert partition_1.incomplete == (incomplete,)


def test_a_replay_within_the_deduplication_window_is_not_dropped(world: World) -> None:
    world.put_segments({0: [(0, 10)]})
    routed = WorkItem(
        topic=TOPIC,
        partition=0,
        base_offset=0,
        last_offset=9,
        key=format_segment_key(NS, TOPIC, 0, 0),
        size=1,
    )
    world.assembly.work_queue.send_work_items([routed])
    world.assembly.work_queue.send_work_items([routed])  # a duplicate notification: deduplicated

    first = world.service.replay(ReplayRequest(topic=TOPIC))
    second = world.service.replay(ReplayRequest(topic=TOPIC))

    dedup_ids = sorted(m["Attributes"]["MessageDeduplicationId"] for m in world.drain())
    key = routed.key
    assert dedup_ids == sorted([key, f"{key}#{first.nonce}", f"{key}#{second.nonce}"])


def test_without_a_work_queue_nothing_is_enqueued_and_the_polling_runtime_is_named(
    moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(moto_server, tmp_path, monkeypatch, work_queue=False)
    world.produce_table()

    outcome = world.service.replay(_reset())

    assert outcome.enqueued == 0
    assert outcome.summary() == (
        "3 segments in the range; no work queue configured (notifications.work_queue_url): nothing "
        "enqueued - `kafscale-iceberg run` picks the range up by its polling discovery (the rewound "
        "offsets are enough); to be ingested by the next runs "
        "(`status` shows them): partition 0 offsets 10-29 (rewound), partition 1 "
        "offsets 10-19 (rewound)"
    )
    assert world.store() == {0: 9, 1: 9}


# -- --reset-offsets ---------------------------------------------------------------------------------


def test_reset_offsets_leaves_exactly_one_copy_of_every_record_of_the_range(any_store_world: World) -> None:
    world = any_store_world
    world.produce_table()
    table_metadata_files = len(world.catalog.load_table(TABLE).metadata.metadata_log)

    outcome = world.service.replay(_reset())

    assert outcome.reset_done
    assert world.rows(TABLE) == [(p, o) for p, o in ALL_ROWS if o < 10]
    assert world.rows(DLQ) == []
    assert world.marker(TABLE) == world.marker(DLQ) == world.store() == {0: 9, 1: 9}
    assert world.checkpoints.read_lease_holder(TOPIC) is None
    # The delete and the marker are one catalog commit (one new metadata file) and ONE snapshot: time
    # travel never lands on a half-done reset.
    table = world.catalog.load_table(TABLE)
    assert len(table.metadata.metadata_log) == table_metadata_files + 1
    (reset_snapshot,) = table.snapshots()[2:]
    assert reset_snapshot.summary is not None
    assert (reset_snapshot.summary.operation.value, reset_snapshot.summary["kafscale.reset"]) == (
        "overwrite",
        "true",
    )
    assert len(world.drain()) == 3  # partition 0: segments 10 and 20; partition 1: segment 10

    plan = world.reingest()

    assert plan.start_offsets() == {0: 9, 1: 9}
    assert plan.end_offsets() == {0: 29, 1: 19}
    assert Counter(world.rows(TABLE)) == Counter(ALL_ROWS)  # every (partition, offset) exactly once
    assert world.rows(DLQ) == [(0, 15), (0, 25)]
    assert world.marker(TABLE) == world.store() == {0: 29, 1: 19}


def test_a_table_with_nothing_to_delete_still_records_the_reset_in_one_snapshot(world: World) -> None:
    world.put_segments()
    world.commit(FIRST_RUN, dead=DEAD)  # dead letter 15: the dead-letter table records {0: 19, 1: 9}
    world.commit(SECOND_RUN)  # no dead letters: the dead-letter table's offsets lag the table's

    world.service.replay(_reset(partitions=[0], from_offset=25))

    dead_letters = world.catalog.load_table(DLQ)
    assert len(dead_letters.snapshots()) == 2
    last = dead_letters.snapshots()[-1].summary
    assert last is not None
    assert (last.operation.value, last["kafscale.reset"]) == ("append", "true")  # empty: only the marker
    assert world.rows(DLQ) == [(0, 15)]
    assert world.marker(DLQ) == {0: 24, 1: 9}
    assert world.marker(TABLE) == {0: 24, 1: 19}
    assert world.rows(TABLE) == sorted([(0, o) for o in range(25) if o != 15] + [(1, o) for o in range(20)])


def test_the_preview_says_what_will_be_deleted_and_reingested_and_changes_nothing(world: World) -> None:
    world.produce_table()
    before = world.state()

    plan = world.service.plan(_reset(partitions=[0]))

    assert [(d.table, dict(d.after), d.rows) for d in plan.deletions] == [
        (TABLE, {0: 9}, 18),
        (DLQ, {0: 9}, 2),
    ]
    (partition,) = plan.partitions
    assert (partition.committed, partition.reset_to) == (29, 9)
    assert [(i.base_offset, i.last_offset) for i in partition.items] == [(10, 19), (20, 29)]
    assert world.state() == before
    assert world.drain() == []


def test_a_reset_while_a_run_holds_the_lease_fails_naming_the_holder(any_store_world: World) -> None:
    world = any_store_world
    world.produce_table()
    world.claim("orders-1234-a0", owner="launcher-7")
    before = world.state()

    with pytest.raises(ReplayLeaseBusyError) as raised:
        world.service.replay(_reset())

    message = str(raised.value)
    assert "launcher-7" in message
    assert "orders-1234-a0" in message
    assert "retry" in message
    assert raised.value.transient
    assert world.state() == before
    assert world.drain() == []


def test_a_reset_run_again_deletes_nothing_more_and_ends_in_the_same_state(world: World) -> None:
    world.produce_table()
    world.service.replay(_reset())
    after_first = world.state()

    again = world.service.replay(_reset())

    assert world.state() == after_first  # same rows, no new commit to either table, same offsets
    assert [(d.table, d.rows) for d in again.plan.deletions] == [(TABLE, 0), (DLQ, 0)]
    world.drain()
    world.reingest()
    assert Counter(world.rows(TABLE)) == Counter(ALL_ROWS)


class CrashError(Exception):
    """A process dying at an injected point."""


class DyingTables:
    """The real table committer; the process dies right after its first commit to `table` lands."""

    def __init__(self, inner: IcebergTableCommitter, table: str) -> None:
        self._inner, self._table = inner, table

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, expected: TableState, commit: TableCommit) -> TableState:
        after = self._inner.commit(expected, commit)
        if expected.table == self._table:
            raise CrashError(f"died after the reset commit to {self._table}")
        return after


class DyingStore:
    """The real checkpoint store; the process dies when the offsets are about to be reset, and every
    later call of this process fails too (its lease is never released: it expires)."""

    def __init__(self, inner: CheckpointStore) -> None:
        self._inner, self.dead = inner, False

    def __getattr__(self, name: str) -> Any:
        if self.dead:
            raise CrashError("the process is gone")
        return getattr(self._inner, name)

    def reset_offsets(self, grant: LeaseGrant, updates: Mapping[int, OffsetUpdate]) -> Any:
        self.dead = True
        raise CrashError("died before resetting the store")


@pytest.mark.parametrize("crash", ["after the table's commit", "after both tables, before the store"])
def test_a_reset_that_died_is_finished_by_running_it_again(
    crash: str, moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = {"ms": 1_800_000_000_000}
    world = World(moto_server, tmp_path, monkeypatch)
    store = SqliteCheckpointStore(
        tmp_path / "offsets.sqlite", lease_ttl_seconds=30, now_ms=lambda: clock["ms"]
    )
    world.checkpoints = store
    world.commits = CommitService(world.assembly.tables, store)
    world.produce_table()
    tables: Any = world.assembly.tables
    dying_store: Any = store
    if crash == "after the table's commit":
        tables = DyingTables(world.assembly.tables, TABLE)
    else:
        dying_store = DyingStore(store)
    dying = ReplayService(
        world.config,
        world.assembly.segments,
        dying_store,
        CommitService(tables, dying_store),
        OffsetReset(tables, dying_store),
        world.assembly.work_queue,
        owner_id="dead-replayer",
    )
    survivor = ReplayService(
        world.config,
        world.assembly.segments,
        store,
        world.commits,
        OffsetReset(world.assembly.tables, store),
        world.assembly.work_queue,
        owner_id="replayer",
    )

    with pytest.raises(CrashError):
        dying.replay(_reset())
    if crash != "after the table's commit":  # the dead process never released its lease
        with pytest.raises(ReplayLeaseBusyError, match="dead-replayer"):
            survivor.replay(_reset())
        clock["ms"] += 31_000  # its lease expires
    survivor.replay(_reset())

    assert world.rows(TABLE) == [(p, o) for p, o in ALL_ROWS if o < 10]
    assert world.rows(DLQ) == []
    assert world.marker(TABLE) == world.marker(DLQ) == world.store() == {0: 9, 1: 9}
    world.drain()
    world.reingest()
    assert Counter(world.rows(TABLE)) == Counter(ALL_ROWS)
    assert world.rows(DLQ) == [(0, 15), (0, 25)]


def test_a_reset_whose_first_records_are_no_longer_in_s3_is_refused(world: World) -> None:
    world.put_segments({0: [(10, 10), (20, 10)], 1: [(0, 10), (10, 10)]})  # partition 0's first: expired
    world.commit(FIRST_RUN, dead=DEAD)
    world.commit(SECOND_RUN, dead=DEAD)
    before = world.state()

    with pytest.raises(OffsetResetRefusedError, match=r"partition 0: .* offsets 0-9 are not in S3") as raised:
        world.service.replay(_reset(from_offset=None))

    assert "--from-offset 10" in str(raised.value)
    assert world.state() == before
    world.service.replay(_reset(from_offset=10))  # from the oldest segment on: accepted
    assert world.store() == {0: 9, 1: 9}


def test_a_reset_point_inside_a_quarantined_segment_is_refused_and_one_before_it_replays_it(
    world: World,
) -> None:
    """The way a repaired quarantined segment comes back (docs/configuration.md): a reset to before its
    range drops the range from both tables' quarantine lists with its dead-letter row, and the next run
    reads the segment again."""
    world.put_segments({0: [(0, 10), (10, 10)]})
    world.commit({0: (-1, 19)}, quarantined={0: (10, 19)})
    assert (
        [r.span for r in world.quarantine(TABLE)] == [r.span for r in world.quarantine(DLQ)] == [(0, 10, 19)]
    )
    before = world.state()

    with pytest.raises(OffsetResetRefusedError, match=r"cuts quarantined segment .*\[10, 19\]"):
        world.service.replay(_reset(from_offset=15))
    assert world.state() == before

    world.service.replay(_reset(from_offset=10))

    assert world.quarantine(TABLE) == world.quarantine(DLQ) == ()
    assert world.rows(DLQ) == []  # the quarantine's dead-letter row went with the range
    assert world.rows(TABLE) == [(0, o) for o in range(10)]
    world.drain()
    world.reingest(dead={})  # the repaired segment, read by the next run
    assert world.rows(TABLE) == [(0, o) for o in range(20)]
    assert world.quarantine(TABLE) == world.quarantine(DLQ) == ()
    assert world.marker(TABLE) == world.store() == {0: 19}


def test_a_reset_of_a_table_that_never_recorded_the_topic_keeps_the_other_partitions_adopted(
    world: World,
) -> None:
    """A table the Go processor wrote has no marker: the store's offsets are its committed offsets."""
    world.produce_table()
    with world.catalog.load_table(TABLE).transaction() as transaction:
        transaction.remove_properties("kafscale.offsets.orders", "kafscale.run-id.orders")
    assert world.commits.reconciled_offsets(TOPIC, TABLE).from_table is False

    world.service.replay(_reset(partitions=[1], from_offset=None))  # partition 1 from its start

    assert world.marker(TABLE) == {0: 29, 1: -1}  # partition 0 adopted from the store, not re-ingested
    assert world.rows(TABLE) == [(p, o) for p, o in ALL_ROWS if p == 0]
    assert world.store() == {0: 29, 1: -1}
    world.drain()
    world.reingest()
    assert Counter(world.rows(TABLE)) == Counter(ALL_ROWS)


# -- bad input ---------------------------------------------------------------------------------------


def test_bad_requests_are_refused_with_a_clear_error(world: World) -> None:
    world.produce_table()

    with pytest.raises(ReplayRequestError, match=r"topic 'payments' has no mapping .*mapped topics: orders"):
        world.service.replay(ReplayRequest(topic="payments"))
    with pytest.raises(
        ReplayRequestError, match=r"topic 'orders' has no partition 7: no segments under s3://"
    ):
        world.service.replay(ReplayRequest(topic=TOPIC, partitions=(0, 7)))
    with pytest.raises(ReplayRequestError, match=r"field 'from_offset': offsets start at 0, got -1"):
        ReplayRequest.parse({"topic": TOPIC, "from_offset": -1}, source="replay")
    assert world.drain() == []


# -- the command line --------------------------------------------------------------------------------


class Terminal(io.StringIO):
    """Standard input that says it is a terminal, with what the person types."""

    def isatty(self) -> bool:
        return True


def _cli(world: World, *args: str) -> int:
    return cli.main(["replay", "--config", str(world.config_path), "--topic", TOPIC, *args])


def test_cli_refuses_a_reset_without_yes_when_stdin_is_not_a_terminal(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    world.produce_table()
    before = world.state()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))

    code = _cli(world, "--reset-offsets", "--from-offset", "10")

    out, err = capsys.readouterr()
    assert code == 1
    assert "stdin is not a terminal" in err
    assert "pass --yes" in err
    ranges = "partition 0 offsets > 9 (through 29), partition 1 offsets > 9 (through 19)"
    assert f"delete from lake.orders: {ranges} (about 28 rows)" in out
    assert f"delete from lake.orders__dlq: {ranges} (about 2 rows)" in out
    assert "rewind the committed offsets: partition 0 29 -> 9, partition 1 19 -> 9\n" in out
    assert "re-enqueue partition 0: 2 segments, offsets 10-29" in out
    assert world.state() == before
    assert world.drain() == []


def test_cli_reset_goes_ahead_when_the_topic_is_typed_on_a_terminal(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    world.produce_table()
    monkeypatch.setattr("sys.stdin", Terminal("orders\n"))

    code = _cli(world, "--reset-offsets", "--from-offset", "10", "--partition", "1")

    out, _ = capsys.readouterr()
    assert code == 0
    assert "partition 1: 1 segment, offsets 10-19; committed 19 -> 9" in out
    assert out.rstrip().endswith(
        "1 segment re-enqueued; to be ingested by the next runs "
        "(`status` shows them): partition 1 offsets 10-19 (rewound)"
    )
    assert world.store() == {0: 29, 1: 9}


def test_cli_reset_is_not_made_when_the_typed_answer_differs(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    world.produce_table()
    before = world.state()
    monkeypatch.setattr("sys.stdin", Terminal("yes\n"))

    code = _cli(world, "--reset-offsets")

    assert code == 1
    assert "not confirmed (typed 'yes', expected 'orders'): nothing was changed" in capsys.readouterr().err
    assert world.state() == before


def test_cli_reset_with_yes_and_json(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.produce_table()

    code = _cli(world, "--reset-offsets", "--from-offset", "20", "--yes", "--json")

    out, err = capsys.readouterr()
    assert code == 0
    # The preview, out of the JSON's way:
    assert "rewind the committed offsets: partition 0 29 -> 19 (partition 1 stays at 19)" in err
    assert "(about 1 row)" in err
    document = json.loads(out)
    assert document["reset_offsets"] is True
    assert document["enqueued"] == 1
    assert [(p["partition"], p["committed"], p["reset_to"]) for p in document["partitions"]] == [
        (0, 29, 19),
        (1, 19, 19),
    ]
    assert document["deleted"] == [
        {"table": TABLE, "after": {"0": 19, "1": 19}, "rows": 9},
        {"table": DLQ, "after": {"0": 19, "1": 19}, "rows": 1},
    ]
    assert world.store() == {0: 19, 1: 19}


def test_cli_replay_of_a_committed_range_says_nothing_will_change(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world.produce_table()

    code = _cli(world)

    out, _ = capsys.readouterr()
    assert code == 0
    assert "partition 0: 3 segments, offsets 0-29; committed 29" in out
    assert out.rstrip().endswith("nothing will change")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--topic", "payments"), "kafscale-iceberg replay: topic 'payments' has no mapping"),
        (("--from-offset", "-5"), "kafscale-iceberg replay: replay: field 'from_offset': offsets start at 0"),
        (("--partition", "3"), "kafscale-iceberg replay: topic 'orders' has no partition 3"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_code_1(
    world: World, args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    world.put_segments()

    code = cli.main(["replay", "--config", str(world.config_path), "--topic", TOPIC, *args])

    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(message)
    assert err.count("\n") == 1


# -- the Lambda function -----------------------------------------------------------------------------


@pytest.fixture
def function_world(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setenv("KAFSCALE_ICEBERG_CONFIG", str(world.config_path))
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    runtime.assembly.cache_clear()
    yield world
    runtime.assembly.cache_clear()


def test_the_function_resets_with_the_sample_event(
    function_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    from functions.replay import handler

    world = function_world
    world.produce_table()
    event = json.loads((EVENTS / "replay_reset_offsets.json").read_text())

    answer = handler(event, LambdaContext(function_name="replay"))

    assert answer["reset_offsets"] is True
    assert answer["enqueued"] == 2
    assert answer["message"] == (
        "2 segments re-enqueued; to be ingested by the next runs "
        "(`status` shows them): partition 0 offsets 10-29 (rewound)"
    )
    assert world.store() == {0: 9, 1: 19}
    emitted = emf_records(capsys.readouterr().out)
    dimensions = {"service": "kafscale-iceberg"}  # topic is a property: an aggregated metric
    assert emf_values(emitted, "replay_segments_enqueued_total") == [(dimensions, [2.0])]
    assert emf_values(emitted, "offset_resets_total") == [(dimensions, [1.0])]
    world.drain()
    world.reingest()
    assert Counter(world.rows(TABLE)) == Counter(ALL_ROWS)


def test_the_function_replays_a_committed_range_as_a_no_op(function_world: World) -> None:
    from functions.replay import handler

    world = function_world
    world.produce_table()
    before = world.state()

    answer = handler(
        json.loads((EVENTS / "replay_committed_range.json").read_text()),
        LambdaContext(function_name="replay"),
    )

    assert answer["message"].endswith("nothing will change")
    assert answer["enqueued"] == 5
    assert world.state() == before


def test_the_function_refuses_an_unconfirmed_reset_naming_the_field(
    function_world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    from functions.replay import handler

    world = function_world
    world.produce_table()
    before = world.state()
    event = {**json.loads((EVENTS / "replay_reset_offsets.json").read_text()), "confirm": "order"}

    with pytest.raises(ReplayRequestError, match=r"replay event: field 'confirm' must equal the topic"):
        handler(event, LambdaContext(function_name="replay"))
    with pytest.raises(ReplayRequestError, match=r"replay event: field 'partitions': .*numbered from 0"):
        handler({"topic": TOPIC, "partitions": [-1]}, LambdaContext(function_name="replay"))
    assert world.state() == before
    errors = emf_values(emf_records(capsys.readouterr().out), "errors_total")
    assert errors == [({"stage": "replay", "service": "kafscale-iceberg"}, [1.0])] * 2
