"""What an instance's registration says about it, as ``jetkafka status`` shows it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jetkafka.config import parse_config
from jetkafka.ops._status import group_status
from tests.support.channels import RecordingProcessor, channel_config, make_channel, wait_until


def test_start_time_survives_pause_and_resume(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    config = parse_config(channel_config(zk_connect, kafka_config, [topic]))
    channel = make_channel(zk_connect, kafka_config, topic, RecordingProcessor())
    channel.start()
    try:
        wait_until(lambda: len(channel.owned_partitions()) == 2, what="both partitions owned")
        (first,) = group_status(config).instances
        assert not first.paused
        time.sleep(1.2)  # a start time taken anew would now differ by more than a second
        channel.pause()
        (paused,) = group_status(config).instances
        channel.resume()
        (resumed,) = group_status(config).instances
    finally:
        channel.shutdown()
    assert paused.paused and not resumed.paused
    assert (paused.started, paused.since) == (first.started, first.since)
    assert (resumed.started, resumed.since) == (first.started, first.since)
    assert first.started <= time.time() - 1.2
