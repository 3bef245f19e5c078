"""The ``process`` span of a batch: attributes, links to the producers, parentage, failures,
and the trace ids in the log lines of the processor's code."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.tracing.conftest import SKIP_REASON

pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)

from opentelemetry.trace import SpanKind, StatusCode

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource
from jetkafka._tracing._logs import install_trace_ids
from jetkafka._tracing._spans import MAX_LINKS
from jetkafka.processors._calls import deliver_batch
from tests.tracing.support import TOPIC, FakeMessage, traced

SOURCE = PartitionSource(TOPIC, 3, 40, 40, 43)
PRODUCER_A = (0xA1, 0xA2)
PRODUCER_B = (0xB1, 0xB2)


class Recording(BatchEventProcessor):
    """Logs one line per batch, then answers ``outcome`` (raises it if it is an exception)."""

    def __init__(self, outcome: Any = None) -> None:
        self.outcome = outcome if outcome is not None else BatchResponse.advance()

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        logging.getLogger("tests.tracing.processor").info("handling %d events", len(events))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome  # type: ignore[no-any-return]


def test_a_batch_is_one_process_span_with_the_kafka_messaging_attributes_and_a_link_per_producer(spans: Any) -> None:
    batch = EventBatch([traced(40, *PRODUCER_A), FakeMessage(41), traced(42, *PRODUCER_B), traced(43, *PRODUCER_A)])

    end = deliver_batch(Recording(), SOURCE, batch, group="billing")

    assert end.response is not None
    (span,) = spans.get_finished_spans()
    assert span.name == f"process {TOPIC}" and span.kind is SpanKind.CONSUMER
    assert dict(span.attributes) == {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": TOPIC,
        "messaging.destination.partition.id": "3",
        "messaging.consumer.group.name": "billing",
        "messaging.kafka.offset": 40,
        "messaging.batch.message_count": 4,
        "jetkafka.response": "advance",
    }
    # Links, not a parent, for a batch: one per distinct producer span, in offset order.
    assert span.parent is None
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [PRODUCER_A, PRODUCER_B]
    assert all(link.context.is_remote for link in span.links)
    assert span.status.status_code is StatusCode.UNSET


def test_a_batch_of_one_record_is_a_child_of_its_producers_span(spans: Any) -> None:
    deliver_batch(Recording(), SOURCE, EventBatch([traced(40, *PRODUCER_B)]), group="billing")

    (span,) = spans.get_finished_spans()
    assert span.context.trace_id == PRODUCER_B[0]  # the producer's trace continues
    assert span.parent is not None and (span.parent.trace_id, span.parent.span_id) == PRODUCER_B
    assert list(span.links) == []
    assert span.attributes["messaging.batch.message_count"] == 1


def test_a_record_without_or_with_a_malformed_traceparent_is_neither_linked_nor_parent(spans: Any) -> None:
    broken = FakeMessage(41, [("traceparent", b"00-not-a-context-01")])
    deliver_batch(Recording(), SOURCE, EventBatch([broken]), group="billing")
    deliver_batch(Recording(), SOURCE, EventBatch([FakeMessage(40), broken]), group="billing")

    for span in spans.get_finished_spans():
        assert span.parent is None and list(span.links) == []


def test_links_stop_at_the_limit(spans: Any) -> None:
    batch = EventBatch([traced(i, 1000 + i, 1 + i) for i in range(MAX_LINKS + 50)])
    deliver_batch(Recording(), SOURCE, batch, group="billing")

    (span,) = spans.get_finished_spans()
    assert len(span.links) == MAX_LINKS
    assert span.attributes["messaging.batch.message_count"] == MAX_LINKS + 50


def test_a_failed_batch_is_an_error_span_with_the_exception(spans: Any) -> None:
    end = deliver_batch(Recording(RuntimeError("subscriber down")), SOURCE, EventBatch([FakeMessage(40)]), group="g")

    assert isinstance(end.failure, RuntimeError)
    (span,) = spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "RuntimeError: subscriber down"
    (event,) = span.events
    assert event.name == "exception" and event.attributes["exception.message"] == "subscriber down"


def test_a_recovery_batch_says_so(spans: Any) -> None:
    deliver_batch(Recording(), SOURCE, EventBatch([FakeMessage(40)], recovery=True), group="g")
    (span,) = spans.get_finished_spans()
    assert span.attributes["jetkafka.recovery"] is True


def test_the_log_lines_of_a_batch_carry_its_trace_and_span_ids(spans: Any, caplog: pytest.LogCaptureFixture) -> None:
    install_trace_ids()
    with caplog.at_level(logging.INFO, logger="tests.tracing.processor"):
        deliver_batch(Recording(), SOURCE, EventBatch([traced(40, *PRODUCER_A)]), group="g")
        logging.getLogger("tests.tracing.processor").info("after the batch")

    (span,) = spans.get_finished_spans()
    inside, after = (r for r in caplog.records if r.name == "tests.tracing.processor")
    assert inside.getMessage() == "handling 1 events"
    assert inside.trace_id == f"{PRODUCER_A[0]:032x}" == f"{span.context.trace_id:032x}"
    assert inside.span_id == f"{span.context.span_id:016x}"
    assert (after.trace_id, after.span_id) == ("-", "-")


def test_without_a_tracer_provider_nothing_is_recorded_and_the_batch_runs_as_before() -> None:
    from jetkafka._tracing._spans import tracing_active

    assert not tracing_active()  # the suite never installs a global provider
    end = deliver_batch(Recording(), SOURCE, EventBatch([traced(40, *PRODUCER_A)]), group="g")
    assert end.response is not None


class Failing(BatchEventProcessor):
    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        raise ValueError("bad record")

    def on_exception(self, source: PartitionSource, exc: Exception) -> BatchResponse | None:
        logging.getLogger("tests.tracing.processor").info("deciding about %s", exc)
        return None


def test_the_failure_report_of_a_batch_carries_the_batch_trace_id(spans: Any, caplog: pytest.LogCaptureFixture) -> None:
    from jetkafka.processors._calls import ask_on_exception

    install_trace_ids()
    batch = [traced(40, *PRODUCER_A)]
    log = logging.getLogger("tests.tracing.worker")
    with caplog.at_level(logging.INFO):
        end = deliver_batch(Failing(), SOURCE, EventBatch(batch), group="g")
        assert end.failure is not None
        ask_on_exception(Failing(), SOURCE, batch, end.failure, 1, log=log, failed=lambda hook, exc: None, span=end.span)

    (span,) = spans.get_finished_spans()
    wanted = f"{span.context.trace_id:032x}"
    report = next(r for r in caplog.records if r.name == "tests.tracing.worker")
    deciding = next(r for r in caplog.records if r.getMessage().startswith("deciding about"))
    assert "processor failed on offsets 40..40" in report.getMessage()
    assert (report.trace_id, deciding.trace_id) == (wanted, wanted)
