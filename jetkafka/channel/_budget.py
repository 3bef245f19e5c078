"""The channel-wide buffer budget.

Backpressure without waste: when the buffers of all owned partitions together reach their
budget, the fetcher stops polling; librdkafka's own queue is bounded
(``queued.max.messages.kbytes``), so fetching from the broker stops too and nothing fetched is
thrown away. Pausing a partition in librdkafka discards what it pre-fetched for it, so that is
kept for a partition far beyond its own share (a slow processor among fast ones) while the
budget is spent, so that the others' events can flow again.
"""

from __future__ import annotations

import threading


class BufferBudget:
    def __init__(self, events_per_partition: int, bytes_per_partition: int) -> None:
        self._per_events = events_per_partition
        self._per_bytes = bytes_per_partition
        self._partitions = 0
        self._events = 0
        self._bytes = 0
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

    @property
    def buffered(self) -> tuple[int, int]:
        return self._events, self._bytes
