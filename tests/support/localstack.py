"""LocalStack community in host mode (no Docker), started once per session on a free loopback port.

Its virtualenv is `.venv-localstack` (Python 3.13: localstack-core imports under no other; pins in
infra/tools/localstack.txt), built by `make test` (`make tool-localstack`); the fixture builds it too
when pytest runs alone. It never enters the project venv (it brings its own moto). Started with
hypercorn on 127.0.0.1 (twisted, its default server, binds 0.0.0.0 whatever it is told), no DNS
server, no persistence, no certificate download or analytics. `SFN_MOCK_CONFIG` points at a file the
tests write (`mock_step_functions`): Step Functions' mocked service integrations, re-read when the
file changes, for the Lambda tasks LocalStack community cannot run (its Lambda needs Docker).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.moto import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-localstack"
START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class LocalStack:
    url: str
    sfn_mock_config: Path
    started_in_s: float

    def mock_step_functions(self, config: dict[str, Any]) -> None:
        """Write Step Functions' mock configuration (`StateMachines` test cases, `MockedResponses`).
        LocalStack re-reads it when its modification time (whole seconds) changes: the time is moved
        on by a second whenever a write would not change it."""
        before = int(self.sfn_mock_config.stat().st_mtime)
        self.sfn_mock_config.write_text(json.dumps(config))
        stamp = max(int(time.time()), before + 1)
        os.utime(self.sfn_mock_config, (stamp, stamp))


def _venv_python() -> Path:
    made = subprocess.run(
        ["make", "--no-print-directory", ".venv-localstack/.installed"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if made.returncode != 0:
        pytest.fail(
            "make .venv-localstack/.installed failed (LocalStack's host mode needs Python 3.13: "
            "pyenv's, or one uv can find or download; set LOCALSTACK_PYTHON to its path):\n"
            f"{made.stdout[-3000:]}{made.stderr[-3000:]}"
        )
    return VENV / "bin" / "python"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_localstack/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def localstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    python = _venv_python()
    work = tmp_path_factory.mktemp("localstack")
    mock_config = work / "sfn-mock.json"
    mock_config.write_text(json.dumps({"StateMachines": {}, "MockedResponses": {}}))
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(work)),
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "GATEWAY_SERVER": "hypercorn",
        "DNS_ADDRESS": "0",
        "PERSISTENCE": "0",
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "DISABLE_EVENTS": "1",
        "FILESYSTEM_ROOT": str(work / "filesystem"),
        "SFN_MOCK_CONFIG": str(mock_config),
        # Queue URLs on the gateway's address (not *.localhost.localstack.cloud, a public DNS name).
        "SQS_ENDPOINT_STRATEGY": "path",
        "LOCALSTACK_HOST": f"127.0.0.1:{port}",
    }
    log = work / "localstack.log"
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(python), "-m", "localstack.runtime.main"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                pytest.fail(f"LocalStack did not start (exit {process.poll()}):\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        yield LocalStack(url=url, sfn_mock_config=mock_config, started_in_s=time.monotonic() - started)
    finally:
        # Nothing to keep (no persistence): its process group is killed rather than shut down (6 s).
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
