"""Registered schemas a registry client keeps, shared between threads: a schema by id or a numbered
version for the process's life (they never change), a subject's latest version for `cache_seconds`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from kafscale_iceberg.domain.record_schemas import RegisteredSchema

K = TypeVar("K", bound=Hashable)


class SchemaMemo(Generic[K]):
    """Schemas by key, each fetched on first use and kept (for `ttl_seconds`, or for ever when None).
    Two threads asking for a missing key at once may both fetch it; either answer is kept."""

    def __init__(self, clock: Callable[[], float], ttl_seconds: float | None = None) -> None:
        self._clock = clock
        self._ttl = ttl_seconds
        self._lock = threading.Lock()
        self._kept: dict[K, tuple[float, RegisteredSchema]] = {}

    def get(self, key: K, fetch: Callable[[], RegisteredSchema]) -> RegisteredSchema:
        """The schema kept under `key`, or `fetch()`'s (kept from now on); `fetch`'s errors propagate."""
        now = self._clock()
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and (self._ttl is None or now - kept[0] < self._ttl):
            return kept[1]
        schema = fetch()
        with self._lock:
            self._kept[key] = (now, schema)
        return schema

    def remember(self, key: K, schema: RegisteredSchema) -> None:
        """Keep `schema` under `key` unless one is kept already (a latest version is also its id's)."""
        with self._lock:
            self._kept.setdefault(key, (self._clock(), schema))
