"""Loading: the file, YAML read the way Go's yaml.v3 reads it, the `KAFSCALE_ICEBERG_LFS_*`
overrides, unknown keys (warned, or refused with `--strict-config`), and validation into
`KafscaleConfig` with every problem reported together. The deployed functions' overlay of the
stack's environment is `config.deployment`.
"""

from __future__ import annotations

import logging
import os
import re
import types
from collections.abc import Mapping
from typing import Any, get_args

import yaml
from pydantic import ValidationError
from yaml.constructor import ConstructorError

from kafscale_iceberg.config.base import LfsMode
from kafscale_iceberg.config.model import KafscaleConfig
from kafscale_iceberg.config.problems import _find_unknown_keys, _problems_from
from kafscale_iceberg.exceptions import ConfigValidationError

logger = logging.getLogger(__name__)

# Environment variable -> lfs key, applied to every mapping (Go `applyLfsEnvOverrides`).
LFS_ENV_OVERRIDES: Mapping[str, str] = types.MappingProxyType(
    {
        "KAFSCALE_ICEBERG_LFS_MODE": "mode",
        "KAFSCALE_ICEBERG_LFS_MAX_INLINE_SIZE": "max_inline_size",
        "KAFSCALE_ICEBERG_LFS_STORE_METADATA": "store_metadata",
        "KAFSCALE_ICEBERG_LFS_VALIDATE_CHECKSUM": "validate_checksum",
        "KAFSCALE_ICEBERG_LFS_RESOLVE_CONCURRENCY": "resolve_concurrency",
    }
)


