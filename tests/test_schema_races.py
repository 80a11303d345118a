"""The abort step after a schema race: a plan whose field ids the table's schema moved away from
(`field-ids.json` rewritten by the refused commit) is re-signalled at once; any other failure keeps
its backoff, also while a mapping's new columns have planned ids the document does not record.

Real parts: the SQLite checkpoint store and the local document store; the EMR job runner is called
not at all (the runs have no job to cancel).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from kafscale_iceberg.adapters.documents import DocumentStore
from kafscale_iceberg.adapters.emr_serverless import EmrServerlessJobRunner
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.config import EmrServerlessRunnerConfig, RunsConfig
from kafscale_iceberg.domain.field_ids import TableFieldIds, TopicFieldIds, field_ids_uri
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import RoutePlan, RunPlan
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.services.run_steps import RunSteps
from tests.support.moto import MotoEndpoint
from tests.support.plans import sample_plan

ROLE = "arn:aws:iam::123456789012:role/job"
RECORDED = {"record_id": 1, "order_id": 9, "tip": 10}


@dataclass
class World:
    steps: RunSteps
    checkpoints: SqliteCheckpointStore
    documents: DocumentStore
    runs: RunsConfig


@pytest.fixture
def world(tmp_path: Path, moto_server: MotoEndpoint) -> World:
    checkpoints = SqliteCheckpointStore(tmp_path / "o.sqlite", lease_ttl_seconds=30)
    # The abort step looks the run's job up (ListJobRuns): an application on moto with none.
    client = boto3.client("emr-serverless", endpoint_url=moto_server.url, region_name="us-east-1")
    application = client.create_application(name="runs", releaseLabel="emr-7.0.0", type="SPARK")
    settings = EmrServerlessRunnerConfig(
        application_id=application["applicationId"],
        execution_role_arn=ROLE,
        entry_point="s3://a/main.py",
        image="x",
    )
    runner = EmrServerlessJobRunner(settings, client, timeout_minutes=5)
    runs = RunsConfig(location=str(tmp_path / "runs"), retry_backoff_seconds=60)
    documents = DocumentStore()
    return World(
        RunSteps(runs, checkpoints, runner, documents, clock=lambda: 5.0), checkpoints, documents, runs
    )


def _abort(world: World, plan: RunPlan, tmp_path: Path, error: str | None = None) -> int:
    """Abort a run of `plan` after its commit failed with `error` (the name the state machine passes;
    None: the run failed otherwise); the seconds before it is re-signalled."""
    plan = plan.model_copy(update={"result_uri": str(tmp_path / "result.json")})  # none: never written
    assert plan.table is not None
    table = plan.table.identifier
    recorded = TopicFieldIds(tables=(TableFieldIds(identifier=table, field_ids=RECORDED, last_column_id=10),))
    world.documents.write_text(field_ids_uri(world.runs.location, plan.topic), recorded.model_dump_json())
    plan_uri = str(tmp_path / "plan.json")
    world.documents.write_text(plan_uri, plan.model_dump_json())
    grant = world.checkpoints.claim_lease(plan.topic, owner_id="launcher", run_id=plan.run_id)
    assert isinstance(grant, LeaseGrant)
    ticket = RunTicket(topic=plan.topic, run_id=plan.run_id, plan_uri=plan_uri, grant=grant, attempt=0)
    return world.steps.abort(ticket, "commit failed: ...", error=error).resignal_after_seconds


def _with_table(plan: RunPlan, **table: object) -> RunPlan:
    return plan.model_copy(update={"table": plan.table.model_copy(update=table)})


def test_an_inferred_plan_made_before_the_table_gained_columns_is_resignalled_at_once(
    world, tmp_path: Path
) -> None:
    plan = sample_plan()
    inferred = plan.model_copy(
        update={"conversion": plan.conversion.model_copy(update={"infer_columns": True})}
    )
    plan = _with_table(inferred, last_column_id=9, field_ids={"record_id": 1})
    assert _abort(world, plan, tmp_path, "InferredColumnChangedError") == 0


def test_a_plan_whose_ids_the_table_no_longer_has_is_resignalled_at_once(
    world: World, tmp_path: Path
) -> None:
    plan = _with_table(sample_plan(), field_ids={"record_id": 1, "tip": 11})
    assert _abort(world, plan, tmp_path, "FieldIdMismatchError") == 0


def test_a_failed_run_planning_a_mappings_new_column_still_backs_off(world: World, tmp_path: Path) -> None:
    """The new column's planned id is not in the document (it is not in the table yet): not a race."""
    plan = _with_table(sample_plan(), field_ids={**RECORDED, "new_column": 11})
    assert _abort(world, plan, tmp_path) == 60


def _abort_routed(
    world: World, tmp_path: Path, *, planned_last_column_id: int, error: str | None = None
) -> int:
    """Abort a run of a routed inferred plan whose template table `shop.kind_a` was planned with
    `planned_last_column_id`; `field-ids.json` records the table with last-column-id 10."""
    plan = sample_plan()
    assert plan.table is not None
    route = RoutePlan(
        field="kind",
        table_template="shop.kind_{value}",
        data_uri_template=str(tmp_path / "w" / "{path}"),
        known_field_ids={"shop.kind_a": RECORDED},
        known_columns={"shop.kind_a": ()},
        known_last_column_ids={"shop.kind_a": planned_last_column_id},
    )
    routed = plan.model_copy(
        update={
            "table": None,
            "route": route,
            "conversion": plan.conversion.model_copy(update={"infer_columns": True, "columns": ()}),
            "result_uri": str(tmp_path / "result.json"),
        }
    )
    recorded = TopicFieldIds(
        tables=(TableFieldIds(identifier="shop.kind_a", field_ids=RECORDED, last_column_id=10),)
    )
    world.documents.write_text(field_ids_uri(world.runs.location, plan.topic), recorded.model_dump_json())
    plan_uri = str(tmp_path / "plan.json")
    world.documents.write_text(plan_uri, routed.model_dump_json())
    grant = world.checkpoints.claim_lease(plan.topic, owner_id="launcher", run_id=plan.run_id)
    assert isinstance(grant, LeaseGrant)
    ticket = RunTicket(topic=plan.topic, run_id=plan.run_id, plan_uri=plan_uri, grant=grant, attempt=0)
    return world.steps.abort(ticket, "commit failed: ...", error=error).resignal_after_seconds


def test_a_routed_inferred_plan_made_before_a_template_table_gained_columns_is_resignalled_at_once(
    world: World, tmp_path: Path
) -> None:
    refused = "InferredColumnChangedError"
    assert _abort_routed(world, tmp_path, planned_last_column_id=9, error=refused) == 0


def test_a_failed_routed_inferred_run_whose_template_table_did_not_move_still_backs_off(
    world: World, tmp_path: Path
) -> None:
    assert _abort_routed(world, tmp_path, planned_last_column_id=10) == 60
