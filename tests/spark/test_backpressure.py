"""While Spark runs micro-batch N, the channel gathers batch N+1 up to its bound, then stops fetching;
the bound is the backlog ceiling (``backlog_max_events``, 4 x ``max_events`` by default), or
``max_events`` itself when the ceiling is set to it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from examples.pipeline.events import generate_events, records
from jetkafka.channel import InboundChannel
from jetkafka.spark import SparkMicroBatchProcessor
from tests.support.channels import channel_config, wait_until

PRODUCED = 8_000
MAX_EVENTS = 1_000
THREADS = 2
# Not a divisor of MAX_EVENTS: a worker batch must be cut for a micro-batch to stop at its bound.
BATCH_MAX_EVENTS = 300
BUFFER_MAX_EVENTS = 600
PARTITIONS = 2
MAX_POLL = 1_000  # the fetcher's consume() size


class SlowFirstBatch:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.rows = 0
        self.sizes: list[int] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        if not self.entered.is_set():
            self.entered.set()
            assert self.go.wait(120), "the test never let the first batch finish"
        n = df.count()
        self.rows += n
        self.sizes.append(n)


@pytest.mark.parametrize("ceiling", [None, MAX_EVENTS], ids=["grows-under-backlog", "fixed-size"])
def test_memory_stays_bounded_while_spark_is_busy(
    spark: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, ceiling: int | None
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, records(generate_events(PRODUCED), PARTITIONS))
    fn = SlowFirstBatch()
    processor = SparkMicroBatchProcessor(
        fn, max_events=MAX_EVENTS, max_interval_ms=100, backlog_max_events=ceiling, spark=spark
    )
    bound = processor.bounds.ceiling_events
    assert bound == (4 * MAX_EVENTS if ceiling is None else MAX_EVENTS)
    config = channel_config(
        zk_connect, kafka_config, [topic], threads=THREADS, batch_max_events=BATCH_MAX_EVENTS,
        buffer_max_events=BUFFER_MAX_EVENTS,
    )
    channel = InboundChannel.from_dict(config, processor=processor)
    # The running batch (closed at max_events: Spark was free) and a full open one.
    held_bound = MAX_EVENTS + bound
    fetched_bound = held_bound + PARTITIONS * BUFFER_MAX_EVENTS + MAX_POLL
    assert fetched_bound < PRODUCED
    channel.start()
    try:
        assert fn.entered.wait(120)
        wait_until(lambda: processor.collector.open.events >= bound, timeout=60, what="the open batch to fill")
        fetcher = channel._fetcher
        assert fetcher is not None
        stalled = threading.Event()
        for _ in range(20):  # two seconds in which nothing may grow past its bound
            held = processor.stats()["held_events"]
            assert held <= held_bound, f"processor holds {held} events"
            assert fetcher.events_fetched <= fetched_bound, f"fetched {fetcher.events_fetched} events"
            stalled.wait(0.1)
        assert processor.stats()["events"] == 0  # nothing committed while the first batch runs
        fn.go.set()
        wait_until(lambda: processor.stats()["events"] == PRODUCED, timeout=120, what="every event committed")
    finally:
        fn.go.set()
        assert channel.shutdown()
    assert fn.rows == PRODUCED
    assert fn.sizes[0] <= MAX_EVENTS, fn.sizes  # closed with Spark free: at most max_events
    assert max(fn.sizes) == bound, fn.sizes  # gathered while Spark was busy: exactly at the bound
