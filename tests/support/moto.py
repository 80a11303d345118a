"""A real moto server (S3, SQS, Glue, EMR Serverless, ...) on a free loopback port, shared per session."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from uuid import uuid4

import boto3
import pytest
from moto.server import ThreadedMotoServer

from kafscale_iceberg.adapters.s3_segments import S3Settings

REGION = "us-east-1"


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoEndpoint]:
    """Start moto in server mode; AWS credentials are set to dummies for the whole session."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        os.environ.setdefault(name, value)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield MotoEndpoint(url=f"http://127.0.0.1:{port}")
    finally:
        server.stop()
