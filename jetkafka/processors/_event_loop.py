"""The event loop that runs asynchronous processors' coroutines, one per process.

An :class:`~jetkafka.processors.AsyncBatchEventProcessor`'s ``on_next_batch`` is a coroutine
function. Its coroutines run on one event loop in a thread of its own (``jetkafka-asyncio``),
started at the first coroutine and kept for the life of the process, so thousands of batches
can wait on I/O at once while the workers stay free (``channel.ordering: key | none``), and an
asynchronous client built in ``on_start`` on that loop stays usable in every later call.

Two ways in: :func:`run_blocking` (a worker waits for the coroutine: ``ordering: partition``,
recovery) and :func:`start` (the coroutine's end is handed to a callback on the loop's thread:
the caller must not block there). Either runs the coroutine in a copy of the caller's context
variables, so the batch's tracing span is the current one inside it.

Failure modes: a coroutine that blocks the loop (a synchronous call inside ``async def``)
holds up every other coroutine of the process; ``jetkafka profile`` shows it on the
``jetkafka-asyncio`` thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

_lock = threading.Lock()
_running: list[asyncio.AbstractEventLoop] = []  # the loop, once started


def loop() -> asyncio.AbstractEventLoop:
    """The process's loop for processors' coroutines, started on first use."""
    with _lock:
        if not _running or _running[0].is_closed():
            new = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(ready.set)
                new.run_forever()

            threading.Thread(target=run, name="jetkafka-asyncio", daemon=True).start()
            ready.wait()
            _running[:] = [new]
        return _running[0]


# Coroutines handed over and not begun yet, and whether the loop was woken to begin them: a
# wake-up writes to the loop's self-pipe, which costs more than beginning a small coroutine,
# so one wake-up begins every coroutine handed over until the loop gets to it.
_arrived: deque[Callable[[], None]] = deque()
_woken = [False]


def start(coro: Coroutine[Any, Any, Any], done: Callable[[concurrent.futures.Future[Any]], None]) -> None:
    """Run ``coro`` on the loop; ``done(future)`` is called on the loop's thread when it ends."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    context = contextvars.copy_context()
    target = loop()

    def begin() -> None:
        task = target.create_task(coro, context=context)

        def ended(t: asyncio.Task[Any]) -> None:
            if t.cancelled():
                future.set_exception(asyncio.CancelledError())
            elif t.exception() is not None:
                future.set_exception(t.exception())
            else:
                future.set_result(t.result())

        task.add_done_callback(ended)

    future.add_done_callback(done)
    with _lock:
        _arrived.append(begin)
        if _woken[0]:
            return
        _woken[0] = True
    target.call_soon_threadsafe(_begin_arrived)


def _begin_arrived() -> None:
    """On the loop: begin every coroutine handed over so far."""
    with _lock:
        _woken[0] = False
        arrived = list(_arrived)
        _arrived.clear()
    for begin in arrived:
        begin()


def run_blocking(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` on the loop and wait for its result (raises what it raised)."""
    if threading.current_thread().name == "jetkafka-asyncio":
        coro.close()
        raise RuntimeError("a processor's coroutine cannot be awaited from the processors' own event loop thread")
    finished = threading.Event()
    box: list[concurrent.futures.Future[Any]] = []

    def done(future: concurrent.futures.Future[Any]) -> None:
        box.append(future)
        finished.set()

    start(coro, done)
    finished.wait()
    return box[0].result()
