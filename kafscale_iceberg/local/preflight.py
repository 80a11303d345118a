"""What `run`, `status`, `replay` and `maintain` check before any JVM or run: `check_before_start`.

A mistake in the config (a state directory that does not exist, a misspelled bucket, a wrong etcd
endpoint, a catalog that does not answer, a table that is neither there nor to be created) is found
in seconds and reported once, every problem in one message naming its key and the fix, instead of
minutes later, after the JVM started, as the first failing run's error repeated per attempt. The
config's unknown keys (misspellings: their defaults applied) are repeated in that message, since
one of them is often the cause.

The checks run at once, each in a daemon thread; a check still waiting after `PREFLIGHT_DEADLINE_S`
is reported as not answering (each network probe has shorter timeouts of its own, see
`adapters/preflight_probes.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from kafscale_iceberg.adapters.preflight_probes import probe_bucket, probe_etcd, probe_http
from kafscale_iceberg.assembly import Assembly
from kafscale_iceberg.config import KafscaleConfig
from kafscale_iceberg.exceptions import ConfigValidationError, KafscaleIcebergError

PREFLIGHT_DEADLINE_S = 30.0
"""Generous for a loaded machine's imports (pyiceberg); a dependency that does not answer is cut
short by its probe's own timeouts (~4 s) well before."""

Problem = tuple[str, str]
"""(config key, what is wrong and what to do)."""


def check_before_start(config: KafscaleConfig, *, command: str, reads_segments: bool = True) -> None:
    """Check the state directories (created when missing), the segments' bucket (when the command
    `reads_segments`: `maintain` does not), etcd, the registry and the catalog; raise
    `ConfigValidationError` listing every problem once, with the config's unknown keys. Idempotent:
    only creates missing directories and namespaces."""
    # Imported before the clock starts: on a loaded machine importing pyiceberg alone can take
    # longer than the deadline, which is for dependencies that do not answer.
    import kafscale_iceberg.adapters.iceberg_preflight  # noqa: F401, PLC0415

    checks: list[_Check] = [("iceberg.warehouse", lambda: state_directory_problems(config))]
    if reads_segments:
        checks.append(("s3.bucket", lambda: bucket_problems(config)))
    checks += [
        ("etcd.endpoints", lambda: etcd_problems(config)),
        ("schema_registry.url", lambda: registry_problems(config)),
        ("iceberg.catalog", lambda: catalog_problems(config)),
    ]
    problems = _run_all(checks)
    if problems:
        unknown = config.unknown_keys
        note = (
            f"the config also has unknown keys, ignored with their defaults applied (a misspelling may "
            f"be the cause; --strict-config refuses them): {', '.join(unknown)}"
            if unknown
            else ""
        )
        raise ConfigValidationError(
            f"{config.source} (checked before {command} started)", problems, note=note
        )


_Check = tuple[str, Callable[[], list[Problem]]]
"""(the key a check that does not finish is reported under, the check)."""


def _run_all(checks: list[_Check]) -> list[Problem]:
    results: list[list[Problem] | None] = [None] * len(checks)

    def run(index: int) -> None:
        try:
            results[index] = checks[index][1]()
        except KafscaleIcebergError as exc:
            results[index] = [(getattr(exc, "key", ""), str(exc))]

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(checks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PREFLIGHT_DEADLINE_S)
    problems: list[Problem] = []
    for (key, _), found in zip(checks, results, strict=True):
        late = (key, f"no answer within {PREFLIGHT_DEADLINE_S:.0f} s: check {key} and that it is reachable")
        problems.extend(found if found is not None else [late])
    return list(dict.fromkeys(problems))


def state_directory_problems(config: KafscaleConfig) -> list[Problem]:
    """Each local directory the config keeps state in exists (created when missing) and is writable."""
    wanted: list[tuple[str, Path]] = []
    if config.offsets.backend == "sqlite":
        wanted.append(("offsets.sqlite_path", Path(config.offsets.sqlite_path).expanduser().parent))
    catalog = config.iceberg.catalog
    if catalog.type == "sql" and catalog.uri.startswith("sqlite:///"):
        wanted.append(("iceberg.catalog.uri", Path(catalog.uri.removeprefix("sqlite:///")).parent))
    for key, location in (
        ("iceberg.warehouse", config.iceberg.warehouse),
        ("runs.location", config.runs.location),
    ):
        local = _local_path(location)
        if local is not None:
            wanted.append((key, local))
    return [problem for key, path in wanted if (problem := _ensure_directory(key, path)) is not None]


