"""Opening catalogs: REST credentials, Glue + S3 on a real moto server, SQL; errors without secrets.

No Iceberg REST catalog server installs from PyPI here (the real ones are Java or Rust services
shipped as containers), so the REST tests talk to a small stub of the three endpoints a catalog load
touches (`/v1/oauth/tokens`, `/v1/config`, `/v1/namespaces`) and check what pyiceberg sends.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import uuid4

import boto3
import pytest

from kafscale_iceberg.adapters.iceberg_catalog import (
    CatalogSettings,
    catalog_properties,
    load_iceberg_catalog,
    redact_uri,
)
from kafscale_iceberg.adapters.iceberg_tables import IcebergTableCommitter
from kafscale_iceberg.adapters.sqlite_checkpoints import SqliteCheckpointStore
from kafscale_iceberg.config import parse_config
from kafscale_iceberg.domain.commits import TableSpec
from kafscale_iceberg.domain.leases import LeaseGrant
from kafscale_iceberg.domain.runs import DataFile, RunPlan, RunResult, TableTarget
from kafscale_iceberg.domain.schema import table_fields
from kafscale_iceberg.exceptions import CatalogError, CatalogUnavailableError, ConfigError
from kafscale_iceberg.services.commits.commit import CommitService
from kafscale_iceberg.services.commits.run_writes import TablePolicy
from tests.support.iceberg_runs import RunFactory
from tests.support.moto import MotoEndpoint, free_port

TOKEN = "tok-s3cr3t-0123"
PASSWORD = "pw-s3cr3t-4567"


class RestStub(BaseHTTPRequestHandler):
    """Answers like an Iceberg REST catalog that accepts one bearer token or one OAuth2 client."""

    seen: list[tuple[str, str, str]]  # (method, path, Authorization header or form body)
    accepted_token = TOKEN

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        if self.headers.get("Authorization") != f"Bearer {self.accepted_token}":
            self._reply(
                401, {"error": {"message": "invalid token", "type": "NotAuthorizedException", "code": 401}}
            )
        elif self.path.startswith("/v1/config"):
            self._reply(200, {"defaults": {}, "overrides": {}})
        else:
            self._reply(200, {"namespaces": [["lake"]]})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        self.seen.append(("POST", self.path, body))
        form = urllib.parse.parse_qs(body)
        if form.get("client_id") == ["kafscale"] and form.get("client_secret") == [PASSWORD]:
            self._reply(
                200,
                {
                    "access_token": self.accepted_token,
                    "token_type": "bearer",
                    "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                },
            )
        else:
            self._reply(401, {"error": "invalid_client", "error_description": "bad client credentials"})

    def _reply(self, status: int, document: dict[str, Any]) -> None:
        payload = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def rest_stub() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    seen: list[tuple[str, str, str]] = []
    handler = type("Handler", (RestStub,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_secrets_stay_out_of_repr_and_description() -> None:
    settings = CatalogSettings(
        type="rest", uri="https://c.example", token=TOKEN, username="u", password=PASSWORD
    )

    assert TOKEN not in repr(settings)
    assert PASSWORD not in repr(settings)
    assert settings.describe() == "rest https://c.example"


CONFIG = """
s3: {bucket: segments, endpoint: "http://127.0.0.1:9000", region: eu-west-1, path_style: true}
iceberg:
  catalog: {type: rest, uri: "https://catalog.example", username: kafscale, password: pw-s3cr3t-4567}
  warehouse: s3://lake/warehouse
etcd: {endpoints: ["http://127.0.0.1:2379"]}
mappings:
  - topic: orders
    table: lake.orders
    create_table_if_missing: true
    schema: {columns: [{name: amount, type: long}], allow_type_widening: true}
