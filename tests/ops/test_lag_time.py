"""Lag in seconds from a partition's buffer head and its cached watermarks (no servers needed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from jetkafka.devstack._ports import free_port
from jetkafka.ops._lag_time import LagClock
from tests.ops.test_metrics import GatedProcessor, eventually, metrics_channel
from tests.support.channels import wait_until
from tests.support.scrape import scrape, value

KEY = ("t", 0)
NOW = 1_700_000_000.0


def lag(clock: LagClock, now: float = NOW, **state: object) -> float | None:
    defaults: dict[str, object] = {
        "position": 10,
        "buffered": 0,
        "next_timestamp_ms": None,
        "high_watermark": 10,
        "checked_at": NOW - 1,
    }
    defaults.update(state)
    return clock.lag_seconds(KEY, now=now, **defaults)  # type: ignore[arg-type]


def test_the_age_of_the_next_buffered_record() -> None:
    clock = LagClock()
    assert lag(clock, buffered=5, next_timestamp_ms=int((NOW - 90) * 1000), high_watermark=15) == pytest.approx(90)


def test_a_timestamp_ahead_of_our_clock_reads_as_no_lag() -> None:
    # CreateTime from a producer whose clock runs ahead.
    assert lag(LagClock(), buffered=1, next_timestamp_ms=int((NOW + 30) * 1000)) == 0.0


def test_caught_up_is_zero() -> None:
    assert lag(LagClock(), position=10, high_watermark=10) == 0.0
    assert lag(LagClock(), position=12, high_watermark=10) == 0.0  # the cached watermark is older


def test_behind_with_nothing_buffered_counts_from_when_it_was_last_caught_up() -> None:
    clock = LagClock()
    assert lag(clock, position=10, high_watermark=10, checked_at=NOW - 5) == 0.0
    # Paused: 4 more records in Kafka, none fetched; every one came after NOW - 5.
    assert lag(clock, now=NOW + 60, position=10, high_watermark=14, checked_at=NOW + 59) == pytest.approx(65)
    assert lag(clock, now=NOW + 120, position=10, high_watermark=14, checked_at=NOW + 119) == pytest.approx(125)


def test_behind_with_nothing_buffered_counts_from_the_last_head_seen() -> None:
    clock = LagClock()
    head = NOW - 30
    assert lag(clock, buffered=3, next_timestamp_ms=int(head * 1000), high_watermark=13) == pytest.approx(30)
    assert lag(clock, now=NOW + 10, position=12, high_watermark=13) == pytest.approx(40)


def test_unknown_until_the_first_observation_and_after_the_partition_is_given_up() -> None:
    clock = LagClock()
    assert lag(clock, position=10, high_watermark=None, checked_at=None) is None
    assert lag(clock, position=3, high_watermark=10) is None  # behind, nothing fetched, never seen
    assert lag(clock, position=10, high_watermark=10) == 0.0
    clock.keep_only([("t", 1)])
    assert lag(clock, position=3, high_watermark=10) is None


# -- on a real ZooKeeper and broker, through the metrics endpoint --------------------------------


def produce_at(kafka_config: dict[str, Any], topic: str, count: int, timestamp_ms: int) -> None:
    """``count`` records to partition 0 with the given CreateTime."""
    producer = Producer({**kafka_config, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=0, timestamp=timestamp_ms)
    assert producer.flush(30) == 0


def test_lag_seconds_is_the_age_of_the_next_record_then_zero_once_caught_up(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1)
    port = free_port()
    processor = GatedProcessor()
    channel = metrics_channel(zk_connect, kafka_config, topic, processor, port)
    labels = {"group": "g", "topic": topic, "partition": 0}
    channel.start()
    try:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition taken")
        eventually(port, lambda s: value(s, "jetkafka_partition_lag_seconds", **labels) == 0, "lag 0 on an empty topic")

        # One record that the processor takes and holds; behind it, records created 2 minutes ago.
        produce_at(kafka_config, topic, 1, int(time.time() * 1000))
        assert processor.entered.wait(30)
        created = time.time() - 120
        produce_at(kafka_config, topic, 5, int(created * 1000))
        samples = eventually(
            port, lambda s: (value(s, "jetkafka_partition_lag_seconds", **labels) or 0) >= 119, "lag of about 2 min"
        )
        assert value(samples, "jetkafka_partition_lag_seconds", **labels) <= time.time() - created + 1
        eventually(port, lambda s: value(s, "jetkafka_partition_lag", **labels) == 6, "6 records behind")

        processor.gate.set()
        eventually(port, lambda s: value(s, "jetkafka_partition_lag", **labels) == 0, "every record processed")
        eventually(port, lambda s: value(s, "jetkafka_partition_lag_seconds", **labels) == 0, "lag 0 again")

        # Paused: new records are not fetched, so no timestamp is at hand; the lag counts from
        # the last moment the partition was seen caught up, and keeps rising.
        channel.pause()
        wait_until(lambda: all(p.paused for p in channel.partitions()), what="paused")
        paused_at = time.time()
        produce_at(kafka_config, topic, 3, int(time.time() * 1000))
        eventually(port, lambda s: value(s, "jetkafka_partition_lag", **labels) == 3, "3 records behind")
        time.sleep(2)
        first = value(scrape(port), "jetkafka_partition_lag_seconds", **labels)
        assert first is not None and 2 <= first <= time.time() - paused_at + 1
        time.sleep(1)
        second = value(scrape(port), "jetkafka_partition_lag_seconds", **labels)
        assert second is not None and second >= first + 0.9

        channel.resume()
        eventually(port, lambda s: value(s, "jetkafka_partition_lag", **labels) == 0, "caught up after resume")
        eventually(port, lambda s: value(s, "jetkafka_partition_lag_seconds", **labels) == 0, "lag 0 after resume")
        assert processor.processed == 9
    finally:
        processor.gate.set()
        channel.resume()
        channel.shutdown()
