"""A real HTTP server on 127.0.0.1 for dispatcher tests: records requests, answers as scripted.

Every request is recorded (method, path, headers with lower-case names, body, arrival time)
before it is answered. Answers come from, in this order: a per-request ``responder(request)``
returning a :class:`Reply` (or None to fall through), the queue of scripted replies (used
one per request, in arrival order), and the default reply. A :class:`Reply` can delay its
answer, or hold it until :meth:`HttpSubscriber.release` (a subscriber hanging mid-request).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay_s: float = 0.0
    hold: bool = False  # wait for release() before answering


@dataclass(frozen=True)
class Received:
    index: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() on arrival

    @property
    def structured(self) -> bool:
        return self.headers.get("content-type", "").startswith("application/cloudevents+json")

    def event(self) -> dict[str, Any]:
        """The CloudEvent's attributes and data, whichever content mode it came in."""
        if self.structured:
            attributes = json.loads(self.body)
            if "data_base64" in attributes:
                attributes["data"] = base64.b64decode(attributes.pop("data_base64"))
            return attributes
        # Binary-mode attribute values are percent-encoded (CloudEvents HTTP binding).
        attributes = {name[3:]: unquote(value) for name, value in self.headers.items() if name.startswith("ce-")}
        if "content-type" in self.headers:
            attributes["datacontenttype"] = self.headers["content-type"]
        attributes["data"] = self.body
        return attributes

    @property
    def ce_id(self) -> str:
        return str(self.event()["id"])


class HttpSubscriber:
    """``with HttpSubscriber() as sub: ... sub.url ...``; see the module documentation."""

    def __init__(self, default: Reply | None = None, port: int = 0) -> None:
        """``port``: 0 for any free port; a given one to bring up a subscriber where one was
        down (its clients were refused until now)."""
        self.default = default or Reply()
        self.responder: Callable[[Received], Reply | None] | None = None
        self._script: deque[Reply] = deque()
        self._received: list[Received] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self.held = 0  # requests waiting for release() now
        subscriber = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, so connection pooling is exercised

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                reply = subscriber._record(self.command, self.path, dict(self.headers.items()), body)
                subscriber._answer(self, reply)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-subscriber", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/events"

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, one each, then with the default."""
        with self._lock:
            self._script.extend(replies)

    def hold_all(self) -> None:
        """From now on every request waits for :meth:`release` before being answered."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def _record(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        with self._lock:
            request = Received(
                len(self._received), method, path, {k.lower(): v for k, v in headers.items()}, body, time.monotonic()
            )
            self._received.append(request)
        reply = self.responder(request) if self.responder is not None else None
        if reply is None:
            with self._lock:
                reply = self._script.popleft() if self._script else self.default
        return reply

    def _answer(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.hold or not self._released.is_set():
            with self._lock:
                self.held += 1
            self._released.wait(120)
            with self._lock:
                self.held -= 1
        if reply.delay_s:
            time.sleep(reply.delay_s)
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(reply.body)))
            handler.end_headers()
            handler.wfile.write(reply.body)
        except OSError:
            pass  # the client went away (a killed dispatcher)

    def requests(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def count(self) -> int:
        with self._lock:
            return len(self._received)

    def close(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> HttpSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
