"""A real moto server (S3, SQS, Glue, EMR Serverless, ...) on a free loopback port, shared per session."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from uuid import uuid4

import boto3
import pytest

from kafscale_iceberg.adapters.s3_segments import S3Settings
from kafscale_iceberg.local.embedded import DEFAULT_REGION, free_port, start_moto

REGION = DEFAULT_REGION
__all__ = ["REGION", "MotoEndpoint", "free_port", "moto_server"]


@dataclass(frozen=True)
class MotoEndpoint:
    """Where the moto server listens, and a fresh-bucket helper."""

    url: str
    region: str = REGION

    def s3_settings(self) -> S3Settings:
        return S3Settings(endpoint_url=self.url, region=self.region, path_style=True)

    def client(self, service: str) -> object:
        return boto3.client(service, endpoint_url=self.url, region_name=self.region)

    def new_bucket(self) -> str:
        name = f"test-{uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.url, region_name=self.region).create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoEndpoint]:
    """Start moto in server mode; AWS credentials are set to dummies for the whole session."""
    server = start_moto(REGION)
    try:
        yield MotoEndpoint(url=server.url)
    finally:
        server.stop()
