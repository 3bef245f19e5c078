"""The spans' way to the collector, and how long a stop waits for it.

:class:`SpanDelivery` puts the SDK's ``BatchSpanProcessor`` (its queue and background thread)
in front of an exporter, and counts what goes through: spans queued, sent, and not sent.

Guarantees:

* :meth:`SpanDelivery.flush` returns within its timeout whatever the collector does: refuses
  connections, accepts them and never answers, or answers slowly. The SDK's own flush has no
  bound (each export request of the backlog gets the exporter's full timeout and retries, one
  after the other), so it runs on a thread of its own that the caller waits for at most the
  timeout. Past it, the spans still queued are dropped without a request, and the export in
  progress is left to finish or fail on its own.
* Nothing is lost silently: each flush that finds spans not exported since the last one (exports
  that failed while running, spans still unsent when its bound ran out) logs one line counting
  them and naming the collector. The exporter logs the cause of each failed request itself.
* The exit of the process flushes with the same bound (:meth:`SpanDelivery.flush_at_exit`)
  instead of the SDK's exit handler, which waits up to 30 s; after a flush that ran out of time
  it does not wait for the same collector again.

Failure modes: a span the SDK's queue had no room for (``OTEL_BSP_MAX_QUEUE_SIZE``) is logged
by the SDK, and counted here only by a flush that runs out of time; an export still in progress
when a flush gave up, and that succeeds after all, was counted as not exported.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

log = logging.getLogger("jetkafka.tracing")


class _Tally:
    """Counts of spans, under one lock: queued, sent, failed, and what was reported of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued = 0
        self._sent = 0
        self._failed = 0  # in exports that failed, or dropped without one
        self._exporting = 0  # in the export request in progress
        self._reported = 0  # of the failed ones
        self._written_off = 0  # reported as unsent by a flush that ran out of time, not settled yet
        self._dropping = 0  # flushes that ran out of time and still drain the queue

    @property
    def dropping(self) -> bool:
        """Whether batches are dropped without a request (a flush ran out of time, its queue
        is not empty yet)."""
        return self._dropping > 0

    def add_queued(self) -> None:
        with self._lock:
            self._queued += 1

    def exporting(self, count: int) -> None:
        with self._lock:
            self._exporting = count

    def settled(self, count: int, ok: bool) -> None:
        with self._lock:
            self._exporting = 0
            # The queue is first in, first out: the next spans to settle are the written-off ones,
            # already reported whichever way their export ends.
            absorbed = min(self._written_off, count)
            self._written_off -= absorbed
            if ok:
                self._sent += count
            else:
                self._failed += count
                self._reported += absorbed

    def start_dropping(self) -> None:
        with self._lock:
            self._dropping += 1

    def stop_dropping(self) -> None:
        with self._lock:
            self._dropping -= 1

    def take_unreported(self, write_off_unsent: bool) -> tuple[int, int, int]:
        """(spans of failed exports not reported yet, and with ``write_off_unsent`` the spans
        not sent now and how many of those are in the export in progress); all count as
        reported from now on."""
        with self._lock:
            failed = self._failed - self._reported
            self._reported = self._failed
            unsent = exporting = 0
            if write_off_unsent:
                unsent = max(0, self._queued - self._sent - self._failed - self._written_off)
                # The export in progress holds the oldest unsettled spans: written off first.
                exporting = min(unsent, max(0, self._exporting - self._written_off))
                self._written_off += unsent
            return failed, unsent, exporting


