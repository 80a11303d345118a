"""Issue 35 §2: the one-machine example of docs/configuration.md, fed by `segments generate`, lands
every mapped column. (The example asked for `store` and `ordered_at` while the generator writes
`store_id` and `event_time`: 2,400 rows landed with those columns null, in one null partition.)

Real parts: the example as the docs print it (only its bucket, endpoint and local paths moved under
the test's directory), a moto server, the generator's segments, the inline runner (no JVM), a SQLite
catalog.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.local.wiring import open_pipeline
from kafscale_iceberg.segments.generate import generate_segments, write_segments
from tests.support.moto import MotoEndpoint

DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _one_machine_example() -> dict[str, Any]:
    text = DOCS.read_text()
    first = re.findall(r"<!-- complete-example -->\n```yaml\n(.*?)```", text, flags=re.DOTALL)[0]
    document: dict[str, Any] = yaml.safe_load(first)
    assert document["offsets"]["backend"] == "sqlite"  # the one-machine example comes first
    return document


def test_the_documented_example_fed_by_segments_generate_fills_every_column(
    moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    document = _one_machine_example()
    bucket = moto_server.new_bucket()
    document["s3"].update(bucket=bucket, endpoint=moto_server.url, region=moto_server.region)
    document["iceberg"]["catalog"]["uri"] = f"sqlite:///{tmp_path}/catalog.db"
    document["iceberg"]["warehouse"] = f"file://{tmp_path}/warehouse"
    document["offsets"]["sqlite_path"] = str(tmp_path / "offsets.sqlite")
    document["runner"] = {"type": "inline", "inline": {"workers": 2}}
    document["runs"] = {"min_bytes_per_run": 0}
    config = config_from_mapping(document, source="docs/configuration.md")
    write_segments(
        f"s3://{bucket}",
        generate_segments(namespace=document["s3"]["namespace"], partitions=2, batches_per_segment=2),
        endpoint_url=moto_server.url,
    )

    with open_pipeline(config) as pipeline:
        summary = pipeline.run_once()
    assert summary.ok, summary.failed

    mapping = document["mappings"][0]
    table = load_iceberg_catalog(CatalogSettings.from_config(config)).load_table(mapping["table"])
    rows = table.scan().to_arrow()
    assert rows.num_rows == 2 * 2 * 100
    all_null = [
        column["name"]
        for column in mapping["schema"]["columns"]
        if rows.column(column["name"]).null_count == rows.num_rows
    ]
    assert all_null == [], f"columns no record filled: {all_null}"
