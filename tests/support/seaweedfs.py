"""A real S3 API and Iceberg REST catalog: SeaweedFS (`weed mini`), one per session, a table bucket per test.

`seaweedfs` is the running server (`kafscale_iceberg/local/seaweedfs.py`: free loopback ports, the
credentials set at start, volumes enough for hundreds of buckets). `table_bucket` creates a fresh
S3 Tables-style table bucket for one test (`TableBucket`: its name, ARN, and the pyiceberg REST
catalog properties that reach it with SigV4 or OAuth2). A table bucket holds tables only: plain
objects in it are refused (AccessDenied), as Amazon S3 Tables refuses them; `plain_bucket` is a
normal bucket beside it (segments, runs' documents).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import boto3
import pytest

from kafscale_iceberg.exceptions import EmbeddedServiceError
from kafscale_iceberg.local.seaweedfs import EmbeddedSeaweedFS, start_seaweedfs

_names = itertools.count(1)


@dataclass(frozen=True)
class TableBucket:
    """A table bucket of the session's SeaweedFS."""

    server: EmbeddedSeaweedFS
    name: str
    arn: str

    @property
    def warehouse(self) -> str:
        """The bucket as an Iceberg warehouse (`s3://name`; the ARN works too, as on S3 Tables)."""
        return f"s3://{self.name}"

    def catalog_properties(self, auth: Literal["oauth2", "sigv4"] = "oauth2") -> dict[str, str]:
        """pyiceberg REST catalog properties reaching this bucket with `auth` (secrets included)."""
        server = self.server
        storage = {
            "s3.endpoint": server.s3_url,
            "s3.access-key-id": server.access_key,
            "s3.secret-access-key": server.secret_key,
            "s3.region": server.region,
        }
        if auth == "sigv4":
            return {
                "uri": server.iceberg_url,
                "warehouse": self.arn,
                "rest.sigv4-enabled": "true",
                "rest.signing-name": "s3tables",
                "rest.signing-region": server.region,
                "client.access-key-id": server.access_key,
                "client.secret-access-key": server.secret_key,
                "client.region": server.region,
                **storage,
            }
        return {
            "uri": server.iceberg_url,
            "warehouse": self.warehouse,
            "credential": f"{server.access_key}:{server.secret_key}",
            "oauth2-server-uri": f"{server.iceberg_url}/v1/oauth/tokens",
            **storage,
        }


def seaweedfs_client(server: EmbeddedSeaweedFS, service: str) -> Any:
    """A boto3 client of `service` (`s3`, `s3tables`) on `server`, with its credentials."""
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=server.s3_url,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name=server.region,
    )


def unique_bucket_name(prefix: str) -> str:
    """A bucket name no other test of this session (on any xdist worker) uses."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return f"{prefix}-{worker}-{next(_names)}"


def create_table_bucket(server: EmbeddedSeaweedFS, prefix: str = "tables") -> TableBucket:
    """A new table bucket (the S3 Tables API's CreateTableBucket)."""
    name = unique_bucket_name(prefix)
    answer = seaweedfs_client(server, "s3tables").create_table_bucket(name=name)
    return TableBucket(server=server, name=name, arn=answer["arn"])


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedSeaweedFS]:
    """SeaweedFS (`weed mini`) for the whole session; give each test its own buckets."""
    try:
        server = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    except EmbeddedServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def table_bucket(seaweedfs: EmbeddedSeaweedFS) -> TableBucket:
    """A fresh table bucket for one test."""
    return create_table_bucket(seaweedfs)


@pytest.fixture
def plain_bucket(seaweedfs: EmbeddedSeaweedFS) -> str:
    """A fresh normal bucket for one test (segments, runs' documents)."""
    name = unique_bucket_name("plain")
    seaweedfs_client(seaweedfs, "s3").create_bucket(Bucket=name)
    return name
