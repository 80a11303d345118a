"""Prometheus: the sink of the one-machine `run` and its `/metrics` + `/healthz` endpoint.

`prometheus_client` is imported when a sink is built (the `local` extra installs it), never at import.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from kafscale_iceberg.exceptions import ConfigError, MetricsServerError
from kafscale_iceberg.metrics.definitions import ALL_METRICS, PROMETHEUS_NAMESPACE, MetricKind, Sample

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""What Go's client (the Go processor) serves; every Prometheus version reads it. Our names and labels
are plain ASCII, so prometheus_client's text output is this format whatever version it announces."""
METRICS_ADDR_ENV = "KAFSCALE_METRICS_ADDR"
DEFAULT_METRICS_ADDR = ":9480"
"""Not the Go processor's `:9093`: that is Kafka's usual SSL listener port, taken on a broker's host
(set `KAFSCALE_METRICS_ADDR=:9093` to keep the Go processor's address)."""

logger = logging.getLogger(__name__)


class PrometheusMetricsSink:
    """Every metric of `ALL_METRICS` in its own `CollectorRegistry` (never the process-global one).

    Thread-safe (prometheus_client's metrics are). Needs `prometheus-client` (the `local` extra).
    """

    def __init__(self, namespace: str = PROMETHEUS_NAMESPACE) -> None:
        from prometheus_client import (  # noqa: PLC0415
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
        )

        self.registry: CollectorRegistry = CollectorRegistry()
        self._collectors: dict[str, Any] = {}
        for metric in ALL_METRICS:
            common: dict[str, Any] = {
                "name": metric.name,
                "documentation": metric.help,
                "labelnames": metric.labels,
                "namespace": namespace,
                "registry": self.registry,
            }
            if metric.kind is MetricKind.COUNTER:
                self._collectors[metric.name] = Counter(**common)
            elif metric.kind is MetricKind.GAUGE:
                self._collectors[metric.name] = Gauge(**common)
            else:
                self._collectors[metric.name] = Histogram(**common, buckets=metric.buckets)

    def emit(self, samples: Sequence[Sample]) -> None:
        """Apply each sample to its collector."""
        for item in samples:
            collector = self._collectors[item.metric.name]
            child = collector.labels(**item.labels) if item.metric.labels else collector
            if item.metric.kind is MetricKind.COUNTER:
                child.inc(item.value)
            elif item.metric.kind is MetricKind.GAUGE:
                child.set(item.value)
            else:
                for _ in range(item.count):
                    child.observe(item.value)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format (what `GET /metrics` returns)."""
        from prometheus_client import generate_latest  # noqa: PLC0415

        return generate_latest(self.registry)


def parse_metrics_address(text: str) -> tuple[str, int]:
    """`host:port` as Go's `net.Listen` takes it: `:9093` (every interface), `0.0.0.0:9093`,
    `127.0.0.1:0` (any free port), `[::1]:9093`.

    Raises `ConfigError` naming `KAFSCALE_METRICS_ADDR` when the text is not such an address.
    """
    value = text.strip()
    host, separator, port_text = value.rpartition(":")
    problem = ""
    if not separator:
        problem = "has no ':port'"
    elif not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        problem = f"port {port_text!r} is not a number from 0 to 65535"
    elif host.startswith("[") != host.endswith("]"):
        problem = "has an unbalanced '[' ']' around the host"
    elif ":" in host.strip("[]") and not host.startswith("["):
        problem = "an IPv6 host must be in brackets, e.g. '[::1]:9093'"
    elif any(c.isspace() for c in host):
        problem = "the host contains whitespace"
    if problem:
        raise ConfigError(
            METRICS_ADDR_ENV,
            f"{text!r} {problem}; expected host:port such as ':9093' (all interfaces), '0.0.0.0:9093' "
            "or '127.0.0.1:0' (any free port)",
        )
    return host.strip("[]"), int(port_text)


class _Handler(BaseHTTPRequestHandler):
    server: _MetricsHTTPServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, self.server.sink.exposition(), PROMETHEUS_CONTENT_TYPE)
        elif path == "/healthz":
            ready, reason = self.server.readiness.state()
            if ready:
                self._reply(200, b"ok", "text/plain; charset=utf-8")
            else:
                self._reply(503, f"not ready: {reason}\n".encode(), "text/plain; charset=utf-8")
        else:
            self._reply(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood stderr: not logged."""


class Readiness:
    """Ready, or not ready with a reason: what `/healthz` answers (200 `ok`, or 503 `not ready: …`).

    Thread-safe: the loop sets it, the HTTP server's threads read it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None

    def ready(self) -> None:
        """Working again."""
        with self._lock:
            self._reason = None

    def not_ready(self, reason: str) -> None:
        """Cannot work now, because of `reason` (e.g. a dependency's outage)."""
        with self._lock:
            self._reason = reason

    def state(self) -> tuple[bool, str]:
        """(ready, reason); the reason is empty when ready."""
        with self._lock:
            return self._reason is None, self._reason or ""


class _MetricsHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], sink: PrometheusMetricsSink, *, ipv6: bool, readiness: Readiness
    ) -> None:
        self.address_family = socket.AF_INET6 if ipv6 else socket.AF_INET
        self.sink = sink
        self.readiness = readiness
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up before the answer was written (a scraper's or a probe's timeout) is
        routine: a debug line, not the traceback `socketserver` prints. Anything else as before."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            logger.debug("metrics client %s went away: %s", client_address, error)
            return
        super().handle_error(request, client_address)


class MetricsServer:
    """`GET /metrics` (Prometheus text) and `GET /healthz` (200 `ok`) on one address, in daemon threads.

    Started and stopped by the caller; also a context manager. The address is parsed when the server
    is built (`ConfigError` naming `KAFSCALE_METRICS_ADDR`), bound by `start()`.
    """

    def __init__(self, sink: PrometheusMetricsSink, address: str = DEFAULT_METRICS_ADDR) -> None:
        self._sink = sink
        self.address = address
        self._host, self._port = parse_metrics_address(address)
        self._server: _MetricsHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.readiness = Readiness()
        """What `/healthz` reports; `run` hands it to its pipeline."""

    @classmethod
    def from_environment(
        cls, sink: PrometheusMetricsSink, environ: Mapping[str, str] | None = None
    ) -> MetricsServer:
        """A server on `KAFSCALE_METRICS_ADDR`, `:9480` when unset or empty."""
        env = os.environ if environ is None else environ
        return cls(sink, env.get(METRICS_ADDR_ENV) or DEFAULT_METRICS_ADDR)

    @property
    def where(self) -> str:
        """`host:port` as bound (the port `start()` chose for port 0; `0.0.0.0` for every interface)."""
        host = self._host or "0.0.0.0"
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the requested one until `start()`; useful with port 0)."""
        return self._server.server_address[1] if self._server is not None else self._port

    def start(self) -> int:
        """Bind and serve in a daemon thread; returns the bound port. Raises `MetricsServerError`."""
        if self._server is not None:
            return self.port
        try:
            server = _MetricsHTTPServer(
                (self._host or "0.0.0.0", self._port),
                self._sink,
                ipv6=":" in self._host,
                readiness=self.readiness,
            )
        except OSError as exc:
            raise MetricsServerError(
                f"cannot serve metrics on {self.address!r} ({METRICS_ADDR_ENV}): {exc}; set "
                f"{METRICS_ADDR_ENV} to a free local host:port, e.g. ':9094' or '127.0.0.1:0'"
            ) from exc
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="metrics-http", daemon=True
        )
        self._thread.start()
        return self.port

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
