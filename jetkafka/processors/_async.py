"""The processor base class for I/O-bound work: ``async def on_next_batch``.

An :class:`AsyncBatchEventProcessor` is a :class:`BatchEventProcessor` whose ``on_next_batch``
is a coroutine function; the other callbacks stay ordinary functions (they are short). Its
coroutines run on the process's processor event loop (:mod:`jetkafka.processors._event_loop`).

With ``channel.ordering: key`` or ``none`` the channel starts a batch's coroutine and goes on:
up to ``channel.max_in_flight_per_partition`` records of a partition can be awaiting I/O at
once on a handful of threads, each batch holding the records of one key. With ``partition``
(and in recovery) a worker waits for each coroutine, as it waits for a synchronous batch, so
the processor works in every mode. The guarantees are those of the mode
(``docs/ordering.md``); every coroutine runs in its batch's tracing span.
"""

from __future__ import annotations

from abc import abstractmethod

from jetkafka.events import EventBatch, PartitionSource
from jetkafka.processors._base import BatchEventProcessor, BatchResponse


class AsyncBatchEventProcessor(BatchEventProcessor):
    """Base class of processors whose batches are coroutines (``async def on_next_batch``)."""

    @abstractmethod
    async def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:  # type: ignore[override]
        """Process ``events`` (awaiting I/O as needed) and say what comes next."""
