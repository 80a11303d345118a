"""What a deployed stack adds to the config file: the resources only the stack knows, from its environment.

The user writes the config file before the stack exists, so it cannot hold the work queue's URL, the
EMR Serverless application id, the job role, the runs bucket, or the etcd credentials (those live in
Secrets Manager, never in the file or in plain template parameters). `template.yaml` sets the
`KAFSCALE_ICEBERG_*` variables below on each function; `apply_deployment_environment` lays them over
the file's raw data *before* validation, so a file may leave those keys out even where the config
requires them (`runner.emr_serverless.application_id` with `runner.type: emr_serverless`).

Rules: a set variable wins over the file (a differing file value is logged as a warning, a secret's
never shown); an empty or unset variable leaves the file's value. Setting one of
`runner.emr_serverless.venv_archive` / `image` clears the other (exactly one may be set). Every
problem with a value that came from the environment names its variable. The variables are documented
in `docs/configuration.md` ("Deployment environment").
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafscale_iceberg.config.loading import (
    ETCD_PASSWORD_ENV,
    ETCD_USERNAME_ENV,
    config_from_mapping,
    parse_config_yaml,
)
from kafscale_iceberg.config.model import KafscaleConfig
from kafscale_iceberg.config.sections import EtcdConfig
from kafscale_iceberg.exceptions import ConfigError, ConfigValidationError
from kafscale_iceberg.ports import SecretSource

__all__ = [
    "CATALOG_SECRET_ENV",
    "CONFIG_ENV",
    "DEPLOYMENT_VARIABLES",
    "ETCD_SECRET_ENV",
    "DeploymentVariable",
    "SecretSource",
    "apply_deployment_environment",
    "config_from_environment",
    "etcd_from_environment",
    "load_deployed_config",
]

logger = logging.getLogger(__name__)

# Where a deployed function finds the config file (s3:// or a path); template.yaml sets it.
CONFIG_ENV = "KAFSCALE_ICEBERG_CONFIG"


@dataclass(frozen=True)
class DeploymentVariable:
    """One environment variable the stack sets, and the config key it fills."""

    name: str
    key: str
    clears: str = ""


DEPLOYMENT_VARIABLES: tuple[DeploymentVariable, ...] = (
    DeploymentVariable("KAFSCALE_ICEBERG_S3_BUCKET", "s3.bucket"),
    DeploymentVariable("KAFSCALE_ICEBERG_S3_NAMESPACE", "s3.namespace"),
    DeploymentVariable("KAFSCALE_ICEBERG_CATALOG_TYPE", "iceberg.catalog.type"),
    DeploymentVariable("KAFSCALE_ICEBERG_CATALOG_URI", "iceberg.catalog.uri"),
    DeploymentVariable("KAFSCALE_ICEBERG_WAREHOUSE", "iceberg.warehouse"),
    DeploymentVariable("KAFSCALE_ICEBERG_ETCD_ENDPOINTS", "etcd.endpoints"),
    DeploymentVariable("KAFSCALE_ICEBERG_OFFSETS_BACKEND", "offsets.backend"),
    DeploymentVariable("KAFSCALE_ICEBERG_LEASE_TTL_SECONDS", "offsets.lease_ttl_seconds"),
    DeploymentVariable("KAFSCALE_ICEBERG_CHECKPOINT_FUNCTION", "offsets.checkpoint_function"),
    DeploymentVariable("KAFSCALE_ICEBERG_WORK_QUEUE_URL", "notifications.work_queue_url"),
    DeploymentVariable("KAFSCALE_ICEBERG_REJECTED_QUEUE_URL", "notifications.rejected_queue_url"),
    DeploymentVariable("KAFSCALE_ICEBERG_RUNS_LOCATION", "runs.location"),
    DeploymentVariable("KAFSCALE_ICEBERG_RUNNER_TYPE", "runner.type"),
    DeploymentVariable("KAFSCALE_ICEBERG_EMR_APPLICATION_ID", "runner.emr_serverless.application_id"),
    DeploymentVariable("KAFSCALE_ICEBERG_EMR_EXECUTION_ROLE_ARN", "runner.emr_serverless.execution_role_arn"),
    DeploymentVariable("KAFSCALE_ICEBERG_EMR_ENTRY_POINT", "runner.emr_serverless.entry_point"),
    DeploymentVariable(
        "KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE",
        "runner.emr_serverless.venv_archive",
        clears="runner.emr_serverless.image",
    ),
    DeploymentVariable(
        "KAFSCALE_ICEBERG_EMR_IMAGE",
        "runner.emr_serverless.image",
        clears="runner.emr_serverless.venv_archive",
    ),
    DeploymentVariable("KAFSCALE_ICEBERG_EMR_LOG_URI", "runner.emr_serverless.log_uri"),
    DeploymentVariable("KAFSCALE_ICEBERG_EMR_MAX_VCPU", "runner.emr_serverless.max_vcpu"),
)

# JSON secrets: etcd `{"username", "password"[, "endpoints"][, "tls_ca", "tls_cert", "tls_key"]}` (the
# TLS keys hold PEM text: `_pem_file` writes each to a private file); a REST catalog's
# `{"token"}` or `{"username", "password"}`.
ETCD_SECRET_ENV = "KAFSCALE_ICEBERG_ETCD_SECRET_ARN"
CATALOG_SECRET_ENV = "KAFSCALE_ICEBERG_CATALOG_SECRET_ARN"
_SECRET_FIELDS: Mapping[str, tuple[str, Mapping[str, str]]] = {
    ETCD_SECRET_ENV: (
        "etcd",
        {
            "username": "etcd.username",
            "password": "etcd.password",
            "endpoints": "etcd.endpoints",
            # PEM text, written to files this process reads (etcd.tls.*_file take paths).
            "tls_ca": "etcd.tls.ca_file",
            "tls_cert": "etcd.tls.cert_file",
            "tls_key": "etcd.tls.key_file",
        },
    ),
    CATALOG_SECRET_ENV: (
        "iceberg.catalog",
        {
            "token": "iceberg.catalog.token",
            "username": "iceberg.catalog.username",
            "password": "iceberg.catalog.password",
        },
    ),
}
_SECRET_KEYS = frozenset({"etcd.password", "iceberg.catalog.token", "iceberg.catalog.password"})


def config_from_environment() -> KafscaleConfig:
    """The config named by `KAFSCALE_ICEBERG_CONFIG` (what the Lambda functions use), with the stack's
    `KAFSCALE_ICEBERG_*` deployment variables and secrets laid over it (`load_deployed_config`)."""
    location = os.environ.get(CONFIG_ENV, "")
    if not location:
        raise ConfigError(
            CONFIG_ENV, "environment variable is not set: point it at the config file (s3:// or path)"
        )
    return load_deployed_config(location, os.environ)


def load_deployed_config(
    location: str, environ: Mapping[str, str], *, secrets: SecretSource | None = None
) -> KafscaleConfig:
    """Read the config file at `location` (path, `file://` or `s3://`) and apply the deployment environment.

    What every Lambda function does once per cold start. Raises `ConfigValidationError` naming the
    YAML key or the environment variable of each problem; reading a secret may raise the secret
    adapter's errors (`SecretAccessError`, `SecretUnavailableError`, transient).
    """
    from kafscale_iceberg.adapters.documents import DocumentStore  # noqa: PLC0415

    text = DocumentStore().read_text(location)
    return apply_deployment_environment(
        parse_config_yaml(text, source=location), environ, source=location, secrets=secrets
    )


def apply_deployment_environment(
    data: Mapping[str, Any],
    environ: Mapping[str, str],
    *,
    source: str,
    secrets: SecretSource | None = None,
) -> KafscaleConfig:
    """Lay the deployment variables of `environ` over raw config `data`, then validate the result.

    An unset `s3.region` takes `AWS_REGION` (set in every Lambda function). Secrets named by
    `KAFSCALE_ICEBERG_ETCD_SECRET_ARN` / `KAFSCALE_ICEBERG_CATALOG_SECRET_ARN` are
    read from `secrets` (default: Secrets Manager), once per call. `data` is not modified. Raises
    `ConfigValidationError` listing every problem, those with environment values named by variable
    (`$KAFSCALE_ICEBERG_EMR_EXECUTION_ROLE_ARN (runner.emr_serverless.execution_role_arn): ...`), and
    `ConfigError` naming the variable for a secret that is not the expected JSON.
    """
    overlaid = _deep_copy(data)
    origins: dict[str, str] = {}
    for variable in DEPLOYMENT_VARIABLES:
        value = environ.get(variable.name, "").strip()
        if not value:
            continue
        _set(overlaid, variable.key, value, origin=variable.name, source=source)
        origins[variable.key] = variable.name
        if variable.clears:
            _remove(overlaid, variable.clears)
    region = environ.get("AWS_REGION", "").strip()
    s3_section = overlaid.get("s3")
    if region and isinstance(s3_section, dict) and not str(s3_section.get("region") or "").strip():
        # Lambda sets AWS_REGION. Without s3.region pyiceberg looks each bucket's region up through
        # the global endpoint, which a VPC without NAT cannot reach (gateway endpoints are regional).
        s3_section["region"] = region
        origins["s3.region"] = "AWS_REGION"
    for variable_name, (section, fields) in _SECRET_FIELDS.items():
        secret_id = environ.get(variable_name, "").strip()
        if not secret_id:
            continue
        values = _secret_values(variable_name, secret_id, section, fields, secrets)
        for field, secret_value in values.items():
            if field.startswith("tls_") and isinstance(secret_value, str):
                secret_value = _pem_file(field, secret_value)  # noqa: PLW2901
            _set(overlaid, fields[field], secret_value, origin=variable_name, source=source)
            origins[fields[field]] = variable_name
    try:
        return config_from_mapping(overlaid, source=source, environ=environ)
    except ConfigValidationError as exc:
        if not origins:
            raise
        raise _naming_variables(exc, origins) from None


# The checkpoint function's etcd credentials when passed in (parameters `EtcdUsername`/`EtcdPassword`)
# rather than read from Secrets Manager, whose endpoint inside the VPC costs (docs/deploy.md).
ETCD_ENDPOINTS_ENV = "KAFSCALE_ICEBERG_ETCD_ENDPOINTS"


def etcd_from_environment(
    environ: Mapping[str, str], *, endpoints: tuple[str, ...] = (), secrets: SecretSource | None = None
) -> EtcdConfig:
    """The etcd connection of the checkpoint function, which reads no config file (it calls no AWS
    API but its secret's): the endpoints of `KAFSCALE_ICEBERG_ETCD_ENDPOINTS`, else `endpoints` (the
    caller's `etcd.endpoints`); the credentials passed in (`KAFSCALE_ICEBERG_ETCD_USERNAME`/`_PASSWORD`)
    or, over them, the secret named by `KAFSCALE_ICEBERG_ETCD_SECRET_ARN` (keys as for every
    function). Raises `ConfigError` naming the variable when no endpoint is known or the secret is
    not the expected JSON."""
    raw = environ.get(ETCD_ENDPOINTS_ENV, "").strip()
    values: dict[str, Any] = {
        "endpoints": [e.strip() for e in raw.split(",") if e.strip()] or list(endpoints),
        "username": environ.get(ETCD_USERNAME_ENV, ""),
        "password": environ.get(ETCD_PASSWORD_ENV, ""),
    }
    tls: dict[str, str] = {}
    secret_id = environ.get(ETCD_SECRET_ENV, "").strip()
    if secret_id:
        section, fields = _SECRET_FIELDS[ETCD_SECRET_ENV]
        for field, value in _secret_values(ETCD_SECRET_ENV, secret_id, section, fields, secrets).items():
            if field.startswith("tls_") and isinstance(value, str):
                tls[fields[field].rsplit(".", 1)[1]] = _pem_file(field, value)
            else:
                values[field] = value
    if not values["endpoints"]:
        raise ConfigError(
            f"${ETCD_ENDPOINTS_ENV}",
            "the checkpoint function knows no etcd endpoint: set the stack's EtcdEndpoints parameter, "
            'the secret\'s "endpoints", or etcd.endpoints in the config file',
        )
    return EtcdConfig.model_validate({**values, "tls": tls})


def _secret_values(
    variable: str,
    secret_id: str,
    section: str,
    fields: Mapping[str, str],
    secrets: SecretSource | None,
) -> dict[str, object]:
    if secrets is None:
        from kafscale_iceberg.adapters.secrets_manager import SecretsManagerSecretSource  # noqa: PLC0415

        secrets = SecretsManagerSecretSource()
    text = secrets.read_secret(secret_id)
    expected = f"a JSON object with string keys {', '.join(repr(f) for f in fields)} for {section}"
    try:
        payload = json.loads(text)
    except ValueError:
        # Never echo the text: it is a secret.
        raise ConfigError(f"${variable}", f"secret {secret_id} is not JSON; store {expected}") from None
    if not isinstance(payload, dict):
        raise ConfigError(f"${variable}", f"secret {secret_id} must be {expected}")
    values: dict[str, object] = {}
    for field, value in payload.items():
        if field not in fields:
            logger.warning(
                "secret %s: key %r is not used (expected %s)",
                secret_id,
                field,
                ", ".join(fields),
                extra={"secret_id": secret_id, "env": variable},
            )
            continue
        if field == "endpoints" and isinstance(value, list) and all(isinstance(v, str) for v in value):
            values[field] = list(value)
        elif isinstance(value, str):
            values[field] = value
        else:
            raise ConfigError(
                f"${variable}", f"secret {secret_id}: key {field!r} must be a string; store {expected}"
            )
    if not values:
        raise ConfigError(f"${variable}", f"secret {secret_id} has none of the keys of {expected}")
    return values


def _pem_file(field: str, pem: str) -> str:
    """Write a secret's PEM text to a file only this user can read; its path (the same each time)."""
    import os  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    folder = Path(tempfile.gettempdir()) / "kafscale-iceberg-etcd-tls"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{field}.pem"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(pem if pem.endswith("\n") else pem + "\n")
    return str(path)


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _deep_copy(value) if isinstance(value, Mapping) else value for key, value in data.items()}


