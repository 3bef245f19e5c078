"""Trace collectors that do not take spans, each the way a real one fails: a port nobody listens
on (refused), a listener that accepts and never answers (a hung collector, a proxy in front of
a dead one), and a collector that answers, slowly. Each counts the spans it took (answered)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def closed_port() -> int:
    """A local port that refuses connections (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SilentCollector:
    """Accepts every connection, reads what is sent, never answers."""

    def __init__(self) -> None:
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.endpoint = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._stopped = threading.Event()
        self.spans_taken = 0
        threading.Thread(target=self._accept, name="silent-collector", daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._held.append(conn)
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self._stopped.set()
        self._server.close()
        for conn in self._held:
            conn.close()


class SlowCollector:
    """Answers each export request 200 OK, ``delay_s`` after it came."""

    def __init__(self, delay_s: float) -> None:
        self.spans_taken = 0
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                time.sleep(delay_s)
                # Counted only once answered: a request whose answer never reaches the exporter
                # is one it reports as not exported.
                collector.spans_taken += sum(len(s.spans) for r in body.resource_spans for s in r.scope_spans)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, name="slow-collector", daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class RefusingCollector:
    """A port nobody listens on."""

    spans_taken = 0

    def __init__(self) -> None:
        self.endpoint = f"http://127.0.0.1:{closed_port()}"

    def close(self) -> None:
        pass


@contextmanager
def broken_collector(kind: str) -> Iterator[RefusingCollector | SilentCollector | SlowCollector]:
    """A collector that fails as ``kind`` says: ``refused``, ``silent`` or ``slow`` (3 s an answer)."""
    collector = {"refused": RefusingCollector, "silent": SilentCollector, "slow": lambda: SlowCollector(3.0)}[kind]()
    try:
        yield collector
    finally:
        collector.close()
