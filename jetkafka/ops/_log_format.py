"""The log output of ``jetkafka run``: plain text, or one JSON object per line.

``logging.format: json`` writes each record as one line holding a JSON object::

    {"time": "2026-11-26T11:30:00.123Z", "level": "INFO", "logger": "jetkafka.channel",
     "thread": "jetkafka-worker-0", "message": "...", "topic": "orders", "partition": 3,
     "offset": 1200, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}

``topic``, ``partition`` and ``offset`` are there when the record was logged on a worker
during a partition's turn (see :mod:`jetkafka._log_context`) or passed them with ``extra=``;
``trace_id`` when OpenTelemetry is installed and a span is recording; ``exception`` holds a
traceback. The formatter is our own, a few lines over :mod:`json`: python-json-logger would
add a dependency for what the standard library does here, and structlog a second logging API.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from jetkafka._log_context import partition_and_offset

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s [%(threadName)s] %(message)s"

try:  # tracing is optional: without OpenTelemetry there is no trace id to report
    from opentelemetry import trace as _otel_trace

    _TRACING = True
except ImportError:  # pragma: no cover - depends on the installed extras
    _TRACING = False


def _trace_id() -> str | None:
    if not _TRACING:
        return None
    context = _otel_trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


class WorkContextFilter(logging.Filter):
    """Adds ``topic``, ``partition``, ``offset`` and ``trace_id`` to records that lack them.

    Runs on the thread that logs (a handler's filters do), so it reads that thread's context.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "partition"):
            working = partition_and_offset()
            if working is not None:
                record.topic, record.partition, record.offset = working
        if not hasattr(record, "trace_id"):
            trace_id = _trace_id()
            if trace_id is not None:
                record.trace_id = trace_id
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages are escaped by JSON)."""

    FIELDS = ("topic", "partition", "offset", "trace_id")

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry: dict[str, Any] = {
            "time": f"{seconds}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        for name in self.FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, default=str, ensure_ascii=False)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` adds, told apart from any other."""


def configure_logging(level: str, fmt: str = "text") -> None:
    """Sends every record to stderr in ``fmt`` ("text" or "json"), at ``level`` and above.

    Replaces the handler an earlier call added (others, such as a test runner's, stay). The clients' loggers (jetkafka.librdkafka,
    jetkafka.zookeeper) stay at WARNING unless ``level`` is DEBUG.
    """
    handler = _StderrHandler(sys.stderr)
    handler.addFilter(WorkContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    if level.upper() != "DEBUG":
        logging.getLogger("jetkafka.librdkafka").setLevel(logging.WARNING)
        logging.getLogger("jetkafka.zookeeper").setLevel(logging.WARNING)
