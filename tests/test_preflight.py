"""Issue 35 §1: `run`, `status`, `replay` and `maintain` find each first-hour mistake before any JVM
starts, and say it once, naming the key and the fix.

Real parts: a moto server (S3), a real etcd, SQLite catalogs; the commands run in this process
(`cli.main`), and once as a `kafscale-iceberg run --once` child process whose modules show no JVM
was started.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafscale_iceberg.cli import main
from kafscale_iceberg.config import load_config
from kafscale_iceberg.local.preflight import state_directory_problems
from tests.support.config_documents import local_document
from tests.support.etcd import EtcdServer
from tests.support.moto import MotoEndpoint

MAPPING = {
    "topic": "orders",
    "table": "shop.orders",
    "create_table_if_missing": True,
    "schema": {"columns": [{"name": "order_id", "type": "long"}]},
}


def _write(tmp_path: Path, document: dict[str, Any]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def _config(tmp_path: Path, moto: MotoEndpoint, **overrides: Any) -> dict[str, Any]:
    mapping = {**MAPPING, **overrides.pop("mapping", {})}
    return local_document(
        tmp_path, moto, bucket=overrides.pop("bucket", moto.new_bucket()), mappings=[mapping], **overrides
    )


def _errors(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 1
    return capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("command", ["status", "maintain"])
def test_a_state_directory_that_cannot_be_created_is_named_with_its_path(
    command: str, moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the state directory should be")
    document = _config(
        tmp_path, moto_server, offsets={"sqlite_path": str(blocker / "state" / "offsets.sqlite")}
    )
    err = _errors(capsys, command, "--config", _write(tmp_path, document))
    assert "offsets.sqlite_path" in err
    assert str(blocker / "state") in err
    assert "create it" in err
    assert err.count("offsets.sqlite_path:") == 1


def test_missing_state_directories_are_created(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "var" / "lib" / "kafscale-iceberg"
    document = _config(tmp_path, moto_server, offsets={"sqlite_path": str(deep / "offsets.sqlite")})
    assert main(["status", "--config", _write(tmp_path, document)]) == 0
    assert deep.is_dir()


def test_a_table_bucket_arn_warehouse_is_not_made_a_local_folder(
    moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A REST catalog over S3 Tables takes the table bucket's ARN as its warehouse: an ARN has no
    # "://", and the pre-start check once created it as a folder in the working directory.
    monkeypatch.chdir(tmp_path)
    document = _config(tmp_path, moto_server)
    document["iceberg"]["warehouse"] = "arn:aws:s3tables:us-east-1:111122223333:bucket/lake"
    document["iceberg"]["catalog"] = {"type": "rest", "uri": "http://127.0.0.1:9/iceberg"}
    document["runs"] = {**document.get("runs", {}), "location": str(tmp_path / "runs")}
    config = load_config(_write(tmp_path, document))
    assert state_directory_problems(config) == []
    assert not any(entry.name.startswith("arn:") for entry in tmp_path.iterdir())


def test_a_misspelled_bucket_is_named_before_the_run(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _config(tmp_path, moto_server, bucket="no-such-bucket-here")
    err = _errors(capsys, "replay", "--config", _write(tmp_path, document), "--topic", "orders")
    assert "s3.bucket: bucket 'no-such-bucket-here' does not exist" in err
    assert moto_server.url in err
    assert err.count("does not exist") == 1


def test_maintain_does_not_ask_for_the_segments_bucket(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`maintain` works on the tables and the run documents, never on segments: a bucket it never
    reads (here one that does not exist) is not a reason to refuse it."""
    document = _config(tmp_path, moto_server, bucket="no-such-bucket-here")
    assert main(["maintain", "--config", _write(tmp_path, document), "--dry-run"]) == 0
    assert "s3.bucket" not in capsys.readouterr().err