class _Flush:
    """One flush of the SDK's queue, on a thread of its own, that its caller may give up on."""

    def __init__(self, batches: BatchSpanProcessor, tally: _Tally) -> None:
        self._batches = batches
        self._tally = tally
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._abandoned = False

    def start(self) -> None:
        threading.Thread(target=self._run, name="jetkafka-tracing-flush", daemon=True).start()

    def wait(self, timeout_s: float) -> bool:
        return self._finished.wait(timeout_s)

    def abandon(self) -> bool:
        """Stop waiting for it: the spans it has not sent yet are dropped without a request until
        it has emptied the queue. False when it finished after all."""
        with self._lock:
            if self._finished.is_set():
                return False
            self._abandoned = True
            self._tally.start_dropping()
            return True

    def _run(self) -> None:
        try:
            self._batches.force_flush()
        except Exception:  # a thread of its own; the failed export is counted already
            log.debug("tracing: flush failed", exc_info=True)
        finally:
            with self._lock:
                self._finished.set()
                if self._abandoned:
                    self._tally.stop_dropping()


class _CountedExporter(SpanExporter):
    """The exporter, counting each batch's outcome; drops batches while a flush gives up."""

    def __init__(self, exporter: SpanExporter, tally: _Tally) -> None:
        self._exporter = exporter
        self._tally = tally

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._tally.dropping:
            self._tally.settled(len(spans), ok=False)
            return SpanExportResult.FAILURE
        result = SpanExportResult.FAILURE
        self._tally.exporting(len(spans))
        try:
            result = self._exporter.export(spans)
        finally:
            self._tally.settled(len(spans), ok=result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class _CountedQueue(SpanProcessor):
    """The SDK's batch span processor, counting the spans it queues (the sampled ones)."""

    def __init__(self, batches: BatchSpanProcessor, tally: _Tally) -> None:
        self._batches = batches
        self._tally = tally

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._batches.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self._tally.add_queued()
        self._batches.on_end(span)

    def shutdown(self) -> None:
        self._batches.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batches.force_flush(timeout_millis)


class SpanDelivery:
    """Spans queued and exported in the background to ``url`` through ``exporter``; a flush
    waits ``bound_s`` at most. :attr:`processor` goes to the tracer provider. Any thread."""

    def __init__(self, exporter: SpanExporter, url: str, bound_s: float) -> None:
        self.url = url
        self.bound_s = bound_s
        self._tally = _Tally()
        self._batches = BatchSpanProcessor(_CountedExporter(exporter, self._tally))
        self.processor: SpanProcessor = _CountedQueue(self._batches, self._tally)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send the spans queued now; True when the flush ended within ``timeout_s``. Returns
        within ``timeout_s`` (default: the bound) whatever the collector does; logs once what
        was not sent."""
        timeout_s = self.bound_s if timeout_s is None else timeout_s
        if self._tally.dropping:
            # An earlier flush ran out of time and still waits for this collector: not again.
            self._report(timeout_s, ran_out=True)
            return False
        flush = _Flush(self._batches, self._tally)
        try:
            flush.start()
        except RuntimeError:
            # No new thread at the interpreter's exit (Python 3.12 refuses one in an atexit
            # handler): waiting here could outlast the bound, so what is queued is dropped.
            ran_out = flush.abandon()
            self._report(timeout_s, ran_out)
            return not ran_out
        ran_out = not flush.wait(timeout_s) and flush.abandon()
        self._report(timeout_s, ran_out)
        return not ran_out

    def flush_at_exit(self) -> None:
        """The bounded flush, at the exit of the process (registered with :mod:`atexit`)."""
        self.flush()

    def _report(self, timeout_s: float, ran_out: bool) -> None:
        failed, unsent, exporting = self._tally.take_unreported(write_off_unsent=ran_out)
        if not failed and not unsent:
            return
        parts = []
        if unsent:
            waiting = f", {exporting} of them in an export still in progress" if exporting else ""
            parts.append(f"{unsent} not sent within the {timeout_s:g} s a flush waits for the collector{waiting}")
        if failed:
            parts.append(f"{failed} in exports that failed: the exporter's messages above say why")
        total = failed + unsent
        log.warning(
            "tracing: %d span%s not exported to %s (%s); they are dropped",
            total,
            "" if total == 1 else "s",
            self.url,
            "; ".join(parts),
        )


__all__ = ["SpanDelivery"]