class _GoYamlLoader(yaml.SafeLoader):
    """Reads scalars as text and lets the schema type them, as Go's yaml.v3 does into typed fields.

    So `mode: off` is the string "off" (YAML 1.1 would say False), `region: no` stays "no", and
    `12:30` is not sexagesimal 750. Only null (`~`, `null`, empty) and merge keys are resolved
    implicitly. A key repeated in one mapping is an error, as in yaml.v3.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise ConstructorError(
                        None, None, f"key {key_node.value!r} is repeated in this mapping", key_node.start_mark
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


_GoYamlLoader.yaml_implicit_resolvers = {}
_GoYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])


def load_config(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> KafscaleConfig:
    """Read, parse and validate a config file on the local filesystem.

    `environ` (default `os.environ`) supplies the `KAFSCALE_ICEBERG_LFS_*` overrides. Raises
    `ConfigValidationError` (a `ConfigError`) listing every problem. An `s3://` location is read by the
    S3 config adapter, which fetches the text and calls `parse_config`.
    """
    source = os.fspath(path)
    if source.startswith("s3://"):
        raise ConfigValidationError(
            source,
            [
                (
                    "",
                    "load_config reads local files; an s3:// config is fetched by the S3 config adapter, "
                    "which then calls parse_config",
                )
            ],
        )
    try:
        with open(source, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise ConfigValidationError(source, [("", f"cannot read the file: {exc.strerror or exc}")]) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigValidationError(source, [("", f"not UTF-8 text (byte {exc.start})")]) from None
    return parse_config(text, source=source, environ=environ)


def parse_config(text: str, *, source: str, environ: Mapping[str, str] | None = None) -> KafscaleConfig:
    """Parse YAML text and validate it; `source` names it in errors and logs (a path or URI).

    Raises `ConfigValidationError` naming the line and column for invalid YAML (never echoing the
    line, which may hold a secret), or listing every invalid key.
    """
    return config_from_mapping(parse_config_yaml(text, source=source), source=source, environ=environ)


def parse_config_yaml(text: str, *, source: str) -> Mapping[str, Any]:
    """The YAML text as raw, not yet validated config data, read the way Go's yaml.v3 reads it.

    For callers that add values before validating (`config.deployment`); raises
    `ConfigValidationError` for invalid YAML or a document that is not a mapping.
    """
    try:
        data = yaml.load(text, Loader=_GoYamlLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigValidationError(
            source, [("", f"invalid YAML at {where}{exc.problem or exc.context}")]
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigValidationError(source, [("", f"invalid YAML: {type(exc).__name__}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigValidationError(
            source,
            [
                (
                    "",
                    f"the file must be a YAML mapping of sections (s3, iceberg, mappings, ...), got a "
                    f"{type(data).__name__}",
                )
            ],
        )
    return data


def config_from_mapping(
    data: Mapping[str, Any], *, source: str, environ: Mapping[str, str] | None = None
) -> KafscaleConfig:
    """Validate already-parsed config data (e.g. from YAML or JSON); `source` names it in errors and logs.

    Applies the `KAFSCALE_ICEBERG_LFS_*` overrides from `environ` (default `os.environ`) to every
    mapping, warns about each unknown key, and raises `ConfigValidationError` listing every problem.
    The caller's data is not modified.
    """
    env = os.environ if environ is None else environ
    unknown = tuple(_find_unknown_keys(data, KafscaleConfig, ""))
    overrides, problems = _lfs_env_overrides(env)
    prepared = _apply_etcd_credentials(_apply_lfs_overrides(data, overrides), env)
    config: KafscaleConfig | None = None
    try:
        config = KafscaleConfig.model_validate(prepared)
    except ValidationError as exc:
        problems += _problems_from(exc)
    if problems or config is None:
        note = f"unknown keys (ignored; check their spelling): {', '.join(unknown)}" if unknown else ""
        # `from None`: pydantic's own error text can carry input values, secrets included.
        raise ConfigValidationError(source, problems, note=note) from None
    for key in unknown:
        logger.warning(
            "config %s: unknown key %s is ignored (check its spelling)",
            source,
            key,
            extra={"config_source": source, "config_key": key},
        )
    config._source = source
    config._unknown_keys = unknown
    return config


def _lfs_env_overrides(env: Mapping[str, str]) -> tuple[dict[str, object], list[tuple[str, str]]]:
    """Parse the `KAFSCALE_ICEBERG_LFS_*` variables; unlike Go, an unparsable one is an error, not ignored."""
    overrides: dict[str, object] = {}
    problems: list[tuple[str, str]] = []
    for variable, key in LFS_ENV_OVERRIDES.items():
        text = env.get(variable, "").strip()
        if not text:
            continue
        value: object
        if key == "mode":
            value = text.lower()
            allowed = get_args(LfsMode)
            if value not in allowed:
                problems.append(
                    (f"${variable}", f"{text!r} is not allowed; allowed values: {', '.join(allowed)}")
                )
                continue
        elif key in {"store_metadata", "validate_checksum"}:
            value = _GO_BOOLS.get(text)
            if value is None:
                problems.append((f"${variable}", f"must be true or false (or 1/0, t/f), got {text!r}"))
                continue
        else:
            try:
                value = int(text, 10)
            except ValueError:
                problems.append((f"${variable}", f"must be a whole number, got {text!r}"))
                continue
        overrides[key] = value
    return overrides, problems


# strconv.ParseBool's accepted spellings.
_GO_BOOLS: Mapping[str, bool] = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def _apply_lfs_overrides(data: Mapping[str, Any], overrides: Mapping[str, object]) -> Mapping[str, Any]:
    mappings = data.get("mappings")
    if not overrides or not isinstance(mappings, list):
        return data
    updated: list[object] = []
    for mapping in mappings:
        if not isinstance(mapping, Mapping):
            updated.append(mapping)
            continue
        lfs = mapping.get("lfs")
        lfs = dict(lfs) if isinstance(lfs, Mapping) else {}
        updated.append({**mapping, "lfs": {**lfs, **overrides}})
    return {**data, "mappings": updated}


# etcd credentials from the environment, over the file's `etcd.username`/`etcd.password` when set and not
# empty: a Kubernetes Secret (infra/kubernetes/base) or a systemd credential file keeps them out of the
# config file; the checkpoint function (config.deployment) reads the same variables.
ETCD_USERNAME_ENV = "KAFSCALE_ICEBERG_ETCD_USERNAME"
ETCD_PASSWORD_ENV = "KAFSCALE_ICEBERG_ETCD_PASSWORD"


def _apply_etcd_credentials(data: Mapping[str, Any], env: Mapping[str, str]) -> Mapping[str, Any]:
    credentials = {
        key: env[variable]
        for key, variable in (("username", ETCD_USERNAME_ENV), ("password", ETCD_PASSWORD_ENV))
        if env.get(variable, "")
    }
    if not credentials:
        return data
    etcd = data.get("etcd")
    return {**data, "etcd": {**(etcd if isinstance(etcd, Mapping) else {}), **credentials}}


STRICT_CONFIG_FLAG = "--strict-config"


def require_known_keys(config: KafscaleConfig) -> None:
    """Raise `ConfigValidationError` listing every unknown key (`--strict-config`): a typo such as
    `create_tabel_if_missing` fails at start instead of being a warning while the key's default applies."""
    if config.unknown_keys:
        raise ConfigValidationError(
            config.source,
            [
                (key, "unknown key (check its spelling; --strict-config refuses it)")
                for key in config.unknown_keys
            ],
        )


def load_config_from(location: str, *, strict: bool = False) -> KafscaleConfig:
    """Load and validate the config at a path, `file://` or `s3://` URI (S3 via the default chain);
    `strict` (`--strict-config`) refuses unknown keys instead of warning about them."""
    from kafscale_iceberg.adapters.documents import DocumentStore  # noqa: PLC0415

    text = DocumentStore().read_text(location)
    config = parse_config(text, source=location)
    if strict:
        require_known_keys(config)
    return config
