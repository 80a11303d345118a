"""The launcher on moto server (S3, Step Functions) with the SQLite checkpoint store: lease, plan, start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.s3_segments import S3SegmentStore, make_s3_client
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.adapters.step_functions import StepFunctionsRunStarter, execution_arn
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.domain.field_ids import TableFieldIds, TopicFieldIds, field_ids_uri
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.offsets import OffsetUpdate
from kafscale_iceberg.domain.runs import ColumnSpec, ColumnType, RunPlan, make_run_id
from kafscale_iceberg.domain.schema import BASE_FIELDS, DEAD_LETTER_FIELDS
from kafscale_iceberg.domain.tickets import OUTCOME_NAME, RunTicket, run_document_uri
from kafscale_iceberg.exceptions import TransientError, UnmappedTopicError
from kafscale_iceberg.segments.keys import SegmentObjectKind, format_segment_key
from kafscale_iceberg.services.launch import Launcher, LaunchOutcome, LaunchStatus
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

ROLE = "arn:aws:iam::123456789012:role/kafscale-iceberg-job"


class World:
    """A KafScale bucket, a runs bucket, a state machine, a checkpoint store and a launcher."""

    def __init__(
        self, moto: MotoEndpoint, tmp_path: Path, *, mappings: list[dict[str, Any]] | None = None, **runs: Any
    ) -> None:
        self.s3: Any = moto.client("s3")
        self.bucket = moto.new_bucket()
        runs_bucket = moto.new_bucket()
        self.sfn: Any = moto.client("stepfunctions")
        self.state_machine_arn = self.sfn.create_state_machine(
            name=f"runs-{runs_bucket}",
            definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}',
            roleArn=ROLE,
        )["stateMachineArn"]
        self.config: KafscaleConfig = config_from_mapping(
            {
                "s3": {"bucket": self.bucket, "namespace": "prod", "endpoint": moto.url, "path_style": True},
                "iceberg": {"catalog": {"type": "glue"}, "warehouse": f"s3://{runs_bucket}/warehouse"},
                "offsets": {"backend": "sqlite", "sqlite_path": str(tmp_path / "offsets.sqlite")},
                "mappings": mappings or [{"topic": "orders", "table": "prod.orders"}],
                "runs": {"location": f"s3://{runs_bucket}/runs", "min_bytes_per_run": 0, **runs},
            },
            source="test",
        )
        self.checkpoints = SqliteCheckpointStore(tmp_path / "offsets.sqlite", lease_ttl_seconds=30)
        self.documents = DocumentStore(moto.s3_settings())
        self.segment_client = make_s3_client(moto.s3_settings())
        self.launcher = Launcher(
            self.config,
            self.checkpoints,
            S3SegmentStore(self.segment_client, self.bucket, "prod"),
            self.documents,
            StepFunctionsRunStarter(self.sfn, self.state_machine_arn),
            owner_id="test-launcher",
        )

    def put(self, partition: int, base: int, count: int, **options: Any) -> None:
        put_segment(self.s3, self.bucket, "prod", "orders", partition, base, count, **options)

    def put_files(self, partition: int, base: int, count: int) -> Any:
        """Put a segment and return its files (to overwrite the `.kfs` with damaged bytes)."""
        return put_segment(self.s3, self.bucket, "prod", "orders", partition, base, count)

    def commit(self, offsets: dict[int, int]) -> None:
        grant = self.checkpoints.claim_lease("orders", owner_id="other", run_id="x")
        assert isinstance(grant, LeaseGrant)
        self.checkpoints.commit_offsets(grant, {p: OffsetUpdate(o, 0) for p, o in offsets.items()})
        self.checkpoints.release_lease(grant)


def _plan_uri(outcome: LaunchOutcome) -> str:
    assert outcome.ticket is not None, outcome.detail
    return outcome.ticket.plan_uri


@pytest.fixture
def world(moto_server: MotoEndpoint, tmp_path: Path) -> World:
    return World(moto_server, tmp_path)


def test_plans_every_pending_segment_and_starts_the_run(world: World) -> None:
    world.put(0, 0, 10)
    world.put(0, 10, 5)
    world.put(1, 0, 7)
    outcome = world.launcher.launch("orders")
    assert outcome.status is LaunchStatus.STARTED
    ticket = outcome.ticket
    assert ticket is not None
    assert ticket.run_id == make_run_id("orders", [(0, -1, 14), (1, -1, 6)])
    holder = world.checkpoints.read_lease_holder("orders")
    assert holder is not None
    assert holder.run_id == ticket.run_id
    (execution,) = world.sfn.list_executions(stateMachineArn=world.state_machine_arn)["executions"]
    assert execution["name"] == ticket.run_id
    described = world.sfn.describe_execution(executionArn=execution["executionArn"])
    assert RunTicket.model_validate(json.loads(described["input"])["ticket"]) == ticket
    plan = RunPlan.model_validate_json(world.documents.read_text(ticket.plan_uri))
    assert plan.end_offsets() == {0: 14, 1: 6}
    assert plan.start_offsets() == {0: -1, 1: -1}
    assert [(s.base_offset, s.last_offset) for s in plan.partitions[0].segments] == [(0, 9), (10, 14)]
    assert plan.source.bucket == world.bucket
    assert plan.table.data_uri.endswith(f"/warehouse/prod.db/orders/data/kafscale/{plan.run_id}")
    assert plan.result_uri == run_document_uri(
        world.config.runs.location, "orders", plan.run_id, "result.json"
    )


def test_a_busy_topic_is_acknowledged_without_planning(world: World) -> None:
    world.put(0, 0, 10)
    first = world.launcher.launch("orders")
    second = world.launcher.launch("orders")
    assert first.status is LaunchStatus.STARTED
    assert second.status is LaunchStatus.BUSY
    assert "test-launcher" in second.detail


def test_plans_only_after_the_committed_offsets(world: World) -> None:
    for base in (0, 10, 20):
        world.put(0, base, 10)
    world.commit({0: 9})
    outcome = world.launcher.launch("orders")
    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(outcome)))
    assert plan.partitions[0].start_exclusive == 9
    assert [s.base_offset for s in plan.partitions[0].segments] == [10, 20]


def test_a_committed_offset_inside_a_segment_rereads_that_segment(world: World) -> None:
    world.put(0, 0, 10)
    world.put(0, 10, 10)
    world.commit({0: 4})  # e.g. moved over from the Go processor mid-segment
    outcome = world.launcher.launch("orders")
    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(outcome)))
    assert plan.partitions[0].start_exclusive == 4
    assert [s.base_offset for s in plan.partitions[0].segments] == [0, 10]


def test_nothing_pending_is_idle_and_leaves_no_lease(world: World) -> None:
    world.put(0, 0, 10)
    world.commit({0: 9})
    outcome = world.launcher.launch("orders")
    assert outcome.status is LaunchStatus.IDLE
    assert world.checkpoints.read_lease_holder("orders") is None


def test_a_segment_without_its_index_blocks_its_partition(world: World) -> None:
    world.put(0, 0, 10)
    index_key = format_segment_key("prod", "orders", 0, 0, SegmentObjectKind.INDEX)
    world.s3.delete_object(Bucket=world.bucket, Key=index_key)
    outcome = world.launcher.launch("orders")
    assert outcome.status is LaunchStatus.BLOCKED
    assert "segment-00000000000000000000.kfs" in outcome.detail


def test_limits_bound_the_run(moto_server: MotoEndpoint, tmp_path: Path) -> None:
    world = World(moto_server, tmp_path, max_segments_per_run=2)
    for base in (0, 10, 20):
        world.put(0, base, 10)
    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(world.launcher.launch("orders"))))
    assert plan.end_offsets() == {0: 19}


def test_small_backlog_waits_for_the_minimum_batch(moto_server: MotoEndpoint, tmp_path: Path) -> None:
    world = World(moto_server, tmp_path, min_bytes_per_run="1MiB", max_wait_seconds=600)
    world.put(0, 0, 10)
    outcome = world.launcher.launch("orders")
    assert outcome.status is LaunchStatus.WAITING
    assert 0 < outcome.wait_seconds <= 600
    assert world.checkpoints.read_lease_holder("orders") is None


def test_an_aborted_range_is_retried_under_the_next_attempt(world: World) -> None:
    world.put(0, 0, 10)
    first = world.launcher.launch("orders").ticket
    assert first is not None
    outcome_uri = run_document_uri(world.config.runs.location, "orders", first.run_id, OUTCOME_NAME)
    world.documents.write_text(outcome_uri, '{"status":"aborted"}')
    world.checkpoints.release_lease(first.grant)
    second = world.launcher.launch("orders").ticket
    assert second is not None
    assert second.attempt == 1
    assert second.run_id == make_run_id("orders", [(0, -1, 9)], attempt=1)


def test_unmapped_topic_is_an_error(world: World) -> None:
    with pytest.raises(UnmappedTopicError, match="payments"):
        world.launcher.launch("payments")


def test_a_run_whose_steps_died_unrecorded_is_replanned_under_the_next_attempt(world: World) -> None:
    world.put(0, 0, 10)
    first = world.launcher.launch("orders").ticket
    assert first is not None
    world.checkpoints.release_lease(first.grant)  # the lease lapsed: nobody renewed it
    # While the execution still runs, the range is in flight: retried later, no lease kept.
    with pytest.raises(TransientError, match="still executing"):
        world.launcher.launch("orders")
    assert world.checkpoints.read_lease_holder("orders") is None
    # The execution ends without its abort step (the steps died): the attempt is spent.
    world.sfn.stop_execution(executionArn=execution_arn(world.state_machine_arn, first.run_id))
    outcome = world.launcher.launch("orders")
    assert outcome.status is LaunchStatus.STARTED
    second = outcome.ticket
    assert second is not None
    assert second.run_id == make_run_id("orders", [(0, -1, 9)], attempt=1)
    lost = json.loads(
        world.documents.read_text(
            run_document_uri(world.config.runs.location, "orders", first.run_id, OUTCOME_NAME)
        )
    )
    assert lost["status"] == "lost"
    assert "ABORTED" in lost["reason"]
    holder = world.checkpoints.read_lease_holder("orders")
    assert holder is not None
    assert holder.run_id == second.run_id


def test_the_same_ticket_started_twice_is_one_execution(world: World) -> None:
    world.put(0, 0, 10)
    ticket = world.launcher.launch("orders").ticket
    assert ticket is not None
    starter = StepFunctionsRunStarter(world.sfn, world.state_machine_arn)
    starter.start_run(ticket)
    assert len(world.sfn.list_executions(stateMachineArn=world.state_machine_arn)["executions"]) == 1
    assert starter.run_status(ticket.run_id) == "RUNNING"
    assert starter.run_status("orders-nope-a0") is None


def test_a_partition_filter_leaves_partitions_out(moto_server: MotoEndpoint, tmp_path: Path) -> None:
    world = World(moto_server, tmp_path)
    world.launcher = Launcher(
        world.config,
        world.checkpoints,
        S3SegmentStore(make_s3_client(moto_server.s3_settings()), world.bucket, "prod"),
        world.documents,
        StepFunctionsRunStarter(world.sfn, world.state_machine_arn),
        owner_id="test-launcher",
        partition_filter=lambda topic: frozenset({1}),
    )
    world.put(0, 0, 10)
    world.put(1, 0, 5)
    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(world.launcher.launch("orders"))))
    assert plan.end_offsets() == {1: 4}


@pytest.mark.parametrize("new_segments", [2, 0])
def test_planning_requests_do_not_grow_with_committed_segments(
    moto_server: MotoEndpoint, tmp_path: Path, new_segments: int
) -> None:
    """O(new segments): 10 or 60 committed segments (of 10 records) cost the same S3 requests, with
    new segments to plan and for an idle partition (`make bench-planning` measures 10,000)."""
    from bench.planning import counting

    requests = []
    for committed_segments in (10, 60):
        world = World(moto_server, tmp_path / f"{new_segments}-{committed_segments}")
        for base in range(0, committed_segments * 10, 10):
            world.put(0, base, 10)
        world.commit({0: committed_segments * 10 - 1})
        for number in range(new_segments):
            world.put(0, (committed_segments + number) * 10, 10)
        with counting(world.segment_client) as counts:
            status = world.launcher.launch("orders").status
        assert status is (LaunchStatus.STARTED if new_segments else LaunchStatus.IDLE)
        requests.append(dict(counts))
    assert requests[0] == requests[1]
    # new: partitions + one listing, one footer; idle: + probes back (1, 16) to the last segment
    assert requests[0] == (
        {"ListObjectsV2": 2, "GetObject": 1} if new_segments else {"ListObjectsV2": 4, "GetObject": 1}
    )


def test_an_idle_partition_whose_committed_offset_ends_a_segment_costs_one_listing(world: World) -> None:
    """The signal after a commit names the run's ends (segments' last offsets): the launcher lists
    after them once, without probing back for the segment holding them nor reading its footer."""
    from bench.planning import counting

    for base in range(0, 600, 10):
        world.put(0, base, 10)
    world.commit({0: 599})
    with counting(world.segment_client) as counts:
        status = world.launcher.launch("orders", segment_ends={0: 599}).status
    assert status is LaunchStatus.IDLE
    assert dict(counts) == {"ListObjectsV2": 2}  # the partitions, then the one listing


def test_an_end_the_committed_offset_has_moved_from_is_not_trusted(world: World) -> None:
    """A committed offset inside a segment (a reset since the signal) is looked for as without one."""
    world.put(0, 0, 10)
    world.put(0, 10, 10)
    world.commit({0: 14})
    outcome = world.launcher.launch("orders", segment_ends={0: 19})
    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(outcome)))
    assert plan.partitions[0].start_exclusive == 14
    assert [s.base_offset for s in plan.partitions[0].segments] == [10]


def test_plans_carry_the_field_ids_the_commit_step_recorded(world: World) -> None:
    world.put(0, 0, 10)
    recorded = {f.name: 100 + i for i, f in enumerate(BASE_FIELDS)}  # a table with its own ids
    document = TopicFieldIds(
        tables=(TableFieldIds(identifier="prod.orders", field_ids=recorded, last_column_id=140),)
    )
    world.documents.write_text(
        field_ids_uri(world.config.runs.location, "orders"), document.model_dump_json()
    )

    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(world.launcher.launch("orders"))))

    assert plan.table.field_ids == recorded
    # Not recorded yet: the ids this product's create gives, 1..n in field order.
    assert plan.dead_letter_table.field_ids == {f.name: i for i, f in enumerate(DEAD_LETTER_FIELDS, start=1)}


def test_an_upsert_plan_carries_the_table_version_the_commit_step_recorded(
    moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    """The run locates the changed keys in that version (`execution/upsert_stage.py`); an append
    table's plan carries none."""
    columns = [{"name": "id", "type": "long", "required": True}]
    world = World(
        moto_server,
        tmp_path,
        mappings=[
            {
                "topic": "orders",
                "table": "prod.orders",
                "mode": "upsert",
                "upsert": {"key": ["id"]},
                "schema": {"columns": columns},
            },
        ],
    )
    world.put(0, 0, 10)
    version = "s3://warehouse/prod.db/orders/metadata/00007-x.metadata.json"
    document = TopicFieldIds(
        tables=(
            TableFieldIds(
                identifier="prod.orders",
                field_ids={f.name: i for i, f in enumerate(BASE_FIELDS, start=1)} | {"id": 9},
                last_column_id=9,
                metadata_location=version,
            ),
        )
    )
    world.documents.write_text(
        field_ids_uri(world.config.runs.location, "orders"), document.model_dump_json()
    )

    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(world.launcher.launch("orders"))))

    assert plan.table is not None
    assert plan.table.metadata_location == version
    assert plan.dead_letter_table.metadata_location is None


