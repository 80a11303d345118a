"""What every config section is built on: `_Section`, the validation helpers and the shared constants.

A section raises `_invalid(...)` for one bad value and collects cross-field problems in `_Problems`;
`config.problems` turns both into the key-path lines of `ConfigValidationError`. Go's zero values
("0, null or an empty string means the default") are `_Section`'s rule and `_zero_means`'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ByteSize, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

CatalogType = Literal["rest", "glue", "sql"]
DiscoveryMode = Literal["auto", "etcd", "s3"]
OffsetsBackend = Literal["etcd", "sqlite"]
SchemaSource = Literal["mapping", "registry", "none", "infer"]
LfsMode = Literal["off", "resolve", "reference", "skip", "hybrid"]
RunnerType = Literal["local", "inline", "emr_serverless"]

GIB = 1024**3
MIB = 1024**2
DEFAULT_RUNS_DIRECTORY = "_kafscale_runs"
DEFAULT_SQLITE_PATH = ".kafscale-iceberg/offsets.sqlite"
DEFAULT_EMR_RELEASE_LABEL = "emr-spark-8.0.0"
DEAD_LETTER_SUFFIX = "__dlq"

# Error types the sections raise inside validation; `_problems_from` turns them into key-path lines.
_VALUE_PROBLEM = "kafscale_config_value"
_SECTION_PROBLEMS = "kafscale_config_section"


def _invalid(message: str) -> PydanticCustomError:
    """An error for one value; the message already says what is wrong and what is allowed."""
    return PydanticCustomError(_VALUE_PROBLEM, "{message}", {"message": message})


class _Problems:
    """Collects every cross-field problem of one section, so they are reported together, not first-only."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str]] = []

    def add(self, key: str, problem: str) -> None:
        """Record `problem` at `key`, a path relative to the section being validated."""
        self._items.append((key, problem))

    def raise_if_any(self) -> None:
        if self._items:
            summary = "; ".join(f"{key}: {problem}" for key, problem in self._items)
            raise PydanticCustomError(
                _SECTION_PROBLEMS, "{summary}", {"summary": summary, "problems": tuple(self._items)}
            )


def _lowercase(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _false_means_off(value: object) -> object:
    # YAML 1.1 (PyYAML's safe_load, used by whoever built a dict for config_from_mapping) reads an
    # unquoted `off` as False; the Go processor reads it as the string "off".
    if value is False:
        return "off"
    return _lowercase(value)


def _catalog_type(value: object) -> object:
    value = _lowercase(value)
    # The Go processor hands the type to iceberg-go's catalog registry, where http/https name REST.
    return "rest" if value in {"http", "https"} else value


def _zero_means(default: int) -> AfterValidator:
    """Go's rule for its integer settings: 0, null or absent selects the default; negative is an error."""

    def check(value: int) -> int:
        if value == 0:
            return default
        if value < 0:
            raise _invalid(f"must be > 0 (0 or null selects the default {default}), got {value}")
        return value

    return AfterValidator(check)


def _as_text(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


def _text_to_map(value: object) -> object:
    # Free-form string maps (spark conf, catalog properties) from a pre-built dict: numbers and
    # booleans become the text Spark and pyiceberg expect.
    if isinstance(value, Mapping):
        return {key: _as_text(item) for key, item in value.items()}
    return value


def _s3_uri(value: str, *, what: str) -> str:
    if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.\-]{1,62}(/.*)?", value):
        raise _invalid(f"must be an s3:// URI of {what} (s3://bucket/key), got {value!r}")
    return value


StringMap = Annotated[Mapping[str, str], BeforeValidator(_text_to_map)]
PositiveByteSize = Annotated[ByteSize, Field(gt=0)]


class _Section(BaseModel):
    """One YAML mapping. Null or an empty string means "the default", as Go's zero values do."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", str_strip_whitespace=True, hide_input_in_errors=True
    )

    @model_validator(mode="before")
    @classmethod
    def _zero_values_mean_default(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            return data
        present = {
            key: value
            for key, value in data.items()
            if value is not None and not (isinstance(value, str) and not value.strip())
        }
        return cls._derive_defaults(present)

    @classmethod
    def _derive_defaults(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults that depend on other keys of the raw input; a section overrides it if needed."""
        return data