"""


def test_settings_and_policy_come_from_the_config_file_keys() -> None:
    config = parse_config(CONFIG, source="test", environ={})

    settings = CatalogSettings.from_config(config)

    assert (settings.type, settings.uri, settings.warehouse) == (
        "rest",
        "https://catalog.example",
        "s3://lake/warehouse",
    )
    assert (settings.username, settings.password) == ("kafscale", PASSWORD)
    assert (settings.s3_endpoint, settings.s3_region, settings.s3_path_style) == (
        "http://127.0.0.1:9000",
        "eu-west-1",
        True,
    )
    assert TablePolicy.from_mapping(config.mappings[0]) == TablePolicy(True, True)


def test_a_password_inside_a_uri_is_masked() -> None:
    assert (
        redact_uri(f"postgresql://kafscale:{PASSWORD}@db:5432/cat") == "postgresql://kafscale:***@db:5432/cat"
    )
    assert redact_uri("sqlite:////var/lib/catalog.db") == "sqlite:////var/lib/catalog.db"


def test_s3_settings_become_file_io_properties() -> None:
    settings = CatalogSettings(
        type="glue",
        warehouse="s3://w/h",
        s3_endpoint="http://minio:9000",
        s3_region="eu-west-1",
        s3_path_style=True,
    )

    properties = catalog_properties(settings)

    assert properties["s3.endpoint"] == "http://minio:9000"
    assert properties["s3.force-virtual-addressing"] == "false"
    assert properties["s3.region"] == properties["glue.region"] == "eu-west-1"


def test_explicit_catalog_properties_win() -> None:
    settings = CatalogSettings(
        type="sql",
        uri="sqlite://",
        s3_endpoint="http://x",
        properties={"s3.force-virtual-addressing": "true"},
    )

    assert catalog_properties(settings)["s3.force-virtual-addressing"] == "true"


def test_a_rest_token_is_sent_as_the_bearer_token(rest_stub: tuple[str, list[tuple[str, str, str]]]) -> None:
    uri, seen = rest_stub

    catalog = load_iceberg_catalog(CatalogSettings(type="rest", uri=uri, token=TOKEN))

    assert catalog.list_namespaces() == [("lake",)]
    assert all(auth == f"Bearer {TOKEN}" for method, _, auth in seen if method == "GET")


def test_rest_username_and_password_are_exchanged_as_the_oauth2_client_credential(
    rest_stub: tuple[str, list[tuple[str, str, str]]],
) -> None:
    uri, seen = rest_stub

    catalog = load_iceberg_catalog(
        CatalogSettings(type="rest", uri=uri, username="kafscale", password=PASSWORD)
    )

    assert catalog.list_namespaces() == [("lake",)]
    posts = [body for method, path, body in seen if method == "POST" and path == "/v1/oauth/tokens"]
    assert posts  # pyiceberg fetches a token per HTTP session it opens
    assert all("grant_type=client_credentials&client_id=kafscale" in body for body in posts)


def test_a_rejected_rest_token_is_a_config_error_without_the_token(
    rest_stub: tuple[str, list[tuple[str, str, str]]],
) -> None:
    uri, _ = rest_stub

    with pytest.raises(ConfigError, match=r"iceberg.catalog.token") as raised:
        load_iceberg_catalog(CatalogSettings(type="rest", uri=uri, token="wrong-" + TOKEN))

    assert TOKEN not in str(raised.value)
    assert uri in str(raised.value)


def test_a_rejected_rest_password_is_a_config_error_naming_the_password_key(
    rest_stub: tuple[str, list[tuple[str, str, str]]],
) -> None:
    uri, _ = rest_stub

    with pytest.raises(ConfigError, match=r"iceberg.catalog.password") as raised:
        load_iceberg_catalog(
            CatalogSettings(type="rest", uri=uri, username="kafscale", password="nope-" + PASSWORD)
        )

    assert PASSWORD not in str(raised.value)


def test_an_unreachable_rest_catalog_is_transient() -> None:
    uri = f"http://127.0.0.1:{free_port()}"

    with pytest.raises(CatalogUnavailableError, match=uri) as raised:
        load_iceberg_catalog(CatalogSettings(type="rest", uri=uri, token=TOKEN))

    assert raised.value.transient


def test_an_unknown_sql_driver_is_a_config_error_with_the_password_masked() -> None:
    settings = CatalogSettings(
        type="sql", uri=f"nosuchdb://kafscale:{PASSWORD}@db/cat", warehouse="file:///w"
    )

    with pytest.raises(ConfigError, match=r"iceberg.catalog.uri") as raised:
        load_iceberg_catalog(settings)

    assert PASSWORD not in str(raised.value)
    assert "kafscale:***@db" in str(raised.value)


def _on_s3(plan: RunPlan, result: RunResult, bucket: str, root: Path) -> tuple[RunPlan, RunResult]:
    """The same run with its files uploaded to `bucket` (as the Spark job on EMR writes them)."""
    s3 = boto3.client("s3")

    def moved(files: tuple[DataFile, ...]) -> tuple[DataFile, ...]:
        out = []
        for file in files:
            key = Path(file.uri.removeprefix("file://")).relative_to(root).as_posix()
            s3.upload_file(file.uri.removeprefix("file://"), bucket, key)
            out.append(file.model_copy(update={"uri": f"s3://{bucket}/{key}"}))
        return tuple(out)

    def target(old: TableTarget) -> TableTarget:
        key = Path(old.data_uri.removeprefix("file://")).relative_to(root).as_posix()
        return TableTarget(identifier=old.identifier, data_uri=f"s3://{bucket}/{key}")

    s3_plan = plan.model_copy(
        update={"table": target(plan.table), "dead_letter_table": target(plan.dead_letter_table)}
    )
    s3_result = result.model_copy(
        update={"data_files": moved(result.data_files), "dead_letter_files": moved(result.dead_letter_files)}
    )
    return s3_plan, s3_result


def test_glue_catalog_with_an_s3_warehouse_creates_the_table_and_commits_a_run(
    moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_server.url)
    bucket = moto_server.new_bucket()
    database = f"lake_{uuid4().hex[:8]}"
    settings = CatalogSettings(
        type="glue",
        warehouse=f"s3://{bucket}/warehouse",
        s3_endpoint=moto_server.url,
        s3_region=moto_server.region,
        s3_path_style=True,
        glue_endpoint=moto_server.url,
    )
    catalog = load_iceberg_catalog(settings)
    runs = RunFactory(tmp_path, table=f"{database}.orders", dead_letter_table=f"{database}.orders__dlq")
    local_plan = runs.plan({0: (-1, 9), 1: (-1, 4)})
    plan, result = _on_s3(
        local_plan, runs.result(local_plan, files_per_partition=2, dead_letters={1: [2]}), bucket, tmp_path
    )
    store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
    lease = store.claim_lease("orders", owner_id="test", run_id=plan.run_id)
    assert isinstance(lease, LeaseGrant)

    outcome = CommitService(IcebergTableCommitter(catalog), store).commit_run(
        plan, result, lease, TablePolicy(create_table_if_missing=True)
    )

    table = catalog.load_table(f"{database}.orders")
    assert outcome.table_committed
    assert table.scan().to_arrow().num_rows == 14
    assert table.metadata_location.startswith(f"s3://{bucket}/warehouse/")
    assert catalog.load_table(f"{database}.orders__dlq").scan().to_arrow().num_rows == 1
    assert table.properties["kafscale.offsets.orders"] == '{"0":9,"1":4}'
    glue = boto3.client("glue", endpoint_url=moto_server.url, region_name=moto_server.region)
    assert (
        glue.get_table(DatabaseName=database, Name="orders")["Table"]["Parameters"]["table_type"] == "ICEBERG"
    )


class RefusingCreateStub(RestStub):
    """A REST catalog that knows no table and answers `create_status` to every CreateNamespace."""

    create_status = 500

    def do_GET(self) -> None:
        if self.path.startswith("/v1/config"):
            self._reply(200, {"defaults": {}, "overrides": {}})
        else:
            self._reply(
                404, {"error": {"message": "no such table", "type": "NoSuchTableException", "code": 404}}
            )

    def do_POST(self) -> None:
        self.seen.append(("POST", self.path, ""))
        self._reply(
            self.create_status,
            {
                "error": {
                    "message": "internal error",
                    "type": "InternalServerError",
                    "code": self.create_status,
                }
            },
        )


@pytest.mark.parametrize(("status", "transient"), [(500, False), (503, True), (502, True)])
def test_a_500_answering_create_namespace_is_a_refusal_not_an_outage(status: int, transient: bool) -> None:
    seen: list[tuple[str, str, str]] = []
    handler = type("Handler", (RefusingCreateStub,), {"seen": seen, "create_status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        settings = CatalogSettings(
            type="rest", uri=f"http://127.0.0.1:{server.server_address[1]}", warehouse="w"
        )
        tables = IcebergTableCommitter(load_iceberg_catalog(settings))
        spec = TableSpec(identifier="lake.orders", fields=table_fields(()), create_if_missing=True)
        with pytest.raises(CatalogError) as raised:
            tables.ensure_table(spec)
    finally:
        server.shutdown()
        server.server_close()

    assert raised.value.transient is transient
    assert ("POST", "/v1/namespaces", "") in seen
    if not transient:
        assert "'lake.orders'" in str(raised.value)
        assert "not retried as an outage" in str(raised.value)