def test_a_routed_inferred_plan_carries_each_known_tables_own_columns(
    moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    """Each table of a routed inferred mapping is planned from its own recorded columns, ids and
    last-column-id (a fixed route table and a template's); a new template table from the base fields."""
    route = {"field": "kind", "tables": {"x": "shop.fixed_kind"}, "table_template": "shop.kind_{value}"}
    world = World(
        moto_server, tmp_path, mappings=[{"topic": "orders", "route": route, "schema": {"source": "infer"}}]
    )
    world.put(0, 0, 10)
    base = {f.name: i for i, f in enumerate(BASE_FIELDS, start=1)}
    fixed_columns = (ColumnSpec(name="a", type=ColumnType.LONG),)
    template_columns = (ColumnSpec(name="b", type=ColumnType.STRING),)
    document = TopicFieldIds(
        tables=(
            TableFieldIds(
                identifier="shop.fixed_kind",
                field_ids={**base, "a": 9},
                last_column_id=9,
                columns=fixed_columns,
            ),
            TableFieldIds(
                identifier="shop.kind_a",
                field_ids={**base, "b": 12},
                last_column_id=12,
                columns=template_columns,
            ),
        )
    )
    world.documents.write_text(
        field_ids_uri(world.config.runs.location, "orders"), document.model_dump_json()
    )

    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(world.launcher.launch("orders"))))

    assert plan.route is not None
    assert plan.conversion.infer_columns
    assert plan.conversion.columns == ()
    fixed = plan.route.tables["x"]
    assert (fixed.columns, fixed.last_column_id, fixed.field_ids) == (fixed_columns, 9, {**base, "a": 9})
    assert plan.route.known_columns == {"shop.kind_a": template_columns}
    assert plan.route.known_last_column_ids == {"shop.kind_a": 12}
    assert plan.route.known_field_ids == {"shop.kind_a": {**base, "b": 12}}
    assert plan.route.new_field_ids == base
    new = plan.route.template_target("shop.kind_new")
    assert (new.columns, new.last_column_id, new.field_ids) == (None, None, base)


