"""The schema registry a run reads record schemas from (top-level `schema_registry`), and how decoded
keys name their columns. The formats themselves (`mappings[].value_format`, `.key_format`) are
described once, in `domain/value_formats.py`; their decoders live in `dataplane/formats/`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from kafscale_iceberg.domain.runs.documents import DocumentModel

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
