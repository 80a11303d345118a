"""Issue 35 §2: the one-machine example of docs/configuration.md, fed by `segments generate`, lands
every mapped column. (The example asked for `store` and `ordered_at` while the generator writes
`store_id` and `event_time`: 2,400 rows landed with those columns null, in one null partition.)

Real parts: the example as the docs print it (only its bucket, endpoint and local paths moved under
the test's directory), a moto server, the generator's segments, the inline runner (no JVM), a SQLite
catalog.
"""

from __future__ import annotations

import functools
import io
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.commands.status import render_status
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.domain.commit_failures import CommitFailure, decide_commit_failure
from kafscale_iceberg.exceptions import UnfilledColumnError
from kafscale_iceberg.local.wiring import ProgressPrinter, open_pipeline
from kafscale_iceberg.metrics import PrometheusMetricsSink
from kafscale_iceberg.segments.generate import generate_segments, write_segments
from kafscale_iceberg.services.status import StatusService
from tests.support.moto import MotoEndpoint

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _one_machine_example() -> dict[str, Any]:
    text = DOCS.read_text()
    first = re.findall(r"<!-- complete-example -->\n```yaml\n(.*?)```", text, flags=re.DOTALL)[0]
    document: dict[str, Any] = yaml.safe_load(first)
    assert document["offsets"]["backend"] == "sqlite"  # the one-machine example comes first
    return document


MISTAKEN = {  # the example as it was: fields the generator's records do not carry
    "topic": "orders-before",
    "table": "shop.orders_before",
    "create_table_if_missing": True,
    "schema": {
        "columns": [
            {"name": "order_id", "type": "long", "required": True},
            {"name": "store", "type": "string"},
            {"name": "ordered_at", "type": "timestamp"},
        ]
    },
}


@dataclass(frozen=True)
class Landed:
    config: KafscaleConfig
    mapping: dict[str, Any]
    progress: str
    metrics: PrometheusMetricsSink


