"""Real outages of real dependencies: an etcd that can be killed, restarted and frozen, and a TCP proxy
whose connections can be cut (in front of the moto server: S3 and SQS refusing, as a network cut)."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import threading
from pathlib import Path

from tests.support.etcd import EtcdServer, start_etcd_server


class RestartableEtcd:
    """A private etcd server (its own ports and data) that a test may SIGKILL, restart or freeze."""

    def __init__(self, base_dir: Path) -> None:
        base_dir.mkdir(parents=True, exist_ok=True)
        self.server: EtcdServer = start_etcd_server(base_dir)
        self.url = self.server.url

    def kill(self) -> None:
        """SIGKILL the server (its data stays; `restart` brings it back on the same port)."""
        self.server.process.kill()
        self.server.process.wait(timeout=10)

    def restart(self, timeout_s: float = 20.0) -> None:
        """Start the killed server again with the same ports and data; returns once healthy."""
        self.server.restart(timeout_s)

    def freeze(self) -> None:
        """SIGSTOP: the port stays open, nothing answers (a hung server)."""
        os.kill(self.server.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.server.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.server.process.poll() is None:
            self.thaw()
            self.server.stop()


class TcpProxy:
    """Forwards a loopback port to `target`; `cut()` resets every connection and refuses new ones
    until `restore()` (a network cut, as clients see it)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    sock.close()
                except OSError:
                    pass
            self._sockets.clear()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, client: socket.socket, upstream: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        try:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while not self._cut.is_set():
                for key, _ in selector.select(timeout=0.2):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            selector.close()
            with self._lock:
                self._sockets.discard(client)
                self._sockets.discard(upstream)
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()
