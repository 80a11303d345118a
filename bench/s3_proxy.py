"""A loopback TCP proxy that makes a local S3 (moto server) answer like real S3: latency and bandwidth.

Every benchmark otherwise runs against moto on loopback, where a GET costs a few milliseconds. Real
S3 answers a small GET in tens of milliseconds (first byte) and streams one connection at tens of
MB/s (docs/benchmarks.md, "Why these numbers"). `LatencyProxy` sits between the client and moto:

- **first-byte latency**: each response's first byte is held back `latency_s` (default 30 ms).
  A response starts at the first byte the server sends after the client sent something; HTTP/1.1
  clients (boto3, pyiceberg's S3 file IO) do not pipeline, so that is one delay per request (and
  one more for a `100 Continue`, as on S3, where it costs a round trip too);
- **bandwidth cap per connection**, both ways (default 80 MB/s): bytes are paced so a connection
  never moves faster, so large objects cost their transfer time and parallel connections help, as
  they do on S3.

It does not parse HTTP: any request, any framing (chunked uploads, ranges) passes through as bytes.
Loopback only; `stop()` closes the listener and every connection.

**Faults** (for the outage tests): `inject(fault, matching=...)` makes every new request whose head
(request line and headers, e.g. `X-Amz-Target: AmazonSQS.ReceiveMessage`) matches get `fault`
instead of being forwarded - an error answer (`Fault.answer(503, "SlowDown")`: S3's XML or the JSON
protocols' body, then the connection closes) or a hang (`Fault.hang(s)`: no answer for `s` seconds,
then the connection is closed unanswered) - until `clear()`. Raising `latency_s` makes the service
slow instead (every answer late).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

DEFAULT_LATENCY_S = 0.030
DEFAULT_BANDWIDTH_BYTES_PER_S = 80 * 1000 * 1000
_CHUNK = 64 * 1024


@dataclass
class _Flow:
    """One direction of one connection: its pacing clock."""

    bandwidth: float
    started: float = 0.0
    sent: int = 0

    def pace(self, size: int) -> None:
        now = time.perf_counter()
        if self.sent == 0 or now - self.started > 1.0:
            self.started, self.sent = now, 0  # restart the window: idle time is not credit
        self.sent += size
        wait = self.started + self.sent / self.bandwidth - time.perf_counter()
        if wait > 0:
            time.sleep(wait)


@dataclass(frozen=True)
class Fault:
    """What the proxy does to a matching request instead of forwarding it."""

    status: int = 0
    """Answer with this HTTP status (0: no answer, a hang)."""
    code: str = ""
    hang_s: float = 0.0

    @classmethod
    def answer(cls, status: int, code: str) -> Fault:
        """An AWS error answer: `status` with the error `code` (e.g. 503 SlowDown, 500 InternalError)."""
        return cls(status=status, code=code)

    @classmethod
    def hang(cls, seconds: float) -> Fault:
        """No answer for `seconds`, then the connection closed (a server that hung)."""
        return cls(hang_s=seconds)

    def response(self, head: bytes) -> bytes:
        """The bytes of the answer to a request starting with `head` (JSON protocol when it has a target)."""
        if b"x-amz-target:" in head.lower():
            body = f'{{"__type":"{self.code}","message":"injected by the test proxy"}}'.encode()
            kind = "application/x-amz-json-1.0"
        else:
            body = (
                f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{self.code}</Code>"
                "<Message>injected by the test proxy</Message></Error>"
            ).encode()
            kind = "application/xml"
        return (
            f"HTTP/1.1 {self.status} Injected\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode() + body


class _Connection:
    def __init__(self, client: socket.socket, upstream: socket.socket, proxy: LatencyProxy) -> None:
        self.client = client
        self.upstream = upstream
        self.proxy = proxy
        self.awaiting_response = threading.Event()

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._requests, daemon=True),
            threading.Thread(target=self._responses, daemon=True),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.close()
        self.proxy.forget(self)

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _requests(self) -> None:
        flow = _Flow(self.proxy.bandwidth_bytes_per_s)
        try:
            while data := self.client.recv(_CHUNK):
                if not self.awaiting_response.is_set():
                    self.proxy.note_request(data)
                    fault = self.proxy.fault_for(data)
                    if fault is not None:
                        self._fail(fault, data)
                        return
                self.awaiting_response.set()
                flow.pace(len(data))
                self.upstream.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                self.upstream.shutdown(socket.SHUT_WR)

    def _fail(self, fault: Fault, head: bytes) -> None:
        """Answer `fault` instead of forwarding (or hang), then close the connection."""
        if fault.status:
            with contextlib.suppress(OSError):
                self.client.sendall(fault.response(head))
        else:
            self.proxy.stopped.wait(fault.hang_s)
        self.close()

    def _responses(self) -> None:
        flow = _Flow(self.proxy.bandwidth_bytes_per_s)
        try:
            while data := self.upstream.recv(_CHUNK):
                if self.awaiting_response.is_set():
                    self.awaiting_response.clear()
                    self.proxy.count_request()
                    time.sleep(self.proxy.latency_s)
                flow.pace(len(data))
                self.client.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                self.client.shutdown(socket.SHUT_WR)


class LatencyProxy:
    """Listens on a free loopback port and forwards to `upstream` (host, port) with S3-like delays."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        latency_s: float = DEFAULT_LATENCY_S,
        bandwidth_bytes_per_s: float = DEFAULT_BANDWIDTH_BYTES_PER_S,
    ) -> None:
        self.upstream = upstream
        self.latency_s = latency_s
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.requests = 0
        self.request_lines: list[str] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: list[_Connection] = []
        self.stopped = threading.Event()
        self._fault: tuple[Fault, Callable[[bytes], bool]] | None = None

    @classmethod
    def for_url(cls, url: str, **options: float) -> LatencyProxy:
        """A proxy in front of `http://host:port` (a moto server's URL)."""
        host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
        return cls((host, int(port)), **options)

    @property
    def url(self) -> str:
        """`http://127.0.0.1:{port}` once started."""
        assert self._listener is not None, "start the proxy first"
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def count_request(self) -> None:
        with self._lock:
            self.requests += 1

    def note_request(self, data: bytes) -> None:
        """Remember the request line of a request starting with `data` (`request_lines`)."""
        line = data.split(b"\r\n", 1)[0][:200].decode("latin-1")
        with self._lock:
            self.request_lines.append(line)

    def inject(self, fault: Fault, *, matching: Callable[[bytes], bool] = lambda head: True) -> None:
        """From now on, new requests whose head `matching` accepts get `fault` (until `clear()`)."""
        with self._lock:
            self._fault = (fault, matching)

    def clear(self) -> None:
        """Forward every request again."""
        with self._lock:
            self._fault = None

    def fault_for(self, head: bytes) -> Fault | None:
        """The fault a request starting with `head` gets, if any."""
        with self._lock:
            injected = self._fault
        if injected is None or not injected[1](head):
            return None
        return injected[0]

    def forget(self, connection: _Connection) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._connections.remove(connection)

    def start(self) -> str:
        """Start listening; returns the proxy's URL."""
        listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener = listener
        threading.Thread(target=self._accept, daemon=True, name="latency-proxy").start()
        return self.url

    def stop(self) -> None:
        """Close the listener and every open connection. Idempotent."""
        self.stopped.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()

    def __enter__(self) -> LatencyProxy:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self.stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(client, upstream, self)
            with self._lock:
                self._connections.append(connection)
            threading.Thread(target=connection.run, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.s3_proxy --upstream http://127.0.0.1:5000`: serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the S3 endpoint to front, http://host:port")
    parser.add_argument("--latency-ms", type=float, default=DEFAULT_LATENCY_S * 1000)
    parser.add_argument("--bandwidth-mb-per-s", type=float, default=DEFAULT_BANDWIDTH_BYTES_PER_S / 1e6)
    args = parser.parse_args(argv)
    proxy = LatencyProxy.for_url(
        args.upstream, latency_s=args.latency_ms / 1000, bandwidth_bytes_per_s=args.bandwidth_mb_per_s * 1e6
    )
    print(f"{proxy.start()} -> {args.upstream}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
