"""The configuration, its secrets, and what the one machine starts (metrics server, Java, embedded etcd)."""

from __future__ import annotations

from collections.abc import Sequence

from kafscale_iceberg.exceptions.base import KafscaleIcebergError, TransientError


class ConfigError(KafscaleIcebergError):
    """The configuration is invalid; the message names the YAML key and the allowed values."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"config key '{key}': {problem}")


class ConfigValidationError(ConfigError):
    """A config source failed to load; `problems` holds every `(key path, problem)` found, not only the first.

    `key` and `problem` are those of the first problem; the message lists them all, one per line, and
    never contains a secret's value.
    """

    def __init__(self, source: str, problems: Sequence[tuple[str, str]], *, note: str = "") -> None:
        if not problems:
            raise ValueError("ConfigValidationError needs at least one problem")
        self.source = source
        self.problems = tuple(problems)
        super().__init__(*self.problems[0])
        count = len(self.problems)
        lines = [f"invalid configuration in {source} ({count} problem{'' if count == 1 else 's'}):"]
        lines += [f"  {key}: {problem}" if key else f"  {problem}" for key, problem in self.problems]
        if note:
            lines.append(note)
        self.args = ("\n".join(lines),)


class SecretAccessError(KafscaleIcebergError):
    """A secret cannot be read: missing, not permitted, or not decryptable. A person must act."""

    def __init__(self, secret_id: str, code: str, remedy: str) -> None:
        self.secret_id = secret_id
        self.code = code
        super().__init__(f"secret {secret_id}: {code}: {remedy}")


class SecretUnavailableError(TransientError):
    """Secrets Manager could not be reached or throttled the request; retry later."""


class MetricsServerError(KafscaleIcebergError):
    """The metrics endpoint could not listen (port taken, address not local)."""


class JavaMissingError(KafscaleIcebergError):
    """Local Spark needs Java 17 or 21 and none was found."""


class EmbeddedServiceError(KafscaleIcebergError):
    """An embedded service could not start; the message says what to install or look at."""
