"""The channel-wide buffer budget: how much fetched data the channel holds, and who is over its share.

Every owned partition has a *share* of the budget (``buffer_max_events`` and
``buffer_max_bytes``); the budget is the sum of the shares. Memory stays bounded by it: when the
buffers together reach it, the fetcher stops polling, and librdkafka's own queue is bounded
(``queued.max.messages.kbytes``), so fetching from the broker stops too and nothing fetched is
thrown away.

A partition may fetch beyond its share (*borrow*) into room no other partition wants: one hot
partition among idle ones gets the whole budget. Which partitions want room and what a
borrower gives back is :mod:`jetkafka.channel._shares`; the budget only counts, and keeps the
number of buffers over their share (:attr:`BufferBudget.over_share`), so that nothing is
evaluated while every partition stays within its share.

A wait downstream (:meth:`BufferBudget.waiting_downstream`, which a processor's
:meth:`~jetkafka.channel.ChannelContext.waiting_downstream` enters, e.g. the Spark micro-batch
collector waiting for the driver) means every partition waits for the same sink: the budget is
spent because of it and not because of one partition, and a pause would only throw away what
librdkafka fetched ahead. A wait excuses a draining partition beyond its share until it is back
within it (:meth:`~jetkafka.channel._buffer.PartitionBuffer.excused`); a partition that cannot
drain (paused, halted, failing) is never excused.

Threads: the fetcher adds and waits for room, the workers remove and wait downstream, the log-end
watch pokes; every method may be called from any thread.
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
        self._over_share = 0  # buffers now beyond their own share
        self._downstream_waits = 0  # waits for a sink every partition shares, begun ever
        self._downstream_waits_ended = 0
        self._poked = False
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

    def share_crossed(self, over: bool) -> None:
        """A buffer went beyond its share (``over``) or came back within it."""
        with self._cond:
            self._over_share += 1 if over else -1

    @property
    def over_share(self) -> int:
        """How many buffers are beyond their own share now (a value at worst one step old)."""
        return self._over_share

    def spent(self) -> bool:
        """Whether the buffers together have reached the budget (the fetcher waits for room)."""
        with self._cond:
            return self._full()

    def wait_for_room(self, timeout: float) -> bool:
        """Block while the budget is spent, until room is made or :meth:`poke`; True when
        there is room."""
        with self._cond:
            if self._full() and not self._poked:
                self._cond.wait(timeout)
            self._poked = False
            return not self._full()

    def poke(self) -> None:
        """Wake the fetcher waiting for room to look again: a partition may want room now
        (the log-end watch found records waiting for it)."""
        with self._cond:
            self._poked = True
            self._cond.notify_all()

    @contextmanager
    def waiting_downstream(self) -> Iterator[None]:
        """Any worker, around a wait for a sink all partitions share: no draining partition
        then beyond its share gives room back for it until it is back within it (see the
        module docstring)."""
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
