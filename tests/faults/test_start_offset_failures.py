"""Partitions a rebalance took but the channel could not start: given up, taken again, processed.

Injected: the look-up of where never-committed partitions start (``Fetcher.log_ends``, one
ListOffsets request per topic, then one per partition) fails with ``ConnectError`` for its first calls on the channel
under test, as it does when the broker is slow or unreachable at that moment.
Asserted: no partition stays owned and unprocessed. Each failure is logged once as an ERROR
naming the partitions; the partitions are given up (owner nodes deleted), taken again after a
back-off without any timer rebalance (``rebalance_interval_s`` is an hour), and every event
is processed exactly once.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from kazoo.client import KazooClient

from jetkafka import InboundChannel, parse_config
from tests.support.channels import RecordingProcessor, channel_config, values
from tests.support.group_watch import owners
from tests.support.load import delivery_report, wait_for

PARTITIONS = 4
EVENTS = 400


class LogEndsFailing:
    """Stands for the channel's metadata consumer (as its ``wrap_consumer``): its first
    ``times`` look-ups of log ends fail as an unreachable broker's do, the batch look-up and
    the per-partition fallback alike, so the channel sees ``ConnectError``."""

    def __init__(self, times: int) -> None:
        self._left = times
        self._failing = False
        self._consumer: Any = None
        self.calls = 0

    def __call__(self, consumer: Any, role: str) -> Any:
        if role != "metadata":
            return consumer
        self._consumer = consumer
        return self

    def offsets_for_times(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self._failing = self._left > 0
        if self._failing:
            self._left -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected time-out"))
        return self._consumer.offsets_for_times(*args, **kwargs)

    def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> Any:
        if self._failing:
            self._failing = False
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected time-out"))
        return self._consumer.get_watermark_offsets(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_partitions_whose_start_offset_cannot_be_looked_up_are_given_up_and_taken_again(
    zk: KazooClient,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory,
    produce,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, values(EVENTS, PARTITIONS))
    config = channel_config(
        zk_connect, kafka_config, [topic], auto_offset_reset="earliest", rebalance_interval_s=3600
    )
    processor = RecordingProcessor()
    # The fault sits on the channel's boundary to the broker.
    failing = LogEndsFailing(times=2)
    channel = InboundChannel(parse_config(config), processor, wrap_consumer=failing)
    channel.start()
    try:
        took = wait_for(lambda: len(processor.ids()) >= EVENTS, 60, "every event processed")
        wait_for(lambda: channel.owned_partitions() == [(topic, p) for p in range(PARTITIONS)], 10, "all owned")
        assert owners(zk, topic) == {p: channel.consumer_id for p in range(PARTITIONS)}
    finally:
        channel.shutdown()
    report = delivery_report(processor.ids(), range(EVENTS))
    assert report.exactly_once, str(report)
    assert processor.violations == []
    assert failing.calls >= 3  # two failed, then one per group of partitions taken again
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    given_up = [r.getMessage() for r in errors if "cannot look up where" in r.getMessage()]
    assert len(given_up) == 2, [r.getMessage() for r in errors]
    assert all(f"{topic}[0]" in m and "ConnectError" in m and "taken again" in m for m in given_up)
    assert not [r for r in errors if "rebalance of" in r.getMessage()], "the failure escaped the channel"
    print(f"{EVENTS} events processed once, {took:.1f} s after start, through 2 failed look-ups")
