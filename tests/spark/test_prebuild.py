"""The next micro-batch's DataFrame is built while Spark runs the current one, once the next is
full; it is used only for that micro-batch and only if its slices did not change.

The collector and the builder alone (a stand-in for Spark's build); no Spark, no broker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from jetkafka.spark._batch import Collector, MicroBatch
from jetkafka.spark._prebuild import NextDataFrame
from tests.spark.test_growth import CEILING, MAX_EVENTS, Feed, collector, take_now


class Builds:
    """Stands for the DataFrame build: notes each table's offsets; can be held in the middle."""

    def __init__(self) -> None:
        self.tables: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def __call__(self, table: pa.Table) -> Any:
        self.started.set()
        self.gate.wait(10)
        offsets = table.column("offset").to_pylist()
        self.tables.append(offsets)
        return ("df", offsets[0], offsets[-1], len(offsets))


@contextmanager
def builder(c: Collector) -> Iterator[tuple[NextDataFrame, Builds]]:
    builds = Builds()
    next_df = NextDataFrame(c, builds)
    next_df.start()
    try:
        yield next_df, builds
    finally:
        c.stop()
        next_df.stop(2.0)


def wait_for(predicate: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def busy_with_a_first_batch(c: Collector, feed: Feed) -> MicroBatch:
    feed.offer(MAX_EVENTS)
    first = take_now(c)  # Spark now runs it: the open micro-batch may grow to the ceiling
    assert first.events == MAX_EVENTS
    return first


def built_ahead(c: Collector, feed: Feed, builds: Builds) -> MicroBatch:
    """Spark busy with a first micro-batch (returned), the next one full and built ahead."""
    first = busy_with_a_first_batch(c, feed)
    assert feed.offer(CEILING) == CEILING
    wait_for(lambda: len(builds.tables) == 1, "the build ahead")
    return first


def test_a_full_micro_batch_is_built_while_spark_is_busy_and_used_once_taken() -> None:
    c = collector()
    with builder(c) as (next_df, builds):
        feed = Feed(c)
        first = busy_with_a_first_batch(c, feed)
        assert feed.offer(CEILING) == CEILING  # full at the ceiling
        wait_for(lambda: builds.tables, "the build ahead")
        assert builds.tables == [list(range(MAX_EVENTS, MAX_EVENTS + CEILING))]
        c.finished(first)
        second = take_now(c)
        df = next_df.take(second)
        assert df == ("df", MAX_EVENTS, MAX_EVENTS + CEILING - 1, CEILING)
        assert next_df.used == 1
        assert next_df.take(second) is None  # used once: a second attempt builds it anew


def test_nothing_is_built_ahead_of_a_micro_batch_still_growing_or_with_spark_free() -> None:
    c = collector()
    with builder(c) as (next_df, builds):
        feed = Feed(c)
        first = busy_with_a_first_batch(c, feed)
        feed.offer(CEILING - 1)  # not full: it may still grow
        time.sleep(0.3)
        assert builds.tables == []
        c.finished(first)
        feed.offer(1)  # Spark is free: the driver takes it at once, nothing to hide
        second = take_now(c)
        time.sleep(0.3)
        assert builds.tables == [] and next_df.take(second) is None


def test_a_micro_batch_that_lost_a_slice_since_its_build_is_built_again() -> None:
    c = collector()
    with builder(c) as (next_df, builds):
        feed = Feed(c)
        first = built_ahead(c, feed, builds)
        c.finished(first)
        second = take_now(c)
        second.drop(("t", 0))  # what the driver's prune does to a partition released meanwhile
        assert next_df.take(second) is None
        assert next_df.discarded == 1 and next_df.used == 0


def test_the_driver_waits_for_a_build_in_progress_rather_than_building_twice() -> None:
    c = collector()
    with builder(c) as (next_df, builds):
        builds.gate.clear()  # the build ahead is slow
        feed = Feed(c)
        first = busy_with_a_first_batch(c, feed)
        feed.offer(CEILING)
        assert builds.started.wait(5)
        c.finished(first)
        second = take_now(c)
        threading.Timer(0.2, builds.gate.set).start()
        df = next_df.take(second)
        assert df is not None and df[3] == CEILING
        assert len(builds.tables) == 1


def test_a_build_ahead_for_another_micro_batch_is_not_handed_to_a_replay() -> None:
    c = collector()
    with builder(c) as (next_df, builds):
        feed = Feed(c)
        first = built_ahead(c, feed, builds)
        replay = MicroBatch(7)
        assert next_df.take(replay) is None
        c.finished(first)
        assert next_df.take(take_now(c)) is not None  # still there for its own micro-batch


def test_a_micro_batch_that_changed_after_its_build_is_built_again_once_full() -> None:
    c = collector()
    with builder(c) as (next_df, builds):
        feed = Feed(c)
        first = built_ahead(c, feed, builds)
        c.forget(("t", 0))  # released meanwhile: the open micro-batch loses its only slice
        c.register(("t", 0), feed.hold, None)  # taken again, from a new registration
        feed.offer(CEILING)
        wait_for(lambda: len(builds.tables) == 2, "the second build ahead")
        c.finished(first)
        second = take_now(c)
        assert next_df.take(second) == ("df", MAX_EVENTS + CEILING, MAX_EVENTS + 2 * CEILING - 1, CEILING)


def test_what_was_built_for_a_micro_batch_that_ended_without_running_is_let_go() -> None:
    c = collector()
    with builder(c) as (next_df, builds):
        feed = Feed(c)
        first = built_ahead(c, feed, builds)
        c.finished(first)
        second = take_now(c)
        next_df.discard(second)  # the driver's prune emptied it: it never reaches take()
        assert next_df.take(second) is None
        assert next_df.used == 0 and next_df.discarded == 0


def test_the_builder_ends_with_its_collector() -> None:
    c = collector()
    next_df = NextDataFrame(c, Builds())
    next_df.start()
    c.stop()  # what the driver's stop does first, before it waits for fn
    thread = next_df._thread
    assert thread is not None
    thread.join(2.0)
    assert not thread.is_alive()
