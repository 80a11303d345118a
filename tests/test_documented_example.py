"""Issue 35 §2: the one-machine example of docs/configuration.md, fed by `segments generate`, lands
every mapped column. (The example asked for `store` and `ordered_at` while the generator writes
`store_id` and `event_time`: 2,400 rows landed with those columns null, in one null partition.)

Real parts: the example as the docs print it (only its bucket, endpoint and local paths moved under
the test's directory), a moto server, the generator's segments, the inline runner (no JVM), a SQLite
catalog.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.config import KafscaleConfig, config_from_mapping
from kafscale_iceberg.local.wiring import ProgressPrinter, open_pipeline
from kafscale_iceberg.segments.generate import generate_segments, write_segments
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
    with open_pipeline(config, observers=[ProgressPrinter(progress)]) as pipeline:
        summary = pipeline.run_once()
    assert summary.ok, summary.failed
    return Landed(config, mapping, progress.getvalue())


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


def test_a_column_no_record_fills_is_warned_once_per_run(landed: Landed) -> None:
    lines = landed.progress.splitlines()
    warnings = [line for line in lines if "WARNING: column" in line]
    prefix = f"  {MISTAKEN['topic']}: run "
    runs = [line for line in lines if line.startswith(prefix) and " committed " in line]
    assert len(warnings) == len(runs) >= 1, landed.progress  # once per run
    for line in warnings:
        assert line.startswith(f"  {MISTAKEN['topic']}: WARNING: columns store, ordered_at null in all ")
        assert "segments inspect" in line