def _abort(world: World, outcome: LaunchOutcome, now: float) -> int:
    """The abort step (the real one) for the started run, at `now`; the failure streak it counted."""
    from kafscale_iceberg.services.run_steps import RunSteps

    assert outcome.ticket is not None, outcome.detail
    steps = RunSteps(
        world.config.runs, world.checkpoints, jobs=None, documents=world.documents, clock=lambda: now
    )  # type: ignore[arg-type]
    return steps.abort(outcome.ticket, "job j ended FAILED").consecutive_failures


def test_retry_backoff_holds_a_failing_topic_even_when_new_segments_change_the_range(
    moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    """Issue 12 §3: every re-plan of a failing topic covered a new range (segments kept arriving), so
    its attempt was 0 and the backoff was skipped on every reconciler pass."""
    clock = [1_000.0]
    world = World(moto_server, tmp_path, retry_backoff_seconds=30, retry_backoff_max_seconds=600)
    world.launcher._clock = lambda: clock[0]
    world.put(0, 0, 10)
    assert _abort(world, world.launcher.launch("orders"), clock[0]) == 1
    world.put(0, 10, 5)  # a new range: attempt 0 again
    clock[0] += 10
    waiting = world.launcher.launch("orders")
    assert waiting.status is LaunchStatus.WAITING
    assert waiting.wait_seconds == pytest.approx(20)
    assert "1 failed run(s) in a row" in waiting.detail
    assert world.checkpoints.read_lease_holder("orders") is None
    clock[0] += 21
    second = world.launcher.launch("orders")
    assert second.status is LaunchStatus.STARTED
    assert _abort(world, second, clock[0]) == 2  # the streak grows: 60 s now
    world.put(0, 15, 5)
    clock[0] += 59
    assert world.launcher.launch("orders").status is LaunchStatus.WAITING
    assert world.launcher.launch("orders", ignore_backoff=True).status is LaunchStatus.STARTED


def test_a_commit_ends_the_backoff_streak(moto_server: MotoEndpoint, tmp_path: Path) -> None:
    clock = [1_000.0]
    world = World(moto_server, tmp_path, retry_backoff_seconds=30)
    world.launcher._clock = lambda: clock[0]
    world.put(0, 0, 10)
    _abort(world, world.launcher.launch("orders"), clock[0])
    world.commit({0: 9})  # another runner committed the range meanwhile
    world.put(0, 10, 5)
    assert world.launcher.launch("orders").status is LaunchStatus.STARTED


def test_a_truncated_newest_segment_holds_back_only_its_partition(world: World) -> None:
    """Issue 12 §4: a segment without its footer stopped every partition of the topic at planning."""
    world.put(0, 0, 10)
    files = world.put_files(0, 10, 5)
    key = format_segment_key("prod", "orders", 0, 10)
    world.s3.put_object(Bucket=world.bucket, Key=key, Body=files.kfs[:-16])  # truncated: no END!
    world.put(1, 0, 7)
    outcome = world.launcher.launch("orders")
    assert outcome.status is LaunchStatus.STARTED, outcome.detail
    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(outcome)))
    assert plan.end_offsets() == {0: 9, 1: 6}  # partition 0 up to the segment before, partition 1 whole
    assert key in outcome.held[0]


def test_a_malformed_key_holds_back_only_its_partition(world: World) -> None:
    world.put(0, 0, 10)
    world.s3.put_object(Bucket=world.bucket, Key="prod/orders/0/segment-57.kfs", Body=b"x")
    world.put(1, 0, 7)
    outcome = world.launcher.launch("orders")
    assert outcome.status is LaunchStatus.STARTED, outcome.detail
    plan = RunPlan.model_validate_json(world.documents.read_text(_plan_uri(outcome)))
    assert plan.end_offsets() == {1: 6}
    assert "segment-57.kfs" in outcome.held[0]
    world.checkpoints.release_lease(outcome.ticket.grant)  # type: ignore[union-attr]
    world.commit({1: 6})
    blocked = world.launcher.launch("orders")
    assert blocked.status is LaunchStatus.BLOCKED
    assert "partition 0 waits" in blocked.detail