@pytest.fixture(scope="module")
def landed(moto_server: MotoEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Landed:
    """The documented example (and, beside it, the mistaken mapping) run once over generated segments."""
    tmp_path = tmp_path_factory.mktemp("documented")
    document = _one_machine_example()
    bucket = moto_server.new_bucket()
    document["s3"].update(bucket=bucket, endpoint=moto_server.url, region=moto_server.region)
    document["iceberg"]["catalog"]["uri"] = f"sqlite:///{tmp_path}/catalog.db"
    document["iceberg"]["warehouse"] = f"file://{tmp_path}/warehouse"
    document["offsets"]["sqlite_path"] = str(tmp_path / "offsets.sqlite")
    document["runner"] = {"type": "inline", "inline": {"workers": 2}}
    document["runs"] = {"min_bytes_per_run": 0}
    mapping = document["mappings"][0]
    document["mappings"].append(MISTAKEN)
    config = config_from_mapping(document, source="docs/configuration.md")
    write_segments(
        f"s3://{bucket}",
        generate_segments(
            topics=[mapping["topic"], MISTAKEN["topic"]],
            namespace=document["s3"]["namespace"],
            partitions=2,
            batches_per_segment=2,
        ),
        endpoint_url=moto_server.url,
    )
    progress = io.StringIO()
    metrics = PrometheusMetricsSink()
    with open_pipeline(config, observers=[ProgressPrinter(progress)], metrics=metrics) as pipeline:
        summary = pipeline.run_once()
    assert summary.ok, summary.failed
    return Landed(config, mapping, progress.getvalue(), metrics)


def test_the_documented_example_fed_by_segments_generate_fills_every_column(landed: Landed) -> None:
    mapping = landed.mapping
    table = load_iceberg_catalog(CatalogSettings.from_config(landed.config)).load_table(mapping["table"])
    rows = table.scan().to_arrow()
    assert rows.num_rows == 2 * 2 * 100
    all_null = [
        column["name"]
        for column in mapping["schema"]["columns"]
        if rows.column(column["name"]).null_count == rows.num_rows
    ]
    assert all_null == [], f"columns no record filled: {all_null}"
    assert f"{mapping['topic']}: WARNING" not in landed.progress


def test_a_column_no_record_fills_is_warned_once_per_run_naming_the_fields_the_records_carry(
    landed: Landed,
) -> None:
    lines = landed.progress.splitlines()
    warnings = [line for line in lines if "WARNING:" in line]
    prefix = f"  {MISTAKEN['topic']}: run "
    runs = [line for line in lines if line.startswith(prefix) and " committed " in line]
    assert len(warnings) == len(runs) >= 1, landed.progress  # once per run
    for run, line in zip(runs, warnings, strict=True):
        records = int(re.findall(r" committed ([\d,]+) records", run)[0].replace(",", ""))
        assert line.startswith(f"  {MISTAKEN['topic']}: WARNING: run "), line
        # Issue 35: the nearest field names the records do carry (`segments generate`'s).
        assert f"`store`: absent in {records:,} of {records:,} records; they carry `store_id`" in line
        assert f"`ordered_at`: absent in {records:,} of {records:,} records; they carry `ordered_on`" in line
        assert "segments inspect" in line
        assert f"columns filled: order_id {records:,}, store 0, ordered_at 0 of {records:,}" in run


def test_the_documented_examples_run_line_counts_every_column_filled(landed: Landed) -> None:
    runs = [
        line
        for line in landed.progress.splitlines()
        if line.startswith(f"  {landed.mapping['topic']}: run ") and " committed " in line
    ]
    assert runs, landed.progress
    names = [column["name"] for column in landed.mapping["schema"]["columns"]]
    for run in runs:
        records = re.findall(r" committed ([\d,]+) records", run)[0]
        filled = re.findall(r"columns filled: (.*) of ([\d,]+)", run)[0]
        assert filled[1] == records
        assert [part.rsplit(" ", 1)[0] for part in filled[0].split(", ")] == names
        assert " 0," not in filled[0] + ","  # no column of the documented example is unfilled


def test_records_carrying_each_column_are_a_metric_by_topic_table_and_column(landed: Landed) -> None:
    def carried(topic: str, table: str, column: str) -> float | None:
        return landed.metrics.registry.get_sample_value(
            "kafscale_processor_column_records_total", {"topic": topic, "table": table, "column": column}
        )

    written = landed.metrics.registry.get_sample_value(
        "kafscale_processor_records_total", {"topic": MISTAKEN["topic"], "result": "written"}
    )
    assert written == 2 * 2 * 100
    assert carried(MISTAKEN["topic"], MISTAKEN["table"], "order_id") == written
    assert carried(MISTAKEN["topic"], MISTAKEN["table"], "store") == 0
    assert carried(MISTAKEN["topic"], MISTAKEN["table"], "ordered_at") == 0
    mapping = landed.mapping
    for column in mapping["schema"]["columns"]:
        assert carried(mapping["topic"], mapping["table"], column["name"]) == written, column


def test_status_shows_the_last_runs_unfilled_columns_from_the_tables_snapshot(landed: Landed) -> None:
    assembly = Assembly(landed.config)
    service = StatusService(
        landed.config,
        assembly.checkpoints,
        assembly.segments,
        assembly.tables,
        assembly.documents,
        tables_of=assembly.tables_of,
    )
    report = service.report()
    by_topic = {topic.topic: topic for topic in report.topics}
    mistaken = by_topic[MISTAKEN["topic"]].to_json()["unfilled_columns"]
    assert isinstance(mistaken, dict)
    assert sorted(mistaken) == ["ordered_at", "store"]
    assert "they carry `store_id`" in mistaken["store"]
    assert by_topic[landed.mapping["topic"]].unfilled_columns == {}
    assert "WARNING last run: no record fills `store`: absent in" in render_status(report)


@pytest.fixture
def schema_server(tmp_path: Path) -> Iterator[str]:
    """A real HTTP server for `schema.registry.base_url` (`{base_url}/{topic}.json`): any object."""
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / f"{MISTAKEN['topic']}.json").write_text('{"type": "object"}')
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "schemas"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_strict_schema_mode_refuses_a_run_whose_column_no_record_fills_before_its_commit(
    moto_server: MotoEndpoint, tmp_path: Path, schema_server: str
) -> None:
    document = _one_machine_example()
    bucket = moto_server.new_bucket()
    document["s3"].update(bucket=bucket, endpoint=moto_server.url, region=moto_server.region)
    document["iceberg"]["catalog"]["uri"] = f"sqlite:///{tmp_path}/catalog.db"
    document["iceberg"]["warehouse"] = f"file://{tmp_path}/warehouse"
    document["offsets"]["sqlite_path"] = str(tmp_path / "offsets.sqlite")
    document["runner"] = {"type": "inline", "inline": {"workers": 2}}
    document["runs"] = {"min_bytes_per_run": 0}
    document["schema"] = {"mode": "strict", "registry": {"base_url": schema_server}}
    document["mappings"] = [MISTAKEN]
    config = config_from_mapping(document, source="docs/configuration.md")
    write_segments(
        f"s3://{bucket}",
        generate_segments(topics=[MISTAKEN["topic"]], namespace=document["s3"]["namespace"], partitions=1),
        endpoint_url=moto_server.url,
    )
    progress = io.StringIO()
    with open_pipeline(config, observers=[ProgressPrinter(progress)]) as pipeline:
        summary = pipeline.run_once()
    assert not summary.ok, progress.getvalue()
    reason = summary.failed[MISTAKEN["topic"]]
    assert "schema.mode strict refuses a column no record fills" in reason, reason
    assert "`store`: absent in" in reason, reason
    assert "they carry `store_id`" in reason, reason
    assert "rename the mapping's column" in reason, reason
    assert "nothing was committed" in reason, reason
    # Refused before its commit: no row of the run is in a table.
    catalog = load_iceberg_catalog(CatalogSettings.from_config(config))
    if catalog.table_exists(MISTAKEN["table"]):
        assert catalog.load_table(MISTAKEN["table"]).scan().to_arrow().num_rows == 0


def test_an_unfilled_column_refusal_is_rejected_data_on_both_loops() -> None:
    error = UnfilledColumnError("shop.orders", "run-1", ("store",), "`store`: absent in 1 of 1 records")
    assert decide_commit_failure(error).failure is CommitFailure.DATA_REJECTED  # type: ignore[union-attr]
    # The AWS abort step sees the error's name only.
    assert decide_commit_failure("UnfilledColumnError").failure is CommitFailure.DATA_REJECTED  # type: ignore[union-attr]
