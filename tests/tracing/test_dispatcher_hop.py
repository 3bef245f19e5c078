"""Across the CloudEvents dispatcher's HTTP hop: the subscriber gets the delivery span's
``traceparent``, the event keeps the producer's as its distributed-tracing extension, and the
spans chain producer -> process -> POST."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tracing.conftest import SKIP_REASON

pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)
pytest.importorskip("cloudevents", reason="the cloudevents extra is not installed")

from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry

from jetkafka import EventBatch, PartitionSource
from jetkafka.processors._calls import deliver_batch
from jetkafka.processors.cloudevents import HttpDispatcher
from tests.support.http_subscriber import HttpSubscriber, Reply
from tests.tracing.support import TOPIC, FakeMessage, traced, traceparent

PRODUCER = (0x5EED, 0xF00D)


def parse(header: str) -> tuple[int, int]:
    version, trace_id, span_id, flags = header.split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    return int(trace_id, 16), int(span_id, 16)


def dispatch(url: str, records: list[FakeMessage], **options: Any) -> Any:
    dispatcher = HttpDispatcher(url, registry=CollectorRegistry(), retry={"count": 0}, **options)
    try:
        return deliver_batch(dispatcher, PartitionSource(TOPIC, 3, 40, 40, 40 + len(records)), EventBatch(records), group="g")
    finally:
        dispatcher.on_stop()


def test_the_subscriber_receives_the_delivery_spans_traceparent_and_the_producers_in_the_event(spans: Any) -> None:
    with HttpSubscriber() as subscriber:
        end = dispatch(subscriber.url, [traced(40, *PRODUCER)])
        (request,) = subscriber.requests()

    assert end.response is not None
    process, = (s for s in spans.get_finished_spans() if s.name == f"process {TOPIC}")
    post, = (s for s in spans.get_finished_spans() if s.name == "POST")
    # producer -> process (one record: its parent) -> POST, one trace
    assert (process.parent.trace_id, process.parent.span_id) == PRODUCER
    assert post.parent is not None and post.parent.span_id == process.context.span_id
    assert post.kind is SpanKind.CLIENT and post.context.trace_id == PRODUCER[0]
    assert post.attributes["http.request.method"] == "POST" and post.attributes["url.full"] == subscriber.url
    assert post.attributes["http.response.status_code"] == 200
    assert post.attributes["cloudevents.event_id"] == f"{TOPIC}-3-40"
    # What the subscriber's own tracing reads: the POST span is its remote parent.
    assert parse(request.headers["traceparent"]) == (post.context.trace_id, post.context.span_id)
    # The CloudEvents distributed-tracing extension keeps the producer's context.
    assert request.headers["ce-traceparent"] == traceparent(*PRODUCER).decode()
    assert request.event()["traceparent"] == traceparent(*PRODUCER).decode()


def test_a_cloudevent_that_carries_the_extension_keeps_it_and_a_batch_links_instead(spans: Any) -> None:
    own = "00-0000000000000000000000000000abcd-000000000000beef-01"
    binary = FakeMessage(41, [
        ("ce_specversion", b"1.0"), ("ce_id", b"b-1"), ("ce_source", b"/billing"), ("ce_type", b"invoice"),
        ("ce_traceparent", own.encode()), ("traceparent", traceparent(*PRODUCER)),
    ])
    with HttpSubscriber() as subscriber:
        dispatch(subscriber.url, [FakeMessage(40), binary], content_mode="structured")
        plain, event = subscriber.requests()

    process, = (s for s in spans.get_finished_spans() if s.name == f"process {TOPIC}")
    posts = [s for s in spans.get_finished_spans() if s.name == "POST"]
    assert process.parent is None and [(ln.context.trace_id, ln.context.span_id) for ln in process.links] == [PRODUCER]
    assert [parse(r.headers["traceparent"]) for r in (plain, event)] == [
        (p.context.trace_id, p.context.span_id) for p in posts
    ]
    assert all(p.context.trace_id == process.context.trace_id for p in posts)
    assert "traceparent" not in plain.event()  # a record without one gets no extension
    assert event.event()["traceparent"] == own  # the event's own extension, untouched


def test_a_failed_post_is_an_error_span(spans: Any) -> None:
    with HttpSubscriber(default=Reply(status=500)) as subscriber:
        dispatch(subscriber.url, [traced(40, *PRODUCER)])
    post = next(s for s in spans.get_finished_spans() if s.name == "POST")
    assert post.status.status_code is StatusCode.ERROR and post.attributes["http.response.status_code"] == 500


def test_without_tracing_the_records_traceparent_travels_as_before() -> None:
    with HttpSubscriber() as subscriber:
        dispatch(subscriber.url, [traced(40, *PRODUCER)])
        (request,) = subscriber.requests()
    assert request.headers["traceparent"] == traceparent(*PRODUCER).decode()
    assert "ce-traceparent" not in request.headers
