"""SpanDelivery against real OTLP/HTTP exports to broken collectors, in this process: a flush
is bounded and is not repeated for a collector that made one run out of time, and every span
not exported is counted once."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from tests.tracing.broken_collectors import broken_collector
from tests.tracing.conftest import SKIP_REASON

pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason=SKIP_REASON)

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider

from jetkafka._tracing._delivery import SpanDelivery

BOUND_S = 1.0


def lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "jetkafka.tracing" and "not exported" in r.getMessage()]


class Traced:
    def __init__(self, url: str, export_timeout_s: float) -> None:
        self.delivery = SpanDelivery(OTLPSpanExporter(endpoint=url, timeout=export_timeout_s), url, BOUND_S)
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.provider.add_span_processor(self.delivery.processor)
        self._tracer = self.provider.get_tracer("test")

    def spans(self, count: int) -> None:
        for i in range(count):
            with self._tracer.start_as_current_span(f"s{i}"):
                pass


@pytest.fixture
def silent() -> Iterator[Traced]:
    with broken_collector("silent") as collector:
        yield Traced(f"{collector.endpoint}/v1/traces", export_timeout_s=30)


def test_a_flush_returns_within_its_bound_and_is_not_waited_for_again(
    silent: Traced, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "jetkafka.tracing")
    silent.spans(3)
    started = time.monotonic()
    assert silent.delivery.flush() is False
    assert BOUND_S <= time.monotonic() - started < BOUND_S + 0.5
    (line,) = lost_lines(caplog)
    assert line.startswith(f"tracing: 3 spans not exported to {silent.delivery.url} (3 not sent within the 1 s")
    assert "3 of them in an export still in progress" in line
    # The export still waits for its answer: the next flush (the process's exit) does not wait
    # again, and counts only what is new.
    silent.spans(2)
    started = time.monotonic()
    assert silent.delivery.flush() is False
    assert time.monotonic() - started < 0.2
    waited = "2 not sent within the 1 s a flush waits for the collector"
    assert lost_lines(caplog)[1:] == [f"tracing: 2 spans not exported to {silent.delivery.url} ({waited}); they are dropped"]
    silent.delivery.flush_at_exit()
    assert len(lost_lines(caplog)) == 2


def test_spans_of_exports_that_failed_while_running_are_counted_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "jetkafka.tracing")
    with broken_collector("refused") as collector:
        # An export timeout shorter than the exporter's first back-off: each export fails at once.
        traced = Traced(f"{collector.endpoint}/v1/traces", export_timeout_s=0.5)
        traced.spans(4)
        assert traced.delivery.flush() is True  # ended in time: the export failed, quickly
        traced.spans(1)
        assert traced.delivery.flush() is True
        assert traced.delivery.flush() is True
    why = "the exporter's messages above say why); they are dropped"
    assert lost_lines(caplog) == [
        f"tracing: 4 spans not exported to {traced.delivery.url} (4 in exports that failed: {why}",
        f"tracing: 1 span not exported to {traced.delivery.url} (1 in exports that failed: {why}",
    ]


def test_a_flush_where_no_thread_may_start_drops_the_queue_and_says_so(
    silent: Traced, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.12 refuses a new thread in an atexit handler, where the flush at exit runs: the
    # flush used to fail there with a traceback. It now drops what is queued, at once, counted.
    caplog.set_level(logging.WARNING, "jetkafka.tracing")
    silent.spans(2)

    def refused(self: object) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr("jetkafka._tracing._delivery.threading.Thread.start", refused)
    started = time.monotonic()
    assert silent.delivery.flush() is False
    assert time.monotonic() - started < 0.5
    (line,) = lost_lines(caplog)
    assert line.startswith(f"tracing: 2 spans not exported to {silent.delivery.url} (2 not sent")
