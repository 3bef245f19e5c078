"""The trace context of a delivery: the W3C ``traceparent`` of the POST, and the CloudEvents
distributed-tracing extension.

With tracing on (a tracer provider installed, see docs/operations.md "Tracing") each POST is a
CLIENT span ``POST`` (HTTP semantic conventions: ``http.request.method``, ``url.full``,
``server.address``, ``http.response.status_code``), a child of the batch's ``process`` span, and
the request's ``traceparent`` (and ``tracestate``) header is that span's, so the subscriber's
server span continues the trace from the delivery. The producer's context is not lost: the
event keeps it as the CloudEvents distributed-tracing extension (the ``traceparent`` and
``tracestate`` attributes; ``ce-traceparent`` in binary mode), taken from the record's own
``traceparent`` header when the event does not carry the extension already.

With tracing off nothing changes: the record's ``traceparent`` and ``tracestate`` headers are
forwarded unchanged (see :mod:`jetkafka.processors.cloudevents._encoding`).

Called on the thread delivering the partition's batch only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from jetkafka._tracing._spans import client_span, current_traceparent, mark_span_status, tracing_active
from jetkafka.processors.cloudevents._delivery import Attempt, HttpSender
from jetkafka.processors.cloudevents._encoding import RecordEvent

TRACE_HEADERS = ("traceparent", "tracestate")


def tracing_extensions(event: RecordEvent) -> dict[str, Any]:
    """The distributed-tracing extension to add to ``event``: the record's ``traceparent`` and
    ``tracestate`` headers, unless tracing is off or the event has the extension already."""
    if not tracing_active() or "traceparent" in event.attributes or "traceparent" not in event.forward:
        return {}
    return {name: event.forward[name] for name in TRACE_HEADERS if name in event.forward}


def traced_post(
    sender: HttpSender, url: str, headers: Mapping[str, str], body: bytes, event: RecordEvent
) -> Attempt:
    """One POST of ``event`` in its ``POST`` span, with the span's ``traceparent``."""
    if not tracing_active():
        return sender.post(url, headers, body)
    parts = urlsplit(url)
    attributes: dict[str, Any] = {
        "http.request.method": "POST",
        "url.full": url,
        "server.address": parts.hostname or "",
        "cloudevents.event_id": str(event.attributes.get("id", "")),
        "cloudevents.event_type": str(event.attributes.get("type", "")),
    }
    if parts.port is not None:
        attributes["server.port"] = parts.port
    with client_span("POST", attributes) as span:
        sent = {name: value for name, value in headers.items() if name.lower() not in TRACE_HEADERS}
        sent.update(current_traceparent())
        attempt = sender.post(url, sent, body)
        if attempt.status is not None:
            span.set_attribute("http.response.status_code", attempt.status)
        mark_span_status(span, attempt.ok, attempt.describe())
        return attempt


__all__ = ["TRACE_HEADERS", "traced_post", "tracing_extensions"]
