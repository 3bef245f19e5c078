"""Every call into a processor's code goes through here.

A processor is the user's code: it may raise anything, return the wrong type, or report that
its partition was lost. The live workers (:mod:`jetkafka.channel._worker`) and recovery
(:mod:`jetkafka.recovery._progress`) hand their batches and callbacks to these two functions,
so both treat a processor the same way:

- :func:`deliver_batch` calls ``on_next_batch`` inside the batch's ``process`` span
  (:func:`jetkafka._tracing._spans.batch_span`: the log lines of the processor's code carry its
  trace id, a failure is recorded on it) and sorts its end into a response, a
  :class:`~jetkafka.errors.PartitionLost` (nothing of the batch counts; the caller drops the
  partition) or a failure (any other exception, a response that is not a
  :class:`BatchResponse`: the caller's failure policy decides, with ``on_exception`` first).
  Its ``may_start`` is asked last, right before the call: a process frozen past its session
  timeout anywhere before that line finds its lease run out there and starts nothing;
- :func:`start_batch` does the same for an asynchronous processor without waiting (ordering
  ``key`` / ``none``): the coroutine runs on the processors' event loop
  (:mod:`jetkafka.processors._event_loop`) inside its span, and its end, sorted the same way,
  goes to a callback; :func:`deliver_batch` given a coroutine waits for it there;
- :func:`ask_on_exception` reports a failed batch (the traceback once, at its first attempt)
  and asks ``on_exception`` what to do: a response to follow, or None for the failure policy;
- :func:`call_hook` calls any other callback (``on_exception``, ``on_batch_processed``,
  ``on_idle``, ``on_reposition``, ``on_stream_termination``): an exception there is reported
  to the caller's ``failed`` and the call answers None, never fatal to a worker.

Neither catches ``BaseException`` beyond ``Exception``: a ``KeyboardInterrupt`` or
``SystemExit`` raised by user code ends the thread as Python intends.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

from jetkafka._tracing._spans import batch_span, mark_failed
from jetkafka.errors import PartitionLost
from jetkafka.events import EventBatch, PartitionSource, offset_of
from jetkafka.processors._base import BatchEventProcessor, BatchResponse
from jetkafka.processors._event_loop import run_blocking, start


@dataclass(frozen=True)
class BatchEnd:
    """How ``on_next_batch`` ended: exactly one of the three is set, or none when the batch was
    not started (``may_start`` said no; the caller keeps the batch)."""

    response: BatchResponse | None = None
    lost: PartitionLost | None = None
    failure: Exception | None = None
    # The batch's span (ended): a failure is reported inside it, so its log lines carry the
    # batch's trace id.
    span: Span | None = None

    @property
    def started(self) -> bool:
        return self.response is not None or self.lost is not None or self.failure is not None


def deliver_batch(
    processor: BatchEventProcessor,
    source: PartitionSource,
    events: EventBatch,
    *,
    group: str | None = None,
    may_start: Callable[[], bool] | None = None,
) -> BatchEnd:
    """``processor.on_next_batch(source, events)`` in the batch's span (``group``: the consumer
    group, for the span's attributes), its end sorted as the module docstring says.

    ``may_start``: asked once more right before the call (after the span's setup, which takes
    longer than anything after it); False returns an empty :class:`BatchEnd`. A check can
    never be atomic with the call, so a process frozen between the two still delivers its
    batch after the thaw: that batch was in hand at the freeze. Keeping the check here makes
    that window a few bytecodes long instead of the whole preparation of the batch.
    """
    with batch_span(source.topic, source.partition, group, events) as span:
        if may_start is not None and not may_start():
            if span.is_recording():
                span.set_attribute("jetkafka.response", "not_started")
            return BatchEnd()
        try:
            response = processor.on_next_batch(source, events)
            if inspect.iscoroutine(response):  # an AsyncBatchEventProcessor: a worker waits for it
                response = run_blocking(response)
        except Exception as exc:  # noqa: BLE001 - user code may raise anything: sorted below
            return _ended(processor, span, None, exc)
        return _ended(processor, span, response, None)


def start_batch(
    processor: BatchEventProcessor,
    source: PartitionSource,
    events: EventBatch,
    done: Callable[[BatchEnd], None],
    *,
    group: str | None = None,
    may_start: Callable[[], bool] | None = None,
) -> None:
    """As :func:`deliver_batch` for an :class:`~jetkafka.processors.AsyncBatchEventProcessor`,
    without waiting: its coroutine runs on the processors' event loop, inside the batch's span
    (entered and left there), and ``done(end)`` is called on the loop's thread once it ended
    (``done`` must not block: it hands the end back to a worker)."""
    if may_start is not None and not may_start():
        done(BatchEnd())
        return

    async def run() -> BatchEnd:
        with batch_span(source.topic, source.partition, group, events) as span:
            try:
                response = processor.on_next_batch(source, events)
                if inspect.iscoroutine(response):
                    response = await response
            except Exception as exc:  # noqa: BLE001 - user code may raise anything: sorted below
                return _ended(processor, span, None, exc)
            return _ended(processor, span, response, None)

    def finished(future: concurrent.futures.Future[Any]) -> None:
        exc = future.exception()
        if exc is not None:  # only a BaseException gets here (_ended sorts every Exception)
            done(BatchEnd(failure=RuntimeError(f"on_next_batch ended with {type(exc).__name__}: {exc}")))
        else:
            done(future.result())

    start(run(), finished)


def _ended(
    processor: BatchEventProcessor, span: Span, response: Any, exc: BaseException | None
) -> BatchEnd:
    """Sort how ``on_next_batch`` ended (its response, or what it raised) into a :class:`BatchEnd`."""
    if exc is None and not isinstance(response, BatchResponse):
        exc = TypeError(
            f"{type(processor).__name__}.on_next_batch must return a BatchResponse "
            f"(e.g. BatchResponse.advance()), got {response!r}"
        )
    if isinstance(exc, PartitionLost):
        mark_failed(span, exc)
        return BatchEnd(lost=exc)
    if exc is not None:
        if not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit: as Python intends
        mark_failed(span, exc)
        return BatchEnd(failure=exc, span=span)
    if span.is_recording():
        span.set_attribute("jetkafka.response", response.kind.value)
    return BatchEnd(response=response)


def ask_on_exception(
    processor: BatchEventProcessor,
    source: PartitionSource,
    batch: list[Any],
    exc: Exception,
    attempt: int,
    *,
    log: logging.Logger,
    failed: Callable[[str, Exception], None],
    what: str = "offsets",
    span: Span | None = None,
) -> BatchResponse | None:
    """``batch`` (its messages) failed with ``exc`` at its ``attempt``-th try: log it on the
    caller's ``log`` (the traceback only at the first attempt, so a batch retried for minutes
    does not flood the log) and return what ``on_exception`` answers (None: it left the decision
    to the caller's failure policy, or raised, reported to ``failed``). With the batch's
    ``span`` (:attr:`BatchEnd.span`), the report and ``on_exception`` run in its context, so their
    log lines carry the batch's trace id."""
    with trace.use_span(span, end_on_exit=False) if span is not None else nullcontext():
        return _report_failure(processor, source, batch, exc, attempt, log, failed, what)


def _report_failure(
    processor: BatchEventProcessor,
    source: PartitionSource,
    batch: list[Any],
    exc: Exception,
    attempt: int,
    log: logging.Logger,
    failed: Callable[[str, Exception], None],
    what: str,
) -> BatchResponse | None:
    log.error(
        "%s[%d]: processor failed on %s %d..%d (attempt %d): %s: %s",
        source.topic,
        source.partition,
        what,
        offset_of(batch[0]),
        offset_of(batch[-1]),
        attempt,
        type(exc).__name__,
        exc,
        exc_info=exc if attempt == 1 else None,
    )
    response: BatchResponse | None = call_hook(processor, "on_exception", source, exc, failed=failed)
    return response


def call_hook(
    processor: BatchEventProcessor, name: str, *args: Any, failed: Callable[[str, Exception], None]
) -> Any:
    """``processor.<name>(*args)``; None, after ``failed(name, error)``, if it raised."""
    try:
        return getattr(processor, name)(*args)
    except Exception as exc:  # noqa: BLE001 - user code may raise anything: reported to `failed`, never fatal
        failed(name, exc)
        return None