def _local_path(location: str) -> Path | None:
    """The local folder a location names; None for object stores and for an S3 Tables bucket's ARN."""
    if location.startswith("file://"):
        return Path(urlparse(location).path)
    if location and "://" not in location and not location.startswith("arn:"):
        return Path(location).expanduser()
    return None


def _ensure_directory(key: str, path: Path) -> Problem | None:
    import os  # noqa: PLC0415

    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return key, (
            f"directory {str(path)!r} does not exist and cannot be created ({exc.strerror}): create it, "
            f"writable by this user, or set {key} to a path under a writable directory"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        return key, f"directory {str(path)!r} is not writable by this user: fix its owner, or set {key}"
    return None


def bucket_problems(config: KafscaleConfig) -> list[Problem]:
    """The segments' bucket exists and can be listed under the namespace."""
    s3 = config.s3
    prefix = f"{s3.namespace}/" if s3.namespace else ""
    problem = probe_bucket(Assembly(config).s3_settings, s3.bucket, prefix)
    if problem is None:
        return []
    where = f"at {s3.endpoint}" if s3.endpoint else f"in region {s3.region or 'of the AWS default chain'}"
    return [("s3.bucket", f"{problem} {where}: check the spelling of s3.bucket, s3.endpoint and s3.region")]


def etcd_problems(config: KafscaleConfig) -> list[Problem]:
    """With `offsets.backend: etcd`, at least one of `etcd.endpoints` answers as etcd."""
    if config.offsets.backend != "etcd":
        return []
    etcd = config.etcd
    if not etcd.endpoints:
        return [
            (
                "etcd.endpoints",
                "is empty: list the etcd cluster's client URLs, or set offsets.backend: sqlite",
            )
        ]
    tls = etcd.tls
    found = [
        probe_etcd(e, ca_file=tls.ca_file, cert_file=tls.cert_file, key_file=tls.key_file)
        for e in etcd.endpoints
    ]
    failures = [f for f in found if f is not None]
    if len(failures) < len(found):
        return []
    return [
        (
            "etcd.endpoints",
            f"{'; '.join(failures)}: check etcd.endpoints (host:port of etcd's client URL, 2379 by "
            "default) and etcd.tls, or set offsets.backend: sqlite for one machine",
        )
    ]


def registry_problems(config: KafscaleConfig) -> list[Problem]:
    """A configured schema registry answers HTTP."""
    problems: list[Problem] = []
    json_registry = config.schema_.registry.base_url
    if json_registry:
        problem = probe_http(f"{json_registry}/")
        if problem is not None:
            problems.append(("schema.registry.base_url", f"{problem}: check schema.registry.base_url"))
    registry = config.schema_registry
    if registry is not None and registry.url:
        problem = probe_http(f"{registry.url.rstrip('/')}/subjects")
        if problem is not None:
            problems.append(("schema_registry.url", f"{problem}: check schema_registry.url"))
    return problems


def catalog_problems(config: KafscaleConfig) -> list[Problem]:
    """The catalog answers; each mapped table exists or will be created (its namespace is created
    now when missing, idempotently)."""
    from kafscale_iceberg.adapters.iceberg_catalog import CatalogSettings  # noqa: PLC0415
    from kafscale_iceberg.adapters.iceberg_preflight import missing_tables  # noqa: PLC0415

    mapped = [(i, m) for i, m in enumerate(config.mappings) if m.table]
    missing = set(
        missing_tables(
            CatalogSettings.from_config(config),
            [m.table for _, m in mapped],
            create_namespaces_of=[m.table for _, m in mapped if m.create_table_if_missing],
        )
    )
    return [
        (
            f"mappings[{index}].create_table_if_missing",
            f"table {mapping.table!r} (topic {mapping.topic!r}) does not exist in the catalog and "
            "create_table_if_missing is false: create the table, or set create_table_if_missing: "
            "true on the mapping",
        )
        for index, mapping in mapped
        if mapping.table in missing and not mapping.create_table_if_missing
    ]
