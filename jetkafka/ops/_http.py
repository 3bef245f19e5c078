"""The HTTP server of the metrics port and of ``jetkafka ui``: probes, metrics and the status page.

Paths (GET and HEAD only; every other method answers 405, so nothing can be changed through it):

- ``/metrics``: the Prometheus metrics of the registry (when the server has one).
- ``/healthz`` and ``/readyz``: a :class:`~jetkafka.ops._health.Verdict` as JSON, 200 or 503.
- ``/``: the status page, a fixed HTML document whose script polls ``/status.json``.
- ``/status.json``: what the page shows (:mod:`jetkafka.ops._status_view`).
- ``/debug/threads``, ``/debug/profile`` and ``/debug/memory`` on the metrics port
  (:mod:`jetkafka.profiling._routes`), which answer only when ``metrics.debug`` is on.
- anything else: 404 with a JSON body naming the paths served.

A server is given the routes it serves (``jetkafka ui`` has no probes and no metrics). A route
takes no argument; a query route (``query_routes``) is given the request's query parameters,
each name with its last value (``?seconds=5&seconds=7`` gives ``seconds`` ``"7"``). Other routes
ignore the query string. Each
request runs on a thread of its own (``ThreadingHTTPServer``); a route that raises answers
500 with the error in a JSON body and the process goes on.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl

log = logging.getLogger(__name__)

# A route answers (status, content type, body).
Answer = tuple[int, str, bytes]
Route = Callable[[], Answer]
# A route given the query parameters (name -> last value).
QueryRoute = Callable[[Mapping[str, str]], Answer]

JSON_TYPE = "application/json; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"


def json_answer(status: int, body: Any) -> Answer:
    return status, JSON_TYPE, (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()


def status_page() -> bytes:
    """The page at ``/`` (a package resource: one HTML file with its own script and style)."""
    return resources.files("jetkafka.ops").joinpath("status_page.html").read_bytes()


def page_route() -> Answer:
    return 200, HTML_TYPE, status_page()


class _Handler(BaseHTTPRequestHandler):
    server: StatusServer

    def _answer(self, head_only: bool) -> None:
        path, _, query = self.path.partition("?")
        route = self.server.routes.get(path)
        query_route = self.server.query_routes.get(path)
        if route is None and query_route is None:
            paths = sorted({*self.server.routes, *self.server.query_routes})
            answer = json_answer(404, {"error": f"no such path: {path}", "paths": paths})
        else:
            try:
                if query_route is not None:
                    answer = query_route(dict(parse_qsl(query, keep_blank_values=True)))
                else:
                    assert route is not None
                    answer = route()
            except Exception as exc:  # noqa: BLE001 - one failed request answers 500; the server goes on
                log.warning("HTTP %s failed: %s", path, exc)
                answer = json_answer(500, {"error": f"{type(exc).__name__}: {exc}"})
        status, content_type, body = answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        # The page loads nothing from elsewhere; say so, so an injected script could not either.
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'",
        )
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(head_only=False)

    def do_HEAD(self) -> None:
        self._answer(head_only=True)

    def _refuse(self) -> None:
        status, content_type, body = json_answer(405, {"error": "read-only: only GET and HEAD are served"})
        self.send_response(status)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        log.debug("%s %s", self.address_string(), format % args)


class StatusServer(ThreadingHTTPServer):
    """A threaded HTTP server answering ``routes`` and ``query_routes`` (path -> route) on ``host:port``.

    Raises OSError when the address cannot be bound. :meth:`start` serves on a daemon thread;
    :meth:`stop` ends it.
    """

    daemon_threads = True

    def __init__(
        self, host: str, port: int, routes: Mapping[str, Route], query_routes: Mapping[str, QueryRoute] | None = None
    ) -> None:
        self.routes = dict(routes)
        self.query_routes = dict(query_routes or {})
        if ":" in host:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="jetkafka-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


__all__ = ["JSON_TYPE", "Answer", "QueryRoute", "Route", "StatusServer", "json_answer", "page_route", "status_page"]
