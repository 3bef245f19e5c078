"""The log output of ``jetkafka run``: plain text, or one JSON object per line.

``logging.format: json`` writes each record as one line holding a JSON object::

    {"time": "2026-11-26T11:30:00.123Z", "level": "INFO", "logger": "jetkafka.channel",
     "thread": "jetkafka-worker-0", "message": "...", "topic": "orders", "partition": 3,
     "offset": 1200, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}

``topic``, ``partition`` and ``offset`` are there when the record was logged on a worker
during a partition's turn (see :mod:`jetkafka._log_context`) or passed them with ``extra=``;
``trace_id`` and ``span_id`` when a span is current (tracing on, see :mod:`jetkafka._tracing`);
``exception`` holds a traceback. The formatter is our own, a few lines over :mod:`json`: python-json-logger would
add a dependency for what the standard library does here, and structlog a second logging API.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from opentelemetry import trace

from jetkafka._log_context import partition_and_offset
from jetkafka._tracing._logs import NO_ID, log_format

FORMATS = ("text", "json")

def _span_ids() -> tuple[str, str] | None:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


class WorkContextFilter(logging.Filter):
    """Adds ``topic``, ``partition``, ``offset``, ``trace_id`` and ``span_id`` to records that lack them.

    Runs on the thread that logs (a handler's filters do), so it reads that thread's context.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "partition"):
            working = partition_and_offset()
            if working is not None:
                record.topic, record.partition, record.offset = working
        if getattr(record, "trace_id", NO_ID) == NO_ID:  # tracing's record factory may have set "-"
            ids = _span_ids()
            if ids is not None:
                record.trace_id, record.span_id = ids
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages are escaped by JSON)."""

    FIELDS = ("topic", "partition", "offset", "trace_id", "span_id")

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
            if value is not None and value != NO_ID:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, default=str, ensure_ascii=False)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` adds, told apart from any other."""


def configure_logging(level: str, fmt: str = "text", traced: bool = False) -> None:
    """Sends every record to stderr in ``fmt`` ("text" or "json"), at ``level`` and above.

    With ``traced`` (tracing on), text lines carry the trace and span ids
    (:func:`jetkafka._tracing._logs.log_format`); JSON lines carry them whenever a span is current.

    Replaces the handler an earlier call added (others, such as a test runner's, stay). The clients' loggers (jetkafka.librdkafka,
    jetkafka.zookeeper) stay at WARNING unless ``level`` is DEBUG.
    """
    handler = _StderrHandler(sys.stderr)
    handler.addFilter(WorkContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(log_format(traced)))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    if level.upper() != "DEBUG":
        logging.getLogger("jetkafka.librdkafka").setLevel(logging.WARNING)
        logging.getLogger("jetkafka.zookeeper").setLevel(logging.WARNING)
