"""How a mapping's record values (and keys) are written by their producers, and the schema registry a
run reads their schemas from (`mappings[].value_format`, `.key_format`, top-level `schema_registry`).

`json` is today's schemaless JSON (mapping, registry-described or inferred columns). The others carry
or name their own schema: `connect_json` (Kafka Connect's `{"schema", "payload"}` envelope), `avro`,
`protobuf` and `json_schema` (Confluent wire format: a zero byte, a 4-byte big-endian schema id, the
payload). Their decoders live in `dataplane/formats/`; the rest of the data plane does not know them.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from kafscale_iceberg.domain.runs.documents import DocumentModel


class ValueFormat(StrEnum):
    """`mappings[].value_format`: how the producers wrote the record values."""

    JSON = "json"
    CONNECT_JSON = "connect_json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json_schema"

    @property
    def registered(self) -> bool:
        """Whether its values name a schema in a schema registry (Confluent wire format)."""
        return self in (ValueFormat.AVRO, ValueFormat.PROTOBUF, ValueFormat.JSON_SCHEMA)

    @property
    def self_described(self) -> bool:
        """Whether its columns come from the records' own schemas (every format but `json`)."""
        return self is not ValueFormat.JSON


class KeyFormat(StrEnum):
    """`mappings[].key_format`: how the producers wrote the record keys (`raw`: bytes, not decoded;
    the others are read as values of that format are, into the `key_` columns: `KEY_COLUMN_PREFIX`)."""

    RAW = "raw"
    JSON = "json"
    CONNECT_JSON = "connect_json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json_schema"

    @property
    def as_value_format(self) -> ValueFormat | None:
        """The value format whose decoder reads such keys (None for `raw`)."""
        return None if self is KeyFormat.RAW else ValueFormat(self.value)


KEY_COLUMN_PREFIX = "key_"
"""With a decoded `key_format`: a column named `key_<field>` holds the decoded key's field `<field>`
(Flink's `key.fields-prefix`, fixed); the binary `key` base column stays."""
KEY_VALUE_FIELD = "value"
"""A decoded key whose schema is not a record (an Avro `"string"` or `"long"`, a JSON Schema
`{"type": "string"}`, a Connect envelope with a primitive schema, a JSON scalar) is read as a record
with this one field, so it lands in the column `key_value` (`KEY_COLUMN_PREFIX` + this), typed by its
schema and evolving like any key field. Tools name such a key column differently (ksqlDB `ROWKEY`,
RisingWave `_rw_key`, Materialize `INCLUDE KEY AS <name>`); `key` itself is the binary base column."""


class RegistryType(StrEnum):
    """`schema_registry.type`."""

    CONFLUENT = "confluent"
    GLUE = "glue"


class RegistrySettings(DocumentModel):
    """The schema registry as a run reaches it (no secret: credentials travel beside the plan, see
    `credentials_secret`).

    `type: confluent`: `url` is a Confluent-compatible registry (Confluent, Redpanda, Apicurio's
    ccompat API, Karapace); `tls_ca_pem` a private CA's certificates (PEM text) to trust besides the
    system's; `credentials_secret`: a Secrets Manager secret id the job reads the credentials from
    (AWS); `auth`: which credentials the registry takes (`none`, `basic`, `bearer`).
    `type: glue`: the AWS Glue Schema Registry `registry_name`, in `region` (None: the credential
    chain's), through `endpoint_url` (None: Glue's in that region); credentials from the chain.
    """

    type: RegistryType = RegistryType.CONFLUENT
    url: str = ""
    auth: str = Field(default="none", pattern="^(none|basic|bearer)$")
    timeout_seconds: float = Field(default=5.0, gt=0)
    cache_seconds: float = Field(default=300.0, ge=0)
    tls_ca_pem: str | None = None
    credentials_secret: str | None = None
    registry_name: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
