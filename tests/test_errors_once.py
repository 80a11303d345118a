"""Issue 35: after a run starts, each error is printed once, and an error a misspelled key caused names
the key. (`run --once` with `create_tabel_if_missing: true` printed "table ... does not exist (... set
create_table_if_missing: true)" four times - the log, the error line, the run's line, the summary -
none of them pointing back at the typo warned about at start.)

Real parts: `kafscale-iceberg run --once` as a user runs it (its own process), moto server, the SQLite
catalog and offset store, the inline runner (no JVM).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.local.wiring import ProgressPrinter
from kafscale_iceberg.segments.keys import format_segment_key
from tests.support.config_documents import local_document
from tests.support.moto import MotoEndpoint
from tests.support.segments import put_segment

NAMESPACE = "prod"
TOPIC = "orders"


def _run_once(
    tmp_path: Path, moto: MotoEndpoint, mapping: dict[str, object], *, corrupt: bool = False
) -> subprocess.CompletedProcess[str]:
    bucket = moto.new_bucket()
    s3 = moto.client("s3")
    put_segment(s3, bucket, NAMESPACE, TOPIC, 0, 0, 10)
    if corrupt:
        key = format_segment_key(NAMESPACE, TOPIC, 0, 0)
        body = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        body[-40] ^= 0x55  # a byte inside the last batch's records: its CRC fails
        s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    document = local_document(
        tmp_path,
        moto,
        bucket=bucket,
        namespace=NAMESPACE,
        mappings=[{"topic": TOPIC, "table": "shop.orders", **mapping}],
        runner={"type": "inline", "inline": {"workers": 1}},
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    return subprocess.run(
        [sys.executable, "-m", "kafscale_iceberg.cli", "run", "--config", str(path), "--once"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "KAFSCALE_METRICS_ADDR": "127.0.0.1:0"},
    )


@pytest.mark.slow  # `kafscale-iceberg run` as a process
def test_a_misspelled_key_s_error_names_the_key_once(moto_server: MotoEndpoint, tmp_path: Path) -> None:
    done = _run_once(tmp_path, moto_server, {"create_tabel_if_missing": True})
    assert done.returncode == 1
    told = [line for line in done.stderr.splitlines() if "does not exist" in line]
    assert len(told) == 1, done.stderr
    assert "create_tabel_if_missing" in done.stderr.split(told[0], 1)[1], done.stderr


@pytest.mark.slow  # `kafscale-iceberg run` as a process
def test_a_run_s_error_is_printed_once(moto_server: MotoEndpoint, tmp_path: Path) -> None:
    done = _run_once(tmp_path, moto_server, {"create_table_if_missing": True}, corrupt=True)
    print(done.stderr)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    told = [line for line in lines if "segment-00000000000000000000.kfs" in line]
    assert len(told) == 1, done.stderr
    assert any(line.startswith(f"  {TOPIC}: FAILED: ") and "the error above" in line for line in lines)


def test_an_error_after_start_names_the_unknown_keys_of_its_topic_s_mapping() -> None:
    """`run` without `--strict-config` warns about an unknown key at start; an error the typo causes
    later (a table dropped after the pre-start check, a setting left at its default) names it again."""
    document = {
        "s3": {"bucket": "b", "namespace": NAMESPACE},
        "iceberg": {"catalog": {"type": "sql", "uri": "sqlite:////tmp/x.db"}, "warehouse": "file:///tmp/w"},
        "offsets": {"backend": "sqlite"},
        "mappings": [
            {"topic": TOPIC, "table": "shop.orders", "create_tabel_if_missing": True},
            {"topic": "payments", "table": "shop.payments", "partiton_by": ["day(ts)"]},
        ],
    }
    config = config_from_mapping(document, source="config.yaml")
    stream = io.StringIO()
    printer = ProgressPrinter(stream, config=config)

    printer.error("sink", TOPIC, RuntimeError("table 'shop.orders' does not exist"))
    printer.error("sink", "clicks", RuntimeError("an error of an unmapped topic"))

    orders, clicks = stream.getvalue().splitlines()
    assert orders == (
        "  orders: sink error: table 'shop.orders' does not exist; the config's unknown key "
        "mappings[0].create_tabel_if_missing (did you mean create_table_if_missing?) was ignored"
    )
    assert clicks == "  clicks: sink error: an error of an unmapped topic"
    assert (
        printer.refer("run r1 aborted: table 'shop.orders' does not exist")
        == "run r1 aborted: the error above"
    )
