"""The JSON-schema registry over HTTP: `GET {base_url}/{topic}.json`, cached per process.

An unreachable registry fails planning (transient, retried) — records are never dropped for it, as
the Go processor does.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from kafscale_iceberg.exceptions import (
    RegistryUnavailableError,
    SchemaNotFoundError,
)
from kafscale_iceberg.segments.keys import validate_topic


class HttpSchemaRegistry:
    """Fetches and caches topic schemas from `{base_url}/{topic}.json`."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_seconds: float,
        cache_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._timeout = timeout_seconds
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._cache: dict[str, tuple[float, dict[str, object]]] = {}

    def schema_for(self, topic: str) -> dict[str, object]:
        """The topic's JSON schema (from cache when younger than `cache_seconds`)."""
        cached = self._cache.get(topic)
        now = self._clock()
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        url = f"{self._base_url}/{validate_topic(topic)}.json"
        try:
            with urllib.request.urlopen(url, timeout=self._timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise SchemaNotFoundError(
                    f"schema registry has no schema for topic {topic!r} at {url} (404): publish it, "
                    "or set the mapping's schema.source to 'mapping' or 'none'"
                ) from None
            raise RegistryUnavailableError(f"schema registry {url} answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise RegistryUnavailableError(f"schema registry {url} is unreachable: {exc}") from exc
        try:
            schema = json.loads(body)
        except json.JSONDecodeError as exc:
            raise SchemaNotFoundError(f"schema registry {url} returned invalid JSON: {exc}") from None
        if not isinstance(schema, dict):
            raise SchemaNotFoundError(f"schema registry {url} returned JSON that is not an object")
        self._cache[topic] = (now, schema)
        return schema
