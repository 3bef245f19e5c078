"""Micro-batches grow while Spark is busy and close small once the group has caught up.

The collector alone, driven as the workers and the driver thread drive it; no Spark, no broker.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from jetkafka.spark._arrow import EVENT_SCHEMA
from jetkafka.spark._batch import Bounds, Collector, MicroBatch
from jetkafka.spark._microbatch import SparkMicroBatchProcessor

KEY = ("t", 0)
MAX_EVENTS = 100
CEILING = 400
LONG_INTERVAL_MS = 60_000  # no micro-batch here closes by its interval unless a test says so


def events(first: int, n: int) -> pa.RecordBatch:
    """``n`` events of partition 0 from offset ``first``."""
    offsets = list(range(first, first + n))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["t"] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([None] * n, pa.timestamp("ms", tz="UTC")),
            pa.array([None] * n, pa.binary()),
            pa.array([b"v"] * n, pa.binary()),
            pa.nulls(n, EVENT_SCHEMA.field("headers").type),
        ],
        schema=EVENT_SCHEMA,
    )


class Feed:
    """One partition's events offered to the collector as a worker offers them, 10 at a time."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.next = 0
        self.hold = SimpleNamespace(committed=0, offset_version=0)
        collector.register(KEY, self.hold, None)  # type: ignore[arg-type]

    def offer(self, n: int) -> int:
        """Add up to ``n`` events without waiting; how many the open micro-batch took."""
        taken = 0
        while taken < n:
            chunk = events(self.next, min(10, n - taken))
            rest = self.collector.add_open(KEY, chunk, self.next + chunk.num_rows - 1)
            took = chunk.num_rows - (0 if rest is None else rest.num_rows)
            self.next += took
            taken += took
            if rest is not None:
                break
        return taken


def collector(max_events: int = MAX_EVENTS, ceiling: int = CEILING, interval_ms: int = LONG_INTERVAL_MS) -> Collector:
    return Collector(Bounds(max_events, 1 << 40, interval_ms, ceiling))


def take_now(c: Collector) -> Any:
    """The driver's next micro-batch, failing if it does not close within a second."""
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(c.take()), daemon=True)
    thread.start()
    thread.join(1.0)
    if thread.is_alive():
        c.stop()
        thread.join(1.0)
        pytest.fail("the driver found no micro-batch to take within 1 s")
    return got[0]


def test_with_the_driver_free_a_micro_batch_closes_at_max_events() -> None:
    c = collector()
    feed = Feed(c)
    assert feed.offer(250) == MAX_EVENTS  # the rest waits for room
    assert c.is_full()
    batch = take_now(c)
    assert batch.events == MAX_EVENTS
    assert (batch.slices[KEY].start, batch.slices[KEY].end) == (0, MAX_EVENTS)


def test_while_the_driver_runs_a_micro_batch_the_next_one_grows_to_the_ceiling() -> None:
    c = collector()
    feed = Feed(c)
    feed.offer(MAX_EVENTS)
    running = take_now(c)
    # Spark is busy with the first one: the open one goes past max_events, up to the ceiling.
    assert feed.offer(1_000) == CEILING
    assert c.is_full()
    assert c.sizes()[0] == MAX_EVENTS + CEILING  # what memory holds: the running and the open one
    c.finished(running)
    # The driver is free again: the grown batch is over max_events, so it is taken at once.
    grown = take_now(c)
    assert grown.events == CEILING
    assert (grown.slices[KEY].start, grown.slices[KEY].end) == (MAX_EVENTS, MAX_EVENTS + CEILING)


def test_a_grown_batch_is_taken_when_the_driver_is_free_even_below_the_ceiling() -> None:
    c = collector()
    feed = Feed(c)
    feed.offer(MAX_EVENTS)
    running = take_now(c)
    assert feed.offer(250) == 250  # more than max_events, less than the ceiling
    assert not c.is_full()
    c.finished(running)
    assert c.is_full()  # free again: the bound is max_events, which it passed
    assert take_now(c).events == 250


def test_a_group_that_caught_up_gets_small_micro_batches_closed_by_the_interval() -> None:
    c = collector(interval_ms=200)
    feed = Feed(c)
    feed.offer(MAX_EVENTS)
    running = take_now(c)
    feed.offer(30)  # what arrived while Spark ran: the group has caught up
    c.finished(running)
    started = time.monotonic()
    small = take_now(c)
    assert small.events == 30
    assert time.monotonic() - started < 1.0


def test_a_ceiling_equal_to_max_events_keeps_micro_batches_of_a_fixed_size() -> None:
    c = collector(ceiling=MAX_EVENTS)
    feed = Feed(c)
    feed.offer(MAX_EVENTS)
    running = take_now(c)
    assert feed.offer(1_000) == MAX_EVENTS
    c.finished(running)
    assert take_now(c).events == MAX_EVENTS


def test_the_ceiling_defaults_to_four_times_max_events_and_may_not_be_below_it() -> None:
    def noop(df: Any, batch_id: int) -> None:
        pass

    assert SparkMicroBatchProcessor(noop, max_events=50_000).bounds.ceiling_events == 200_000
    assert SparkMicroBatchProcessor(noop, max_events=10, backlog_max_events="10").bounds.ceiling_events == 10
    with pytest.raises(ValueError, match=r"backlog_max_events must be >= max_events \(50\), got 20; set it to 50"):
        SparkMicroBatchProcessor(noop, max_events=50, backlog_max_events=20)



def test_a_released_partition_waiting_for_the_open_batch_stops_its_growth() -> None:
    c = collector()
    feed = Feed(c)
    feed.offer(MAX_EVENTS)
    running = take_now(c)
    feed.offer(150)  # grown past max_events while Spark is busy
    settled = threading.Thread(target=lambda: c.settle(KEY, 0.3), daemon=True)
    settled.start()  # a release asks for the open batch to close now
    time.sleep(0.05)
    assert feed.offer(1_000) == 0  # no more growth: that release waits for this batch
    settled.join(2)
    c.finished(running)
    assert take_now(c).events == 150


def test_a_replay_taken_by_the_driver_lets_waiting_workers_fill_the_open_batch_at_once() -> None:
    c = collector()
    feed = Feed(c)
    feed.offer(MAX_EVENTS)  # full while the driver is free: a worker would wait for room
    assert c.is_full()
    c.ready.append(MicroBatch(7))  # a complete replay, which the driver runs first
    woke = threading.Event()

    def worker() -> None:
        c.wait_for_room()
        woke.set()

    threading.Thread(target=worker, daemon=True).start()
    time.sleep(0.05)
    assert take_now(c).batch_id == 7
    assert woke.wait(0.3), "the worker slept out its poll instead of being woken"
