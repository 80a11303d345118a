"""The seed article's pizza events through `kafscale-iceberg run --once`, as a new user tries them.

Real parts: moto server (S3), a real etcd, a SQLite catalog with a file warehouse, local Spark in the
`run` process (its own JVM), and `status --json` as its own process.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings, load_iceberg_catalog
from kafscale_iceberg.config import load_config
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

NAMESPACE = "prod"
TOPIC = "completed-pizzas"
# The forms people write (the article's own first), and two values that are not date-times at all.
DATES = [
    "2024-01-04 12:28:13",
    "2024-01-04T12:28:13",
    "2024-01-04 12:28:13.250",
    "2024-01-04T17:58:13+05:30",
    "2024-01-04T17:58:13+0530",
    "2024-01-04T12:28:13Z",
    "yesterday",
    "",
]


def pizza(offset: int) -> bytes:
    return json.dumps(
        {
            "order_id": f"af69865f-61a7-4e39-824e-{offset:012d}",
            "store_id": 42 + offset % 3,
            "sauce": "extra",
            "cheese": "three cheese",
            "meats": "ham",
            "veggies": "onions & pineapple",
            "date_ordered": DATES[offset % len(DATES)],
        }
    ).encode()


def _env() -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "KAFSCALE_METRICS_ADDR": "127.0.0.1:0"}


@pytest.mark.slow
def test_pizza_events_land_with_their_timestamps_and_unconvertible_values_are_counted(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    s3: Any = moto_server.client("s3")
    bucket = moto_server.new_bucket()
    path = tmp_path / "config.yaml"
    columns = [
        {"name": "order_id", "type": "string", "required": True},
        {"name": "store_id", "type": "int"},
        {"name": "sauce", "type": "string"},
        {"name": "date_ordered", "type": "timestamp"},
    ]
    path.write_text(
        yaml.safe_dump(
            local_document(
                tmp_path,
                moto_server,
                bucket=bucket,
                namespace=NAMESPACE,
                etcd_url=etcd_server.url,
                mappings=[
                    {
                        "topic": TOPIC,
                        "table": "rpc.pizzas",
                        "create_table_if_missing": True,
                        "schema": {"columns": columns},
                    }
                ],
            )
        )
    )
    count = 4 * len(DATES)
    put_segment(s3, bucket, NAMESPACE, TOPIC, 0, 0, count, values=[pizza(o) for o in range(count)])

    command = [sys.executable, "-m", "kafscale_iceberg.cli"]
    done = subprocess.run(
        [*command, "run", "--config", str(path), "--once"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"1 run committed, {count} records" in done.stderr
    # Never silently null: the summary names the column and how many values did not convert.
    assert f"{TOPIC}: values that did not convert to their column's type" in done.stderr
    assert "date_ordered 8" in done.stderr

    config = load_config(path)
    table = load_iceberg_catalog(CatalogSettings.from_config(config)).load_table("rpc.pizzas")
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert len(rows) == count
    expected = {
        "2024-01-04 12:28:13": dt.datetime(2024, 1, 4, 12, 28, 13),
        "2024-01-04T12:28:13": dt.datetime(2024, 1, 4, 12, 28, 13),
        "2024-01-04 12:28:13.250": dt.datetime(2024, 1, 4, 12, 28, 13, 250000),
        "2024-01-04T17:58:13+05:30": dt.datetime(2024, 1, 4, 12, 28, 13),
        "2024-01-04T17:58:13+0530": dt.datetime(2024, 1, 4, 12, 28, 13),
        "2024-01-04T12:28:13Z": dt.datetime(2024, 1, 4, 12, 28, 13),
        "yesterday": None,
        "": None,
    }
    for row in rows:
        written = json.loads(row["value"])["date_ordered"]
        assert row["date_ordered"] == expected[written], row
        assert row["store_id"] == 42 + row["offset"] % 3
    assert json.loads(rows[6]["value"])["date_ordered"] == "yesterday"  # the raw value keeps the bytes

    status = subprocess.run(
        [*command, "status", "--config", str(path), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert status.returncode == 0, status.stderr[-3000:]
    (topic,) = json.loads(status.stdout)["topics"]
    assert topic["conversion_failures"] == {"date_ordered": 8}