def _set(data: dict[str, Any], key: str, value: object, *, origin: str, source: str) -> None:
    *sections, leaf = key.split(".")
    node = data
    for section in sections:
        child = node.get(section)
        if not isinstance(child, dict):
            # Absent, null or a scalar: the environment's value replaces it (a scalar where a section
            # belongs would be an error in the file anyway; the environment decides here).
            child = {}
            node[section] = child
        node = child
    previous = node.get(leaf)
    if previous not in (None, "", [], value):
        shown = "" if key in _SECRET_KEYS else f" ({previous!r} -> {value!r})"
        logger.warning(
            "config %s: %s is replaced by $%s%s",
            source,
            key,
            origin,
            shown,
            extra={"config_source": source, "config_key": key, "env": origin},
        )
    node[leaf] = value


def _remove(data: dict[str, Any], key: str) -> None:
    *sections, leaf = key.split(".")
    node: object = data
    for section in sections:
        node = node.get(section) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def _naming_variables(error: ConfigValidationError, origins: Mapping[str, str]) -> ConfigValidationError:
    """The same problems, each whose key came from the environment prefixed with its variable."""
    problems = [(_variable_key(key, origins), problem) for key, problem in error.problems]
    # Lines after the problems are the error's note (unknown keys of the file): keep them.
    note = "\n".join(str(error).splitlines()[1 + len(error.problems) :])
    sources = sorted(set(origins.values()))
    note = "\n".join(filter(None, [note, f"values from the deployment environment: {', '.join(sources)}"]))
    return ConfigValidationError(error.source, problems, note=note)


def _variable_key(key: str, origins: Mapping[str, str]) -> str:
    for origin_key, variable in origins.items():
        if key == origin_key or key.startswith((f"{origin_key}.", f"{origin_key}[")):
            return f"${variable} ({key})"
    return key
