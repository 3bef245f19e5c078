"""What the soak's processes run: recording processors that sometimes fail, and a Spark ``fn``.

* :class:`SoakRecorder`: a plain processor answering ``advance()`` per batch (and, with
  recovery on, the recovery processor too: its events are logged with the recovery mark);
* :class:`SimpleRecorder`: :class:`~jetkafka.SimpleKafkaProcessor` itself, in any of its
  ``auto_advance`` modes, with a handler that logs and sometimes fails;
* :func:`slice_writer`: the Spark micro-batch ``fn``;
* :class:`NeighbourCounter`: a neighbour subscription's processor in the row of subscriptions,
  which only counts, in a log of its own.

The first three append to one event log shared by every process of the run (one ``os.write``
per record on an ``O_APPEND`` descriptor, so lines of different processes never interleave). Lines beyond
those of :mod:`tests.support.event_log` (``D``, ``T``, ``X``)::

    R <pid> <time> <topic> <partition> <first offset> <events>     an injected failure
    P <pid> <time> <topic> <partition> <poison offset> <first offset>   an attempt failed on a poison
    E <pid> <time> <topic> <partition> <first offset> <start time>     a batch returned (then `` r``
                                                                       for a recovery batch)
    C <pid> <time> <topic> <partition> <offset> <outcome>     the processor's own commit of a batch's first half
    S <pid> <time> <batch id> <topic> <partition> <first> <last> <rows>   a Spark slice written

A :class:`SoakRecorder` follows the run's conditions (:mod:`tests.soak.conditions`): every
attempt of a batch holding a poisoned partition's poison raises (a ``P`` line, nothing
delivered), and a slow partition's batch is kept in hand for the condition's ``batch_s``.
With ``own_commit_every`` it also saves its progress itself now and then, as a sink that writes
in parts would: the first half of every Nth batch of a partition, committed with
:meth:`ChannelContext.commit` as the batch starts, while the previous batch's ``advance()``
usually still waits for ``commit_interval_ms`` (and must never land after it). Its
``E`` line, with the batch's start, lets the checker see two batches of one partition in hand
at once in one process.

Injected failures are seeded: the first attempt of a batch (or Spark micro-batch) raises when
a hash of ``(seed, topic, partition, first offset)`` (or ``(seed, batch id)``) falls under
``raise_rate``. The attempt that raises writes no ``D`` line, as a processor failing before its
output would: a retry that delivers the batch again is then its first delivery, so every
duplicate the checker sees near an ``R`` line is a real one.

Threads: ``on_next_batch`` (and a :class:`SimpleRecorder`'s handler) runs on the channel's
worker threads, one partition per thread at a time; the set of batches that already raised is
shared by them under a lock. ``on_start`` and
``on_stop`` run on the thread starting or stopping the channel (a hot deploy's watcher thread
for a resubscribe), when no batch runs. The Spark ``fn`` runs on the processor's driver thread.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource, SimpleKafkaProcessor
from jetkafka.processors._simple import AutoAdvance
from tests.soak.conditions import ConditionView
from tests.support.event_log import EventLogRecorder


class InjectedFailure(RuntimeError):
    """Raised on purpose by the soak, on the first attempt of a seeded share of batches."""


class PoisonedRecord(RuntimeError):
    """Raised on purpose by the soak, on every attempt of a batch holding a poisoned record."""


def chosen(seed: int, rate: float, *key: object) -> bool:
    """Whether the seeded draw for ``key`` falls under ``rate`` (the same in every process)."""
    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < rate * 2**64


class _FirstAttempts:
    """Which batches fail: the first attempt of each one whose seeded draw is under the rate."""

    def __init__(self, seed: int, rate: float) -> None:
        self._seed = seed
        self._rate = rate
        self._raised: set[tuple[str, int, int]] = set()
        self._lock = threading.Lock()

    def fails(self, topic: str, partition: int, first: int) -> bool:
        key = (topic, partition, first)
        if not self._rate or not chosen(self._seed, self._rate, *key):
            return False
        with self._lock:
            fresh = key not in self._raised
            self._raised.add(key)
        return fresh


class SoakRecorder(EventLogRecorder):
    """An :class:`EventLogRecorder` whose first attempt of a seeded share of batches raises,
    which follows the run's conditions (``conditions``: the path of ``conditions.json``), and,
    with ``own_commit_every`` N, commits the first half of every Nth batch of each partition
    itself as the batch starts."""

    def __init__(
        self,
        path: str,
        seed: int = 0,
        raise_rate: float = 0.0,
        delay_ms: int = 0,
        conditions: str | None = None,
        own_commit_every: int = 0,
        slow_key_record_s: float = 0.0,
    ) -> None:
        super().__init__(path, delay_ms=delay_ms)
        # Under ``ordering: key``: a slow partition is slow in one key only, ``k<partition>``
        # (the producer's keys are ``k<id % keys>``, ids round-robin over the partitions, so
        # that key's records all land in that partition), each of its records taking this long.
        self._slow_key_record_s = slow_key_record_s
        self._path = path
        self._failures = _FirstAttempts(seed, raise_rate)
        self._conditions = ConditionView(conditions) if conditions else None
        self._context: Any = None  # the ChannelContext of the current start
        self._own_commit_every = own_commit_every
        self._batches: dict[int, int] = {}

    def on_start(self, context: Any) -> None:
        self._context = context
        # A resubscribing hot deploy stops the channel (on_stop closed the log) and starts it
        # again with this same instance: the log must be open again before the first batch.
        # Left closed, its descriptor number would be reused by a new socket, and event lines
        # written there would both vanish from the log and corrupt that connection.
        if self._fd < 0:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def on_stop(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        now = time.time()  # before the draw: the stamp is the batch's start
        topic, partition, first = source.topic, source.partition, events[0].offset
        poison = self._conditions.poison(partition) if self._conditions is not None else None
        if poison is not None and first <= poison <= events[len(events) - 1].offset:
            self._write(f"P {self._pid} {now:.6f} {topic} {partition} {poison} {first}\n")
            raise PoisonedRecord(f"{topic}[{partition}] offset {poison}: poisoned record, fails on every attempt")
        if self._failures.fails(topic, partition, first):
            self._write(f"R {self._pid} {now:.6f} {topic} {partition} {first} {len(events)}\n")
            raise InjectedFailure(f"{topic}[{partition}] offset {first}: injected failure, first attempt")
        response = self.record(events, now)
        slow = self._conditions.slow_s(partition) if self._conditions is not None else 0.0
        if slow and self._slow_key_record_s:
            slow_key = f"k{partition}".encode()
            slow = self._delay + self._slow_key_record_s * sum(1 for e in events if e.key == slow_key)
        if self._own_commit_every and not events.recovery and self._own_commit_due(partition):
            # Saves its progress itself now and then: the first half of the batch is written.
            self._own_commit(topic, partition, events[len(events) // 2].offset)
        if slow > self._delay:
            time.sleep(slow - self._delay)  # kept in hand, as a slow sink would
        recovery = " r" if events.recovery else ""
        self._write(f"E {self._pid} {time.time():.6f} {topic} {partition} {first} {now:.6f}{recovery}\n")
        return response


    def _own_commit_due(self, partition: int) -> bool:
        # One worker holds a partition at a time: its count needs no lock.
        self._batches[partition] = self._batches.get(partition, 0) + 1
        return self._batches[partition] % self._own_commit_every == 0

    def _own_commit(self, topic: str, partition: int, offset: int) -> None:
        """Commit ``offset`` (the batch's records below it are done) under the current hold,
        through the processor's own :meth:`ChannelContext.commit`; a ``C`` line says how it went.
        Made as the batch starts, while the previous batch's ``advance()`` may still wait for
        ``commit_interval_ms``; this batch's ``advance()`` commits its end afterwards: the offset
        only goes forward."""
        key = (topic, partition)
        hold = self._context.hold(topic, partition) if self._context is not None else None
        outcome = "not-held"
        if hold is not None:
            try:
                self._context.commit({key: offset}, holds={key: hold})
                outcome = "ok"
            except Exception as exc:  # noqa: BLE001 - a refused or failed checkpoint is recorded; the batch goes on
                outcome = type(exc).__name__
        self._write(f"C {self._pid} {time.time():.6f} {topic} {partition} {offset} {outcome}\n")


class SimpleRecorder(SimpleKafkaProcessor):
    """:class:`SimpleKafkaProcessor` with a handler that logs each event (``D`` lines).

    The commit policy is the real one under test (``auto_advance``, ``interval_ms``); the
    handler logs the batch, keeps it ``delay_ms`` in hand, and on the first attempt of a seeded
    share of batches raises before logging anything (an ``R`` line), as a handler failing
    before its output would. In ``no-duplication`` mode such a batch is committed already and
    is not retried: its events are the ones the mode gives up.
    """

    def __init__(
        self,
        path: str,
        auto_advance: AutoAdvance = "every-batch",
        interval_ms: int = 5000,
        seed: int = 0,
        raise_rate: float = 0.0,
        delay_ms: int = 0,
    ) -> None:
        super().__init__(self._handle, auto_advance=auto_advance, interval_ms=interval_ms)
        self._path = path
        self._fd = -1
        self._pid = os.getpid()
        self._delay = delay_ms / 1000
        self._failures = _FirstAttempts(seed, raise_rate)

    def on_start(self, context: Any) -> None:
        if self._fd < 0:  # a resubscribe starts this same object again
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def on_stop(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _handle(self, events: EventBatch) -> None:
        first = events[0]
        if self._failures.fails(first.topic, first.partition, first.offset):
            os.write(self._fd, f"R {self._pid} {time.time():.6f} {first.topic} {first.partition} {first.offset} {len(events)}\n".encode())
            raise InjectedFailure(f"{first.topic}[{first.partition}] offset {first.offset}: injected failure, first attempt")
        now = time.time()
        os.write(
            self._fd,
            "".join(f"D {self._pid} {now:.6f} {e.topic} {e.partition} {e.offset} {(e.value or b'').decode()}\n" for e in events).encode(),
        )
        if self._delay:
            time.sleep(self._delay)


def slice_writer(path: str, log: str, seed: int = 0, raise_rate: float = 0.0) -> Callable[[Any, int], None]:
    """A Spark ``fn`` writing each event's id to a :class:`ParquetSink` at ``path``.

    Each write is followed by one ``S`` line per (topic, partition) slice it published in ``log``,
    timed when the write began (the publication comes after, within it); the first
    run of a seeded share of batch ids raises before writing (an ``R`` line with the batch id as
    partition ``-1``).
    """
    from pyspark.sql import functions as F

    from jetkafka.spark._sinks import ParquetSink

    sink = ParquetSink(path)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()
    raised: set[int] = set()

    def fn(df: Any, batch_id: int) -> None:
        if raise_rate and batch_id not in raised and chosen(seed, raise_rate, "batch", batch_id):
            raised.add(batch_id)
            os.write(fd, f"R {pid} {time.time():.6f} - -1 {batch_id} 0\n".encode())
            raise InjectedFailure(f"micro-batch {batch_id}: injected failure, first run")
        rows = df.select("topic", "partition", "offset", F.col("value").alias("id"))
        # Publication happens between these two instants: the earlier one is what the checker
        # compares with resets and expiries (a slice published after a reset is refused).
        started = time.time()
        publication = sink.write(rows, batch_id)
        published = publication.published_slices()
        ranges = rows.groupBy("topic", "partition").agg(
            F.min("offset").alias("first"), F.max("offset").alias("last"), F.count("*").alias("n")
        ).collect()
        os.write(
            fd,
            "".join(
                f"S {pid} {started:.6f} {batch_id} {r['topic']} {r['partition']} {r['first']} {r['last']} {r['n']}\n"
                for r in ranges
                if (r["topic"], r["partition"]) in published
            ).encode(),
        )

    return fn


class NeighbourCounter(BatchEventProcessor):
    """A neighbour subscription's processor (the matrix's row of subscriptions): it only
    counts, one line per batch in its own log, never in the run's event log::

        N <pid> <time> <group> <topic> <partition> <events>
    """

    def __init__(self, path: str, group: str) -> None:
        self._path = path
        self._group = group
        self._pid = os.getpid()
        self._fd = -1

    def on_start(self, context: Any) -> None:
        if self._fd < 0:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def on_stop(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        line = f"N {self._pid} {time.time():.6f} {self._group} {source.topic} {source.partition} {len(events)}\n"
        os.write(self._fd, line.encode())
        return BatchResponse.advance()
