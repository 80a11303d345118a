"""Issue 12 §6 "say what happened", end to end on real parts (moto S3, a SQLite catalog and checkpoint
store, local Spark): offset gaps and overlapping segments in the run line, `status` (text and JSON, per
partition) and the table's snapshot summary; a commit that found its run already in the table says so."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.cli import main
from kafscale_iceberg.commands.status import render_status
from kafscale_iceberg.domain.anomalies import SUMMARY_OFFSET_GAPS, SUMMARY_OVERLAPPED, PartitionGaps
from kafscale_iceberg.domain.runs import RunPlan
from kafscale_iceberg.domain.tickets import RunTicket
from kafscale_iceberg.local.pipeline import RunEnd, RunReport
from kafscale_iceberg.local.wiring import ProgressPrinter
from kafscale_iceberg.services.status import StatusService
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment
from tests.test_faults import NAMESPACE, TABLE, TOPIC, World

pytestmark = pytest.mark.slow

RUN_ID = r"[0-9a-f]{8}-a\d+"


class Tickets:
    """An observer keeping the tickets of the runs started."""

    def __init__(self) -> None:
        self.tickets: list[RunTicket] = []

    def run_started(self, ticket: RunTicket, plan: RunPlan) -> None:
        self.tickets.append(ticket)

    def run_ended(self, report: RunReport, plan: RunPlan) -> None:
        pass

    def error(self, stage: str, topic: str | None, error: Exception) -> None:
        pass


def _world(moto: MotoEndpoint, tmp_path: Path) -> World:
    return World(moto, tmp_path)  # without etcd: the SQLite store


def _status(world: World) -> StatusService:
    assembly = Assembly(world.config, owner_id="status")
    return StatusService(
        world.config, assembly.checkpoints, assembly.segments, assembly.tables, assembly.documents
    )


def test_gaps_and_overlaps_are_in_the_run_line_the_summary_and_status(
    moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    world = _world(moto_server, tmp_path)
    # Partition 0: 0..9, then nothing holds 10..19, then 20..34 and 30..44 overlap on 30..34.
    for base, count in ((0, 10), (20, 15), (30, 15)):
        put_segment(world.s3, world.bucket, NAMESPACE, TOPIC, 0, base, count)
    put_segment(world.s3, world.bucket, NAMESPACE, TOPIC, 1, 0, 5)
    stream = io.StringIO()

    summary = world.process(observer=ProgressPrinter(stream)).run_once()

    assert summary.ok, summary
    (report,) = summary.runs
    assert report.end is RunEnd.COMMITTED
    (ended,) = [line for line in stream.getvalue().splitlines() if " committed " in line]
    assert re.fullmatch(
        rf"  {TOPIC}: run {RUN_ID} committed 40 records, 10 offsets in gaps no segment contained "
        r"\(p0 10\.\.19\), 5 records repeated by overlapping segments \(written once\) in \d+\.\d s; "
        r"offsets p0=44, p1=4; columns filled: order_id 40, store_id 40 of 40",  # (issue 35: per column)
        ended,
    ), ended

    table = load_iceberg_catalog(CatalogSettings.from_config(world.config)).load_table(TABLE)
    rows = table.scan(selected_fields=("partition", "offset")).to_arrow().to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(
        [(0, o) for o in (*range(10), *range(20, 45))] + [(1, o) for o in range(5)]
    )
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert json.loads(snapshot.summary[SUMMARY_OFFSET_GAPS]) == {"0": {"missing": 10, "ranges": [[10, 19]]}}
    assert json.loads(snapshot.summary[SUMMARY_OVERLAPPED]) == {"0": 5}

    # A second run with another gap: status sums the topic's snapshots, per partition.
    put_segment(world.s3, world.bucket, NAMESPACE, TOPIC, 0, 50, 5)
    assert world.process().run_once().ok
    report_now = _status(world).report()
    (topic,) = report_now.topics
    by_partition = {p.partition: p for p in topic.partitions}
    assert by_partition[0].offset_gaps == PartitionGaps(missing=15, ranges=((10, 19), (45, 49)))
    assert by_partition[0].overlapped_records == 5
    assert (by_partition[1].offset_gaps, by_partition[1].overlapped_records) == (PartitionGaps(), 0)

    text = render_status(report_now).splitlines()
    assert "  partition 0 offset gaps: 15 offsets no segment contained (10..19, 45..49)" in text
    assert "  partition 0 overlapped: 5 records repeated by overlapping segments (written once)" in text
    assert not [line for line in text if line.startswith("  partition 1 ")]

    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        yaml.safe_dump(world.config.model_dump(mode="json", by_alias=True, exclude_unset=True))
    )
    assert main(["status", "--config", str(config_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    partitions = {p["partition"]: p for p in printed["topics"][0]["partitions"]}
    assert partitions[0]["offset_gaps"] == {"missing": 15, "ranges": [[10, 19], [45, 49]]}
    assert partitions[0]["overlapped_records"] == 5
    assert partitions[1]["offset_gaps"] == {"missing": 0, "ranges": []}


def test_a_commit_that_found_its_run_in_the_table_says_so_not_committed_n_records(
    moto_server: MotoEndpoint, tmp_path: Path, spark: SparkSession
) -> None:
    """The same run's commit step again (as a second runner, or a redelivered commit, would): its line
    says the run was already committed, never "committed 5 records"."""
    world = _world(moto_server, tmp_path)
    put_segment(world.s3, world.bucket, NAMESPACE, TOPIC, 0, 0, 5)
    started = Tickets()
    (first,) = world.process(observer=started).run_once().runs
    assert first.commit is not None
    assert first.commit.outcome.table_committed

    again = world.process().steps.commit_run(started.tickets[0])
    assert not again.outcome.table_committed
    assert not again.outcome.offsets_written
    stream = io.StringIO()
    ProgressPrinter(stream).run_ended(replace(first, commit=again), first.commit.plan)
    assert re.fullmatch(
        rf"  {TOPIC}: run {RUN_ID} was already committed by another runner \(nothing added\); offsets p0=4\n",
        stream.getvalue(),
    ), stream.getvalue()
