"""Processors of the ordering benchmark: simulated I/O per record, and what proves the run right.

Every record sleeps its own delay, looked up by offset in a table drawn once from a seeded
generator (:func:`delays`: uniform in ``[0, max_delay_s)``), so each mode processes the same
work; the look-up costs nothing next to the sleep. :class:`OrderCheck` records, for every record, when it finished and which keys
were in flight together; the benchmark reads it to say whether the run kept its mode's promise.

- :class:`SleepingProcessor`: ``time.sleep`` per record (a synchronous processor; parallelism
  is ``channel.threads``).
- :class:`AsyncSleepingProcessor`: ``await asyncio.sleep`` per record (parallelism is
  ``channel.max_in_flight_per_partition`` under ``key`` and ``none``).
- :class:`RecordingSleeper`: a :class:`SleepingProcessor` for ``jetkafka run`` children that
  appends ``pid partition offset key`` per finished record to a shared file.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Hashable

from jetkafka.events import EventBatch, PartitionSource
from jetkafka.processors._async import AsyncBatchEventProcessor
from jetkafka.processors._base import BatchEventProcessor, BatchResponse

_ADVANCE = BatchResponse.advance()


def delays(seed: int, count: int, max_delay_s: float) -> list[float]:
    """The simulated I/O time of the records at offsets ``0 .. count - 1``: the same in every
    mode and every run with ``seed``."""
    rng = random.Random(seed)
    return [rng.uniform(0.0, max_delay_s) for _ in range(count)]


class OrderCheck:
    """What a run did, record by record: completion order per key, and overlapping keys.

    ``overlaps`` counts batches that began while another batch held one of their keys: under
    ``key`` (and ``partition``) that must never happen.
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.done = threading.Event()
        self.order: list[tuple[int, int, Hashable]] = []  # (partition, offset, key) as they finished
        self.overlaps = 0
        self.batches = 0
        self.first: float | None = None
        self.last: float | None = None
        self._busy: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def begin(self, keys: set[Hashable]) -> None:
        with self._lock:
            self.batches += 1
            if self.first is None:
                self.first = time.perf_counter()
            for key in keys:
                held = self._busy.get(key, 0)
                if held:
                    self.overlaps += 1
                self._busy[key] = held + 1

    def finished(self, partition: int, offset: int, key: Hashable) -> None:
        with self._lock:
            self.order.append((partition, offset, key))
            if len(self.order) >= self.target and not self.done.is_set():
                self.last = time.perf_counter()
                self.done.set()

    def end(self, keys: set[Hashable]) -> None:
        with self._lock:
            for key in keys:
                self._busy[key] -= 1


def _keys(events: EventBatch, per_record: bool) -> set[Hashable]:
    # Under ``none`` records are independent: the offset is the key of the overlap check.
    return {e.offset if per_record else e.key for e in events}


class SleepingProcessor(BatchEventProcessor):
    """``time.sleep(delay)`` per record, in offset order within the batch."""

    def __init__(self, check: OrderCheck, delays: list[float], per_record_keys: bool = False) -> None:
        self.check, self.delays = check, delays
        self.per_record_keys = per_record_keys

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        keys = _keys(events, self.per_record_keys)
        self.check.begin(keys)
        try:
            for e in events:
                time.sleep(self.delays[e.offset % len(self.delays)])
                self.check.finished(e.partition, e.offset, e.key)
        finally:
            self.check.end(keys)
        return _ADVANCE


class AsyncSleepingProcessor(AsyncBatchEventProcessor):
    """``await asyncio.sleep(delay)`` per record, in offset order within the batch."""

    def __init__(self, check: OrderCheck, delays: list[float], per_record_keys: bool = False) -> None:
        self.check, self.delays = check, delays
        self.per_record_keys = per_record_keys

    async def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:  # type: ignore[override]
        keys = _keys(events, self.per_record_keys)
        self.check.begin(keys)
        try:
            for e in events:
                await asyncio.sleep(self.delays[e.offset % len(self.delays)])
                self.check.finished(e.partition, e.offset, e.key)
        finally:
            self.check.end(keys)
        return _ADVANCE


class RecordingSleeper(BatchEventProcessor):
    """``time.sleep(delay_s)`` per record; appends ``pid partition offset key`` for each finished
    record to ``path`` (one ``write`` per batch: lines of concurrent batches never interleave)."""

    def __init__(self, path: str, delay_s: float) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = os.getpid()
        self._delay_s = delay_s

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        lines = []
        for e in events:
            time.sleep(self._delay_s)
            key = (e.key or b"-").decode()
            lines.append(f"{self._pid} {e.partition} {e.offset} {key}\n")
        os.write(self._fd, "".join(lines).encode())
        return _ADVANCE

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        return _ADVANCE

    def on_stop(self) -> None:
        os.close(self._fd)
