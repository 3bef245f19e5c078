"""The channel-wide buffer budget.

Backpressure without waste: when the buffers of all owned partitions together reach their
budget, the fetcher stops polling; librdkafka's own queue is bounded
(``queued.max.messages.kbytes``), so fetching from the broker stops too and nothing fetched is
thrown away. Pausing a partition in librdkafka discards what it pre-fetched for it, so that is
kept for a partition far beyond its own share (a slow processor among fast ones) while the
budget is spent, so that the others' events can flow again.

Such a pause is held back when a worker waits downstream (:meth:`BufferBudget.waiting_downstream`,
which a processor's :meth:`~jetkafka.channel.ChannelContext.waiting_downstream` enters, e.g. the
Spark micro-batch collector waiting for the driver): then every partition waits for the same
sink, the budget is spent because of it and not because of one partition, and a pause would
only throw away what librdkafka fetched ahead for that partition, to fetch it again on resume.
A wait excuses every partition then beyond its share until it is back within it (between two
waits the worker converts and hands over the next batch, and the buffers refill at once: a
pause taken then would throw away just as much). A partition that goes beyond its share again
with no wait since is the slow one, and is paused as before
(:meth:`~jetkafka.channel._buffer.PartitionBuffer.append`).

Threads: the fetcher adds and waits for room, the workers remove and wait downstream; every
method may be called from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class BufferBudget:
    def __init__(self, events_per_partition: int, bytes_per_partition: int) -> None:
        self._per_events = events_per_partition
        self._per_bytes = bytes_per_partition
        self._partitions = 0
        self._events = 0
        self._bytes = 0
        self._downstream_waits = 0  # waits for a sink every partition shares, begun ever
        self._downstream_waits_ended = 0
        self._cond = threading.Condition()

    def set_partitions(self, count: int) -> None:
        with self._cond:
            self._partitions = count
            self._cond.notify_all()

    def _full(self) -> bool:
        n = max(1, self._partitions)
        return self._events >= n * self._per_events or self._bytes >= n * self._per_bytes

    def added(self, events: int, size: int) -> None:
        with self._cond:
            self._events += events
            self._bytes += size

    def removed(self, events: int, size: int) -> None:
        with self._cond:
            was_full = self._full()
            self._events -= events
            self._bytes -= size
            if was_full and not self._full():
                self._cond.notify_all()

    def spent(self) -> bool:
        """Whether the buffers together have reached the budget (the fetcher waits for room)."""
        with self._cond:
            return self._full()

    def wait_for_room(self, timeout: float) -> bool:
        """Block while the budget is spent; True when there is room."""
        with self._cond:
            if self._full():
                self._cond.wait(timeout)
            return not self._full()

    @contextmanager
    def waiting_downstream(self) -> Iterator[None]:
        """Any worker, around a wait for a sink all partitions share: no partition then beyond
        its share is paused for it until it is back within it (see the module docstring)."""
        with self._cond:
            self._downstream_waits += 1
        try:
            yield
        finally:
            with self._cond:
                self._downstream_waits_ended += 1

    @property
    def downstream_waits(self) -> int:
        """How many waits downstream have begun since the budget was made."""
        return self._downstream_waits

    @property
    def downstream_waits_ended(self) -> int:
        """How many of them have ended: fewer than have begun by any later time means a wait
        was in progress then or began since."""
        return self._downstream_waits_ended

    @property
    def buffered(self) -> tuple[int, int]:
        return self._events, self._bytes
