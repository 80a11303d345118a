"""etcd over TLS with a private CA and client certificates (KafScale's etcd on Kubernetes), against a
real etcd started with `--cert-file/--key-file/--trusted-ca-file --client-cert-auth`; `openssl`
makes the test CA, the server certificate (for 127.0.0.1) and the client certificate."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafscale_iceberg.adapters.etcd_checkpoints import EtcdCheckpointStore
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import ETCD_SECRET_ENV, apply_deployment_environment, config_from_mapping
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.exceptions import CheckpointError, ConfigValidationError
from tests.support.config_documents import local_document
from tests.support.etcd import etcd_binary
from tests.support.moto import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for the test CA"),
]


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(folder: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=folder,
    )  # fmt: skip


def _signed(folder: Path, name: str, extensions: str) -> None:
    (folder / f"{name}.ext").write_text(extensions)
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    _ca(folder, "ca")
    _ca(folder, "other-ca")
    _signed(folder, "server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _signed(folder, "client", "extendedKeyUsage=clientAuth\n")
    return Pki(
        ca=folder / "ca.pem",
        server_cert=folder / "server.pem",
        server_key=folder / "server.key",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
        other_ca=folder / "other-ca.pem",
    )


@pytest.fixture(scope="module")
def tls_etcd(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real etcd serving only TLS and requiring a client certificate signed by the test CA."""
    folder = tmp_path_factory.mktemp("etcd-tls")
    client_port, peer_port = free_port(), free_port()
    url, peer = f"https://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    log = (folder / "etcd.log").open("wb")
    process = subprocess.Popen(
        [
            str(etcd_binary()),
            "--name=tls",
            f"--data-dir={folder / 'data'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=tls={peer}",
            f"--cert-file={pki.server_cert}",
            f"--key-file={pki.server_key}",
            f"--trusted-ca-file={pki.ca}",
            "--client-cert-auth",
            "--unsafe-no-fsync",
            "--log-level=error",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            store = _store(url, pki)
            try:
                store.load_committed_offsets("ready")
                break
            except CheckpointError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
            finally:
                store.close()
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def _store(url: str, pki: Pki, **overrides: object) -> EtcdCheckpointStore:
    options: dict[str, object] = {
        "ca_cert_path": str(pki.ca),
        "client_cert_path": str(pki.client_cert),
        "client_key_path": str(pki.client_key),
        "timeout_seconds": 2.0,
        "key_prefix": f"tls-{time.monotonic_ns()}",
    } | overrides
    return EtcdCheckpointStore([url], **options)  # type: ignore[arg-type]


def _config(url: str, tls: dict[str, str], tmp_path: Path) -> dict[str, object]:
    return local_document(
        tmp_path,
        None,
        bucket="b",
        etcd_url=url,
        etcd={"tls": tls},
        mappings=[{"topic": "orders", "table": "shop.orders"}],
    )


def test_the_configured_ca_and_client_certificate_reach_an_etcd_requiring_them(
    tls_etcd: str, pki: Pki, tmp_path: Path
) -> None:
    tls = {"ca_file": str(pki.ca), "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
    config = config_from_mapping(_config(tls_etcd, tls, tmp_path), source="config.yaml")
    store = Assembly(config).checkpoints
    grant = store.claim_lease("orders", owner_id="tls-test", run_id="r1")
    assert isinstance(grant, LeaseGrant)
    store.renew_lease(grant)
    assert store.release_lease(grant)


def test_without_the_client_certificate_etcd_refuses_and_the_error_names_the_endpoint(
    tls_etcd: str, pki: Pki
) -> None:
    store = _store(tls_etcd, pki, client_cert_path=None, client_key_path=None)
    with pytest.raises(CheckpointError) as raised:
        store.load_committed_offsets("orders")
    assert tls_etcd in str(raised.value)
    store.close()


def test_a_server_certificate_of_another_ca_is_refused(tls_etcd: str, pki: Pki) -> None:
    store = _store(tls_etcd, pki, ca_cert_path=str(pki.other_ca))
    with pytest.raises(CheckpointError):
        store.load_committed_offsets("orders")
    store.close()


def test_a_client_certificate_without_its_key_is_a_config_error_naming_the_key(
    pki: Pki, tmp_path: Path
) -> None:
    with pytest.raises(ConfigValidationError) as raised:
        config_from_mapping(
            _config("https://127.0.0.1:2379", {"cert_file": str(pki.client_cert)}, tmp_path), source="c"
        )
    assert "etcd.tls.key_file" in str(raised.value)


class PemSecrets:
    def __init__(self, pki: Pki) -> None:
        self.text = json.dumps(
            {
                "tls_ca": pki.ca.read_text(),
                "tls_cert": pki.client_cert.read_text(),
                "tls_key": pki.client_key.read_text(),
            }
        )

    def read_secret(self, secret_id: str) -> str:
        return self.text


def test_in_aws_the_etcd_secret_carries_the_pems(tls_etcd: str, pki: Pki, tmp_path: Path) -> None:
    config = apply_deployment_environment(
        _config(tls_etcd, {}, tmp_path),
        {ETCD_SECRET_ENV: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:etcd-AbCdEf"},
        source="config.yaml",
        secrets=PemSecrets(pki),
    )
    assert Path(config.etcd.tls.key_file).stat().st_mode & 0o077 == 0  # private to this user
    store = Assembly(config).checkpoints
    assert store.load_committed_offsets("orders").states == {}
