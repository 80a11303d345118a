"""`python -m kafscale_iceberg.metrics.healthcheck`: the container's health probe of a running `run`.

Asks the `run` process of this machine (container) for `GET /healthz` on its metrics address
(`KAFSCALE_METRICS_ADDR`, `:9480` by default; a wildcard host is probed on loopback) and exits 0 when it
answers 200 `ok`, 1 otherwise, printing the answer or the reason on one line. `/healthz` is 503 `not
ready: <reason>` while `run` rides out a dependency's outage (S3, the catalog, etcd); no answer means
the process is gone or hung. Standard library only: it starts in milliseconds (no pipeline imports).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

from kafscale_iceberg.exceptions import ConfigError
from kafscale_iceberg.metrics.prometheus import DEFAULT_METRICS_ADDR, METRICS_ADDR_ENV, parse_metrics_address

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def health_url(environ: Mapping[str, str]) -> str:
    """The `/healthz` URL of the `run` serving on `KAFSCALE_METRICS_ADDR` (loopback for a wildcard host)."""
    host, port = parse_metrics_address(environ.get(METRICS_ADDR_ENV) or DEFAULT_METRICS_ADDR)
    if host in WILDCARD_HOSTS:
        host = "::1" if host == "::" else "127.0.0.1"
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"http://{netloc}/healthz"


def probe(environ: Mapping[str, str], timeout: float = 5.0) -> tuple[bool, str]:
    """(healthy, one line): 200 `ok` is healthy; a 503 carries `run`'s reason; no answer says so."""
    try:
        url = health_url(environ)
    except ConfigError as exc:
        return False, str(exc)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return True, f"{url}: {answer.status} {answer.read().decode(errors='replace').strip()}"
    except urllib.error.HTTPError as exc:
        return False, f"{url}: {exc.code} {exc.read().decode(errors='replace').strip()}"
    except OSError as exc:
        return False, f"{url}: no answer ({exc}); is `kafscale-iceberg run` running with {METRICS_ADDR_ENV}?"


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 when healthy, 1 otherwise; the answer on stdout."""
    del argv
    healthy, line = probe(os.environ)
    print(line, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
