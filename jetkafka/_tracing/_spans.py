"""The spans jetkafka makes, with the OpenTelemetry messaging conventions for Kafka.

A batch is one ``process`` span (kind CONSUMER) named ``process <topic>``, carrying
``messaging.system=kafka``, ``messaging.operation.type=process``,
``messaging.destination.name`` (the topic), ``messaging.destination.partition.id``,
``messaging.consumer.group.name``, ``messaging.kafka.offset`` (the batch's first record) and
``messaging.batch.message_count``. A record whose producer sent a W3C ``traceparent`` header
links the batch span to the producer's span; a batch of one record makes that span its
parent instead, so the trace reads producer -> process. At most :data:`MAX_LINKS` distinct
producer contexts are linked (the SDK's default link limit), so a batch of many thousand records
costs at most that many header look-ups past the first ones.

The other spans (all kind INTERNAL, ``messaging.system`` and the partition attributes where
they apply): ``commit <topic>`` (a fenced offset commit), ``partitions taken`` and
``partition released <topic>`` (rebalances), ``reset <topic>`` (applying an offset reset),
``recover <topic>`` (a recovery range, parent of its batches' spans), ``micro-batch`` (a Spark
micro-batch with its id and slices).

Every function here may be called from any thread; a span is current only on the thread that
entered it. Without a tracer provider (see :mod:`jetkafka._tracing._setup`) the helpers skip
the header look-ups and the API's spans record nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from jetkafka.events import EventBatch

MAX_LINKS = 128
TRACER_NAME = "jetkafka"

_propagator = TraceContextTextMapPropagator()
_tracer = trace.get_tracer(TRACER_NAME)  # a proxy until a provider is set, then that provider's
_own_provider = False


def use_provider(provider: TracerProvider | None) -> None:
    """Send jetkafka's spans to ``provider`` instead of the global one (None: the global one
    again). For tests, which cannot set the process's global provider more than once; an
    application sets the global provider (or ``tracing.enabled``). Call it before the channel
    starts: spans begun before keep their provider."""
    global _tracer, _own_provider  # noqa: PLW0603 - the one tracer every span of this process is made with
    _tracer = trace.get_tracer(TRACER_NAME) if provider is None else provider.get_tracer(TRACER_NAME)
    _own_provider = provider is not None


def tracing_active() -> bool:
    """Whether a tracer provider is installed (spans may be recorded)."""
    return _own_provider or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def partition_attributes(topic: str, partition: int, group: str | None = None) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "messaging.system": "kafka",
        "messaging.destination.name": topic,
        "messaging.destination.partition.id": str(partition),
    }
    if group is not None:
        attributes["messaging.consumer.group.name"] = group
    return attributes


def producer_context(headers: Iterable[tuple[str, str | bytes | None]]) -> SpanContext | None:
    """The span context of a record's W3C ``traceparent`` (and ``tracestate``) headers; None
    when there is none or it is malformed."""
    carrier: dict[str, str] = {}
    for name, value in headers:
        lowered = name.lower()
        if lowered in ("traceparent", "tracestate") and value is not None:
            carrier[lowered] = value.decode("latin-1") if isinstance(value, bytes) else value
    if "traceparent" not in carrier:
        return None
    found = trace.get_current_span(_propagator.extract(carrier)).get_span_context()
    return found if found.is_valid else None


def producer_contexts(events: EventBatch) -> list[SpanContext]:
    """The distinct producer contexts of a batch's records, in offset order, at most
    :data:`MAX_LINKS`."""
    seen: dict[tuple[int, int], SpanContext] = {}
    for message in events.messages:
        headers = message.headers() or []
        found = producer_context(headers.items() if isinstance(headers, dict) else headers)
        if found is not None:
            seen.setdefault((found.trace_id, found.span_id), found)
            if len(seen) >= MAX_LINKS:
                break
    return list(seen.values())


@contextmanager
def batch_span(topic: str, partition: int, group: str | None, events: EventBatch) -> Iterator[Span]:
    """The ``process`` span of one batch, current on this thread while the block runs."""
    if not tracing_active():
        # No provider: no span would be recorded, and making the proxy's empty span current
        # costs more than a small batch's processing (ordering key or none hands out many).
        yield trace.INVALID_SPAN
        return
    attributes = partition_attributes(topic, partition, group)
    attributes["messaging.operation.type"] = "process"
    attributes["messaging.operation.name"] = "process"
    attributes["messaging.batch.message_count"] = len(events)
    if len(events):
        attributes["messaging.kafka.offset"] = events.first_offset
    if events.recovery:
        attributes["jetkafka.recovery"] = True
    producers = producer_contexts(events)
    parent: otel_context.Context | None = None
    links: list[Link] = []
    if len(events) == 1 and producers:
        parent = trace.set_span_in_context(trace.NonRecordingSpan(producers[0]))
    else:
        links = [Link(found) for found in producers]
    with _tracer.start_as_current_span(
        f"process {topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def mark_failed(span: Span, error: BaseException) -> None:
    """Record ``error`` on ``span`` and mark it failed."""
    if span.is_recording():
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


@contextmanager
def operation_span(name: str, attributes: Mapping[str, AttributeValue] | None = None) -> Iterator[Span]:
    """An INTERNAL span around one of jetkafka's own operations (a commit, a rebalance, a
    reset, a recovery range, a micro-batch), current while the block runs; an exception
    leaving the block is recorded on it and marks it failed."""
    with _tracer.start_as_current_span(name, attributes=attributes) as span:
        yield span


def commit_attributes(topic: str, partition: int, offset: int) -> dict[str, AttributeValue]:
    attributes = partition_attributes(topic, partition)
    attributes["jetkafka.commit.offset"] = offset
    return attributes


def end_with(span: Span, error: BaseException | None) -> None:
    """End ``span`` (one from :func:`start_span`), failed with ``error`` unless that is None."""
    if error is not None:
        mark_failed(span, error)
    span.end()


def start_span(name: str, attributes: Mapping[str, AttributeValue] | None = None) -> Span:
    """An INTERNAL span that outlives one call (a recovery range): started now, not made
    current; the caller ends it (``span.end()``) and may make it the parent of the spans of a
    block with :func:`inside`."""
    return _tracer.start_span(name, attributes=attributes)


@contextmanager
def inside(span: Span) -> Iterator[Span]:
    """``span`` current on this thread while the block runs (not ended after it)."""
    with trace.use_span(span, end_on_exit=False):
        yield span


@contextmanager
def client_span(name: str, attributes: Mapping[str, AttributeValue]) -> Iterator[Span]:
    """A CLIENT span (a request jetkafka sends), current while the block runs."""
    with _tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


def mark_span_status(span: Span, ok: bool, description: str) -> None:
    """Mark ``span`` failed with ``description`` unless ``ok``."""
    if not ok and span.is_recording():
        span.set_status(Status(StatusCode.ERROR, description))


def current_traceparent() -> dict[str, str]:
    """The W3C ``traceparent`` (and ``tracestate``) headers of the current span; empty when
    there is no valid one."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier


__all__ = [
    "MAX_LINKS",
    "batch_span",
    "client_span",
    "commit_attributes",
    "current_traceparent",
    "end_with",
    "inside",
    "mark_failed",
    "mark_span_status",
    "operation_span",
    "partition_attributes",
    "producer_context",
    "producer_contexts",
    "start_span",
    "tracing_active",
    "use_provider",
]
