"""The whole file: `KafscaleConfig`, its sections, and the rules that span sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, PrivateAttr, model_validator

from kafscale_iceberg.config.base import DEFAULT_RUNS_DIRECTORY, _Problems, _Section
from kafscale_iceberg.config.mappings import MappingConfig
from kafscale_iceberg.config.sections import (
    DiscoveryConfig,
    EtcdConfig,
    IcebergConfig,
    MaintenanceConfig,
    NotificationsConfig,
    OffsetsConfig,
    ProcessorConfig,
    RunnerConfig,
    RunsConfig,
    S3Config,
    SchemaConfig,
)
from kafscale_iceberg.domain.runs import CorruptSegmentPolicy


def _raw_text(data: Mapping[str, Any], *path: str) -> str:
    """A string at `path` in raw input, or "" when absent or not a string (its own validation reports it)."""
    node: object = data
    for part in path:
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    return node.strip() if isinstance(node, str) else ""


def _is_storage_location(value: str) -> bool:
    return value.startswith(("s3://", "file://", "/"))


class KafscaleConfig(_Section):
    """The whole configuration file. Build it with `load_config`, `parse_config` or `config_from_mapping`."""

    s3: S3Config
    iceberg: IcebergConfig
    discovery: DiscoveryConfig = Field(default_factory=DiscoveryConfig)
    etcd: EtcdConfig = Field(default_factory=EtcdConfig)
    offsets: OffsetsConfig = Field(default_factory=OffsetsConfig)
    processor: ProcessorConfig = Field(default_factory=ProcessorConfig)
    schema_: SchemaConfig = Field(default_factory=SchemaConfig, alias="schema")
    mappings: tuple[MappingConfig, ...] = ()
    runs: RunsConfig = Field(default_factory=RunsConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    notifications: NotificationsConfig = Field(default_factory=NotificationsConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)

    _source: str = PrivateAttr(default="<memory>")
    _unknown_keys: tuple[str, ...] = PrivateAttr(default=())

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        # Absent sections with required keys are reported as those keys (s3.bucket), not as "s3".
        data.setdefault("s3", {})
        data.setdefault("iceberg", {})
        warehouse = _raw_text(data, "iceberg", "warehouse").rstrip("/")
        if not _raw_text(data, "runs", "location") and _is_storage_location(warehouse):
            runs = dict(data["runs"]) if isinstance(data.get("runs"), Mapping) else {}
            data["runs"] = {**runs, "location": f"{warehouse}/{DEFAULT_RUNS_DIRECTORY}"}
        if _raw_text(data, "schema", "registry", "base_url") and isinstance(data.get("mappings"), list):
            data["mappings"] = [_with_registry_source(mapping) for mapping in data["mappings"]]
        return data

    @model_validator(mode="after")
    def _check_across_sections(self) -> KafscaleConfig:
        problems = _Problems()
        if not self.mappings:
            problems.add(
                "mappings", "at least one {topic, table} mapping is required (nothing would be ingested)"
            )
        if not self.etcd.endpoints:
            if self.offsets.backend == "etcd":
                problems.add(
                    "etcd.endpoints",
                    "is required when offsets.backend is 'etcd' (the default); on one machine without etcd "
                    "set offsets.backend: sqlite",
                )
            if self.discovery.mode == "etcd":
                problems.add("etcd.endpoints", "is required when discovery.mode is 'etcd'")
        if not self.runs.location:
            problems.add(
                "runs.location",
                "is required: no default can be derived because iceberg.warehouse "
                + (
                    f"{self.iceberg.warehouse!r} is not an s3:// or file:// location"
                    if self.iceberg.warehouse
                    else "is empty"
                )
                + " (e.g. s3://my-bucket/kafscale-runs)",
            )
        elif self.runner.type == "emr_serverless" and not self.runs.location.startswith("s3://"):
            problems.add(
                "runs.location",
                f"must be an s3:// URI when runner.type is 'emr_serverless' (EMR reads plans from S3), "
                f"got {self.runs.location!r}",
            )
        if self.iceberg.catalog.type == "sql" and not self.iceberg.warehouse:
            problems.add(
                "iceberg.warehouse",
                "is required when iceberg.catalog.type is 'sql': tables are created under it "
                "(e.g. file:///var/lib/kafscale/warehouse or s3://bucket/warehouse)",
            )
        lfs_topics = [mapping.topic for mapping in self.mappings if mapping.lfs.mode != "off"]
        if lfs_topics and not self.s3.region:
            problems.add(
                "s3.region", f"is required when lfs is enabled (mappings for {', '.join(lfs_topics)})"
            )
        tables = {mapping.table for mapping in self.mappings}
        first_index: dict[str, int] = {}
        for index, mapping in enumerate(self.mappings):
            key = f"mappings[{index}]"
            if mapping.topic in first_index:
                problems.add(
                    f"{key}.topic",
                    f"{mapping.topic!r} is already mapped by mappings[{first_index[mapping.topic]}]; "
                    "a topic maps to one table",
                )
            first_index.setdefault(mapping.topic, index)
            if mapping.schema_.source == "registry" and not self.schema_.registry.base_url:
                problems.add(f"{key}.schema.source", "'registry' needs schema.registry.base_url")
            if mapping.dead_letter_table in tables:
                problems.add(
                    f"{key}.dead_letter_table",
                    f"{mapping.dead_letter_table!r} is the table of another mapping",
                )
            if self.iceberg.catalog.type == "glue":
                for field, identifier in (
                    ("table", mapping.identifier),
                    ("dead_letter_table", mapping.dead_letter_identifier),
                ):
                    if len(identifier) != 2:
                        problems.add(
                            f"{key}.{field}",
                            f"{'.'.join(identifier)!r} has a nested namespace; Glue has one level "
                            "(database.table)",
                        )
        problems.raise_if_any()
        return self

    @property
    def source(self) -> str:
        """Where this config was read from (a path, or the `source` given to the parser)."""
        return self._source

    @property
    def unknown_keys(self) -> tuple[str, ...]:
        """Paths of keys the file has that no setting uses (ignored, as Go does; each was logged)."""
        return self._unknown_keys

    @property
    def mapped_topics(self) -> frozenset[str]:
        """Every topic with a mapping."""
        return frozenset(mapping.topic for mapping in self.mappings)

    def mapping_for(self, topic: str) -> MappingConfig | None:
        """The mapping of `topic`, or None when the topic is not mapped (not an error: it is skipped)."""
        return next((mapping for mapping in self.mappings if mapping.topic == topic), None)

    def corrupt_segment_policy_for(self, mapping: MappingConfig) -> CorruptSegmentPolicy:
        """The mapping's corrupt-segment policy, else `runs.corrupt_segment_policy`."""
        return mapping.corrupt_segment_policy or self.runs.corrupt_segment_policy

    def target_file_size_for(self, mapping: MappingConfig) -> int:
        """The mapping's target data-file size in bytes, else `runs.target_file_size_bytes`."""
        return int(mapping.target_file_size_bytes or self.runs.target_file_size_bytes)


def _with_registry_source(mapping: object) -> object:
    """Go derives `schema.source: registry` for a mapping without columns when a registry is configured."""
    if not isinstance(mapping, Mapping):
        return mapping
    schema = mapping.get("schema")
    if schema is None or schema == "":
        schema = {}
    if not isinstance(schema, Mapping) or schema.get("source") not in (None, "") or schema.get("columns"):
        return mapping
    return {**mapping, "schema": {**schema, "source": "registry"}}
