"""The whole file: `KafscaleConfig`, its sections, and the rules that span sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, PrivateAttr, model_validator

from kafscale_iceberg.config.base import DEFAULT_RUNS_DIRECTORY, _Problems, _Section
from kafscale_iceberg.config.formats import SchemaRegistryConfig
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
    TypesConfig,
)
from kafscale_iceberg.domain.routing import check_template, templates_overlap
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


def _in_table_bucket(location: str) -> bool:
    """Whether `location` is in an S3 Tables table bucket (its storage bucket's name ends `--table-s3`)."""
    bucket = location.removeprefix("s3://").removeprefix("s3a://").split("/", 1)[0]
    return location.startswith(("s3://", "s3a://")) and bucket.endswith("--table-s3")


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
    types: TypesConfig = Field(default_factory=TypesConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    schema_registry: SchemaRegistryConfig | None = None

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
            if self.offsets.backend == "etcd" and not self.offsets.checkpoint_function:
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
        elif _in_table_bucket(self.runs.location):
            problems.add(
                "runs.location",
                f"{self.runs.location!r} is in an Amazon S3 Tables table bucket, which holds tables only "
                "(every other object is refused)"
                + (
                    f" - it is the default, {{iceberg.warehouse}}/{DEFAULT_RUNS_DIRECTORY}"
                    if self.runs.location.endswith(DEFAULT_RUNS_DIRECTORY)
                    else ""
                )
                + ": set runs.location to a normal bucket (e.g. s3://my-bucket/kafscale-runs)",
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
        # JSON values are validated against that registry; other value formats against their own schemas.
        json_mappings = [m for m in self.mappings if not m.value_format.self_described]
        if self.schema_.mode != "off" and not self.schema_.registry.base_url and json_mappings:
            problems.add(
                "schema.registry.base_url",
                f"is required when schema.mode is '{self.schema_.mode.value}'",
            )
        for index, mapping in enumerate(self.mappings):
            for key, chosen in (("value_format", mapping.value_format), ("key_format", mapping.key_format)):
                if chosen is not None and chosen.registered and self.schema_registry is None:
                    problems.add(
                        f"mappings[{index}].{key}",
                        f"{chosen.name} needs the top-level schema_registry (a url, or type glue and "
                        "its registry_name)",
                    )
        lfs_topics = [mapping.topic for mapping in self.mappings if mapping.lfs.mode != "off"]
        if lfs_topics and not self.s3.region:
            problems.add(
                "s3.region", f"is required when lfs is enabled (mappings for {', '.join(lfs_topics)})"
            )
        writers: dict[str, str] = {}
        templates: dict[str, str] = {}
        first_index: dict[str, int] = {}
        for index, mapping in enumerate(self.mappings):
            key = f"mappings[{index}]"
            first = first_index.setdefault(mapping.topic, index)
            if first != index:
                first_mapping = self.mappings[first]
                if "upsert" in (mapping.mode, first_mapping.mode):
                    problems.add(
                        f"{key}.mode",
                        f"mode: upsert is not supported yet for a topic with several mappings "
                        f"({mapping.topic!r} has mappings[{first}] and mappings[{index}]): give the "
                        "upsert table a topic of its own",
                    )
                if mapping.lfs != first_mapping.lfs:
                    problems.add(
                        f"{key}.lfs",
                        f"differs from mappings[{first}].lfs: the mappings of topic {mapping.topic!r} share "
                        "one LFS resolution; give them the same lfs settings",
                    )
                if mapping.corrupt_segment_policy != first_mapping.corrupt_segment_policy:
                    problems.add(
                        f"{key}.corrupt_segment_policy",
                        f"differs from mappings[{first}]: a run reads a topic's segments once for all of "
                        "its mappings; give them the same policy",
                    )
            if mapping.schema_.source == "registry" and not self.schema_.registry.base_url:
                problems.add(f"{key}.schema.source", "'registry' needs schema.registry.base_url")
            for field, identifier in _named_tables(mapping):
                owner = writers.setdefault(identifier, f"{key}.{field}")
                if owner != f"{key}.{field}":
                    problems.add(
                        f"{key}.{field}",
                        f"{identifier!r} is already written by {owner} (the table of another mapping): "
                        "a table is written by one mapping, and a dead-letter table is not a data table",
                    )
                if self.iceberg.catalog.type == "glue" and len(identifier.split(".")) != 2:
                    problems.add(
                        f"{key}.{field}",
                        f"{identifier!r} has a nested namespace; Glue has one level (database.table)",
                    )
            template = mapping.route.table_template if mapping.route is not None else ""
            if template and check_template(template) is None:
                for other, owner in templates.items():
                    if templates_overlap(template, other):
                        problems.add(
                            f"{key}.route.table_template",
                            f"{template!r} can name the same tables as {other!r} of {owner}: a table is "
                            "written by one mapping; give the templates distinct prefixes or suffixes",
                        )
                templates[template] = f"{key}.route.table_template"
            if (
                self.iceberg.catalog.type == "glue"
                and mapping.route is not None
                and mapping.route.table_template
                and len(mapping.route.table_template.split(".")) != 2
            ):
                problems.add(
                    f"{key}.route.table_template",
                    f"{mapping.route.table_template!r} has a nested namespace; Glue has one level "
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
        """The first mapping of `topic` (whose anchor table holds the topic's offsets), or None when the
        topic is not mapped (not an error: it is skipped)."""
        return next((mapping for mapping in self.mappings if mapping.topic == topic), None)

    def mappings_for(self, topic: str) -> tuple[MappingConfig, ...]:
        """Every mapping of `topic`, in config order (empty when it is not mapped)."""
        return tuple(mapping for mapping in self.mappings if mapping.topic == topic)

    def anchor_table(self, topic: str) -> str | None:
        """The table holding `topic`'s offsets (its first mapping's `anchor_table`), None when unmapped."""
        mapping = self.mapping_for(topic)
        return None if mapping is None else mapping.anchor_table

    def topic_tables(self, topic: str) -> tuple[str, ...]:
        """Every table the config names for `topic` (tables a route's template names are not listed)."""
        return tuple(
            dict.fromkeys(table for mapping in self.mappings_for(topic) for table in mapping.static_tables)
        )

    @property
    def named_tables(self) -> frozenset[str]:
        """Every table any mapping names (what a route's template may not name)."""
        return frozenset(table for mapping in self.mappings for table in mapping.static_tables)

    def corrupt_segment_policy_for(self, mapping: MappingConfig) -> CorruptSegmentPolicy:
        """The mapping's corrupt-segment policy, else `runs.corrupt_segment_policy`."""
        return mapping.corrupt_segment_policy or self.runs.corrupt_segment_policy

    def target_file_size_for(self, mapping: MappingConfig) -> int:
        """The mapping's target data-file size in bytes, else `runs.target_file_size_bytes`."""
        return int(mapping.target_file_size_bytes or self.runs.target_file_size_bytes)


def _named_tables(mapping: MappingConfig) -> list[tuple[str, str]]:
    """`(key, identifier)` of every table a mapping names, the key relative to the mapping."""
    named: list[tuple[str, str]] = []
    if mapping.table:
        named.append(("table", mapping.table))
    if mapping.route is not None:
        named += [(f"route.tables.{value}", table) for value, table in mapping.route.tables.items()]
        if mapping.route.default_table and mapping.route.default_table not in mapping.route.tables.values():
            named.append(("route.default_table", mapping.route.default_table))
    if mapping.dead_letter_table:
        named.append(("dead_letter_table", mapping.dead_letter_table))
    # A table two values of one route share is one table of one mapping.
    seen: set[str] = set()
    unique = []
    for key, table in named:
        if table not in seen:
            seen.add(table)
            unique.append((key, table))
    return unique


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
