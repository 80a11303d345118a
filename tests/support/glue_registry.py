"""An AWS Glue Schema Registry on the session's moto server, and genuine producers of its records.

moto implements the registry's API (`CreateRegistry`, `CreateSchema`, `RegisterSchemaVersion`,
`GetSchemaByDefinition`, `GetSchemaVersion` by id, by number and latest); it checks no compatibility.
Avro and JSON Schema records come from `aws-glue-schema-registry` (the Python port of
awslabs/aws-glue-schema-registry's serializers: it registers the schema on moto through Glue's API
and writes the header and the payload). No Python serializer writes Glue's Protobuf records: tests
build those per the awslabs serializers' code (`protobuf_record`), with protobuf's runtime for the
message, and say so.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from aws_schema_registry import DataAndSchema, SchemaRegistryClient
from aws_schema_registry.avro import AvroSchema
from aws_schema_registry.codec import encode
from aws_schema_registry.jsonschema import JsonSchema
from aws_schema_registry.serde import KafkaSerializer

from kafscale_iceberg.domain.runs import RegistrySettings, RegistryType
from tests.support.moto import REGION, MotoEndpoint


@dataclass
class GlueRegistry:
    """A fresh registry on moto: its name, Glue client and the serializer writing records to it."""

    name: str
    moto_url: str
    glue: Any
    region: str = REGION

    def settings(self, **more: Any) -> RegistrySettings:
        """What a run plan carries to read this registry (moto's endpoint instead of Glue's)."""
        return RegistrySettings(
            type=RegistryType.GLUE,
            registry_name=self.name,
            region=self.region,
            endpoint_url=self.moto_url,
            **more,
        )

    def config(self) -> dict[str, Any]:
        """The `schema_registry` section of a config reading this registry."""
        return {"type": "glue", "registry_name": self.name, "region": self.region, "endpoint": self.moto_url}

    def serializer(self, *, is_key: bool = False) -> KafkaSerializer:
        client = SchemaRegistryClient(self.glue, registry_name=self.name, wait_interval_seconds=0)
        return KafkaSerializer(client, is_key=is_key)

    def avro(
        self, topic: str, schema: dict[str, Any], records: list[dict[str, Any]], *, is_key: bool = False
    ) -> list[bytes]:
        """`records` as the Glue Avro serializer writes them (the schema `topic-value` registered, or
        `topic-key` for record keys)."""
        serializer, avro = self.serializer(is_key=is_key), AvroSchema(schema)
        return [serializer.serialize(topic, DataAndSchema(r, avro)) for r in records]

    def json(self, topic: str, schema: dict[str, Any], records: list[dict[str, Any]]) -> list[bytes]:
        """`records` as the Glue JSON Schema serializer writes them."""
        serializer, json_schema = self.serializer(), JsonSchema(schema)
        return [serializer.serialize(topic, DataAndSchema(r, json_schema)) for r in records]

    def register(self, schema_name: str, data_format: str, definition: str) -> str:
        """`definition` as the next version of `schema_name` (created on first use); its version id."""
        try:
            answer = self.glue.register_schema_version(
                SchemaId={"RegistryName": self.name, "SchemaName": schema_name}, SchemaDefinition=definition
            )
        except self.glue.exceptions.EntityNotFoundException:
            answer = self.glue.create_schema(
                RegistryId={"RegistryName": self.name},
                SchemaName=schema_name,
                DataFormat=data_format,
                Compatibility="NONE",
                SchemaDefinition=definition,
            )
        return str(answer["SchemaVersionId"])

    def set_status(self, version_id: str, status: str) -> None:
        """Give schema version `version_id` Glue's `status` (PENDING, FAILURE, ...). Glue sets it itself
        after its compatibility check, which moto does not run, and moto has no API for it: this reaches
        into the in-process moto server's Glue backend (`ThreadedMotoServer`), the only way to have it
        answer `GetSchemaVersion` with another status than AVAILABLE."""
        from moto.backends import get_backend
        from moto.core import DEFAULT_ACCOUNT_ID

        registry = get_backend("glue")[DEFAULT_ACCOUNT_ID][self.region].registries[self.name]
        for schema in registry.schemas.values():
            if version_id in schema.schema_versions:
                schema.schema_versions[version_id].schema_version_status = status
                return
        raise KeyError(f"no schema version {version_id} in registry {self.name}")

    def version_id(self, schema_name: str, version: int | None = None) -> str:
        number = {"LatestVersion": True} if version is None else {"VersionNumber": version}
        answer = self.glue.get_schema_version(
            SchemaId={"RegistryName": self.name, "SchemaName": schema_name}, SchemaVersionNumber=number
        )
        return str(answer["SchemaVersionId"])


def compressed(record: bytes) -> bytes:
    """A record the Glue serializer wrote, written again with its zlib compression (the library's
    own `encode`, compression on)."""
    return encode(record[18:], uuid.UUID(bytes=record[2:18]), compression=True)


def protobuf_record(version_id: str, message_index: int, message: bytes, *, compress: bool = False) -> bytes:
    """A Glue Protobuf record, built per the awslabs serializers (no Python one exists): the header
    (version 3, compression, the version id's 16 bytes), then the payload (zlib when compressed): the
    message index as an unsigned varint, then the message."""
    index = bytearray()
    value = message_index
    while True:
        byte, value = value & 0x7F, value >> 7
        index.append(byte | (0x80 if value else 0))
        if not value:
            break
    return encode(bytes(index) + message, uuid.UUID(version_id), compression=compress)


@contextmanager
def open_glue_registry(moto_url: str, region: str = REGION) -> Iterator[GlueRegistry]:
    """A fresh Glue schema registry on moto in `region`, deleted when the block ends."""
    glue = boto3.client("glue", endpoint_url=moto_url, region_name=region)
    name = f"registry-{uuid.uuid4().hex[:8]}"
    glue.create_registry(RegistryName=name)
    try:
        yield GlueRegistry(name=name, moto_url=moto_url, glue=glue, region=region)
    finally:
        glue.delete_registry(RegistryId={"RegistryName": name})


@pytest.fixture
def glue_registry(moto_server: MotoEndpoint) -> Iterator[GlueRegistry]:
    """A fresh Glue schema registry on the session's moto server, deleted after the test."""
    with open_glue_registry(moto_server.url) as registry:
        yield registry
