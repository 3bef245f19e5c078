"""Trace ids in log lines: ``trace_id`` and ``span_id`` on every log record.

:func:`install_trace_ids` wraps the logging module's record factory once per process: each
record made while a valid span is current on the emitting thread (a batch's ``process`` span
while the processor runs, a commit, a reset …) gets the span's ids in hex, as a trace backend
shows them; any other record gets ``-`` for both, so a format naming them never fails. A log
search for a trace id then finds the lines of that batch, and a trace found first leads to its
log lines.

:data:`TRACED_FORMAT` is the log format of ``jetkafka run`` with tracing on (the plain one
plus ``trace=<id> span=<id>``). A JSON or other formatter can read the two attributes too.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry import trace

PLAIN_FORMAT = "%(asctime)s %(levelname)-7s %(name)s [%(threadName)s] %(message)s"
TRACED_FORMAT = "%(asctime)s %(levelname)-7s %(name)s [%(threadName)s] trace=%(trace_id)s span=%(span_id)s %(message)s"
NO_ID = "-"

_lock = threading.Lock()
_installed = False


def install_trace_ids() -> None:
    """Give every log record made from now on ``trace_id`` and ``span_id`` (idempotent)."""
    global _installed  # noqa: PLW0603 - the record factory is process-wide; wrapped once
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def traced_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            found = trace.get_current_span().get_span_context()
            if found.is_valid:
                record.trace_id = trace.format_trace_id(found.trace_id)
                record.span_id = trace.format_span_id(found.span_id)
            else:
                record.trace_id = record.span_id = NO_ID
            return record

        logging.setLogRecordFactory(traced_record)
        _installed = True


def log_format(traced: bool) -> str:
    """The log format of ``jetkafka run``: :data:`TRACED_FORMAT` (with the trace ids installed)
    when ``traced``, else :data:`PLAIN_FORMAT`."""
    if not traced:
        return PLAIN_FORMAT
    install_trace_ids()
    return TRACED_FORMAT


__all__ = ["NO_ID", "PLAIN_FORMAT", "TRACED_FORMAT", "install_trace_ids", "log_format"]
