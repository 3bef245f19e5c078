"""Start-up failures a user can cause: each is one clear error naming cause and fix."""

from __future__ import annotations

import socket

import pytest

from jetkafka import ConnectError, InboundChannel, TopicNotFound
from tests.support.channels import RecordingProcessor, channel_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_missing_topic_names_the_topic_and_the_fix(zk_connect, kafka_config) -> None:
    channel = InboundChannel.from_dict(
        channel_config(zk_connect, kafka_config, ["no-such-topic"]), processor=RecordingProcessor()
    )
    with pytest.raises(TopicNotFound) as info:
        channel.start()
    assert "'no-such-topic' does not exist" in str(info.value)
    assert "channel.topics" in str(info.value)
    assert not channel.running


def test_static_partition_that_does_not_exist(zk_connect, kafka_config, topic_factory) -> None:
    topic = topic_factory(partitions=2)
    config = channel_config(zk_connect, kafka_config, [topic], coordinator="static", partitions={topic: [1, 5]})
    channel = InboundChannel.from_dict(config, processor=RecordingProcessor())
    with pytest.raises(TopicNotFound) as info:
        channel.start()
    message = str(info.value)
    assert "[5]" in message and "has 2 partitions" in message and "channel.partitions" in message


def test_unreachable_zookeeper(kafka_config) -> None:
    config = channel_config(f"127.0.0.1:{free_port()}", kafka_config, ["t"])
    config["zookeeper"]["connection_timeout_s"] = 1
    channel = InboundChannel.from_dict(config, processor=RecordingProcessor())
    with pytest.raises(ConnectError) as info:
        channel.start()
    assert "cannot reach ZooKeeper" in str(info.value)
    assert "zookeeper.connect" in str(info.value)


def test_unreachable_broker(zk_connect) -> None:
    kafka = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "socket.connection.setup.timeout.ms": 1000}
    config = channel_config(zk_connect, kafka, ["t"], kafka_connection_timeout_s=2)
    channel = InboundChannel.from_dict(config, processor=RecordingProcessor())
    with pytest.raises(ConnectError) as info:
        channel.start()
    assert "cannot reach Kafka" in str(info.value)
    assert "kafka.bootstrap.servers" in str(info.value)
