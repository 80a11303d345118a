"""Plan/result documents at file://, plain-path and s3:// URIs (moto server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafscale_iceberg.adapters.documents import DocumentStore, join_uri
from kafscale_iceberg.exceptions import DocumentMissingError, KafscaleIcebergError
from tests.support.moto import MotoEndpoint


def test_join_uri() -> None:
    assert join_uri("s3://b/runs/", "/orders/", "r1", "plan.json") == "s3://b/runs/orders/r1/plan.json"
    assert join_uri("file:///tmp/x", "a") == "file:///tmp/x/a"


@pytest.mark.parametrize("scheme", ["file", "path"])
def test_local_documents_round_trip_and_replace(tmp_path: Path, scheme: str) -> None:
    path = tmp_path / "runs" / "orders" / "plan.json"
    uri = path.as_uri() if scheme == "file" else str(path)
    store = DocumentStore()
    assert not store.exists(uri)
    store.write_text(uri, "one")
    store.write_text(uri, "two")
    assert store.read_text(uri) == "two"
    assert [p.name for p in path.parent.iterdir()] == ["plan.json"]


def test_s3_documents_round_trip(moto_server: MotoEndpoint) -> None:
    store = DocumentStore(moto_server.s3_settings())
    uri = f"s3://{moto_server.new_bucket()}/runs/orders/r1/result.json"
    with pytest.raises(DocumentMissingError, match=r"result\.json"):
        store.read_text(uri)
    store.write_text(uri, '{"ok": true}')
    assert store.read_text(uri) == '{"ok": true}'


def test_unsupported_uri_is_an_error() -> None:
    with pytest.raises(KafscaleIcebergError, match="not an s3://"):
        DocumentStore().read_text("gs://bucket/key")