def test_a_wrong_etcd_endpoint_is_named_once(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = f"127.0.0.1:{_free_port()}"
    document = _config(tmp_path, moto_server, etcd={"endpoints": [wrong]}, offsets={"backend": "etcd"})
    err = _errors(capsys, "status", "--config", _write(tmp_path, document))
    assert f"etcd.endpoints: no etcd answers at http://{wrong}" in err
    assert "2379" in err  # the fix names etcd's client port
    assert err.count("no etcd answers") == 1


def test_a_live_etcd_passes(
    moto_server: MotoEndpoint, etcd_server: EtcdServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = local_document(
        tmp_path, moto_server, bucket=moto_server.new_bucket(), mappings=[MAPPING], etcd_url=etcd_server.url
    )
    assert main(["status", "--config", _write(tmp_path, document)]) == 0


def test_a_misspelled_key_is_repeated_in_the_error_it_causes(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`create_tabel_if_missing`: the default (false) applies, the table is missing; the error
    says so before the run, names the key to set and points back at the misspelling."""
    mapping = {k: v for k, v in MAPPING.items() if k != "create_table_if_missing"}
    document = local_document(
        tmp_path,
        moto_server,
        bucket=moto_server.new_bucket(),
        mappings=[{**mapping, "create_tabel_if_missing": True}],
    )
    err = _errors(capsys, "maintain", "--config", _write(tmp_path, document))
    assert "mappings[0].create_table_if_missing: table 'shop.orders' (topic 'orders') does not exist" in err
    assert "unknown keys" in err
    assert "mappings[0].create_tabel_if_missing" in err.split("unknown keys", 1)[1]
    assert err.count("does not exist") == 1


def test_maintain_strict_config_refuses_a_misspelled_key(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _config(tmp_path, moto_server, mapping={"create_tabel_if_missing": True})
    err = _errors(capsys, "maintain", "--strict-config", "--config", _write(tmp_path, document))
    assert "mappings[0].create_tabel_if_missing: unknown key" in err


def test_every_problem_is_listed_in_one_message(
    moto_server: MotoEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = f"127.0.0.1:{_free_port()}"
    document = _config(
        tmp_path,
        moto_server,
        bucket="misspelled-bucket",
        etcd={"endpoints": [wrong]},
        offsets={"backend": "etcd"},
    )
    err = _errors(capsys, "status", "--config", _write(tmp_path, document))
    assert "(2 problems)" in err
    assert "s3.bucket:" in err
    assert "etcd.endpoints:" in err


def _run_once_in_a_child(config_path: str) -> subprocess.CompletedProcess[str]:
    """`kafscale-iceberg run --once` in a process of its own; its stdout says whether pyspark (and so
    a JVM) was ever loaded."""
    script = (
        "import sys\n"
        "from kafscale_iceberg.cli import main\n"
        f"code = main(['run', '--once', '--config', {config_path!r}])\n"
        "print('pyspark loaded' if 'pyspark' in sys.modules else 'no pyspark')\n"
        "sys.exit(code)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "KAFSCALE_METRICS_ADDR": "127.0.0.1:0", "SPARK_LOCAL_IP": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_run_once_with_a_misspelled_bucket_exits_before_any_jvm(
    moto_server: MotoEndpoint, tmp_path: Path
) -> None:
    """The command as a user runs it: exit 1, one message, and pyspark never imported in the process."""
    document = _config(tmp_path, moto_server, bucket="no-such-bucket-here")
    child = _run_once_in_a_child(_write(tmp_path, document))
    assert child.returncode == 1, child.stderr[-3000:]
    assert child.stdout.strip() == "no pyspark"
    assert child.stderr.count("bucket 'no-such-bucket-here' does not exist") == 1


@pytest.mark.slow
def test_run_once_with_nothing_pending_starts_no_jvm(moto_server: MotoEndpoint, tmp_path: Path) -> None:
    """Issue 35: `run --once` with nothing new warmed the JVM first (728 s on a loaded machine)."""
    child = _run_once_in_a_child(_write(tmp_path, _config(tmp_path, moto_server)))
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.strip() == "no pyspark"
    assert "0 runs committed, 0 records, 0 topics failed" in child.stderr
