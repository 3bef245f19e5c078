"""Starting offsets of partitions nobody committed: found and committed in bulk, fenced."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._fetcher import Fetcher
from jetkafka.channel._start_offsets import commit_start_offsets
from jetkafka.config import JetkafkaConfig, parse_config
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from tests.support.channels import values
from tests.support.coordination import PATHS, two_clients


def channel_config(kafka_config: dict[str, Any], reset: str, **channel: Any) -> JetkafkaConfig:
    return parse_config(
        {
            "zookeeper": {"connect": "127.0.0.1:2181"},
            "kafka": kafka_config,
            "channel": {"group": "g", "topics": ["t"], "auto_offset_reset": reset, **channel},
        }
    )


def test_a_lost_partition_does_not_hold_up_the_others(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=3)
    produce(topic, values(30, 3))  # 10 events per partition
    fetcher = Fetcher(kafka_config, "g", lambda key: None, lambda state: None, BufferBudget(10, 1000))
    try:
        with two_clients(zk_connect) as (a, b):
            own_a, own_b = PartitionOwnership(a, PATHS, "a"), PartitionOwnership(b, PATHS, "b")
            own_a.prepare(topic)
            leases = own_a.take_many(topic, [0, 1, 2])
            assert [lease.partition for lease in leases] == [0, 1, 2]
            # Partition 1 changes hands before its first commit (its owner node went with a's
            # session, as far as b can tell): a's transaction for all three is refused.
            a.delete(PATHS.owner(topic, 1))
            assert own_b.take(topic, 1) is not None
            seen: list[tuple[tuple[str, int], int]] = []
            started = commit_start_offsets(
                leases, fetcher, OffsetStore(a, PATHS), channel_config(kafka_config, "latest"), lambda key, offset: seen.append((key, offset))
            )
            assert started == {(topic, 0): 10, (topic, 2): 10}
            assert sorted(seen) == sorted(started.items())
            store = OffsetStore(b, PATHS)
            assert (store.read(topic, 0), store.read(topic, 1), store.read(topic, 2)) == (10, None, 10)
            assert leases[1].committed is None
    finally:
        fetcher.stop()


def test_earliest_starts_at_the_low_watermark(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(20, 2))
    fetcher = Fetcher(kafka_config, "g", lambda key: None, lambda state: None, BufferBudget(10, 1000))
    try:
        with two_clients(zk_connect) as (a, _):
            own = PartitionOwnership(a, PATHS, "a")
            own.prepare(topic)
            leases = own.take_many(topic, [0, 1])
            started = commit_start_offsets(
                leases, fetcher, OffsetStore(a, PATHS), channel_config(kafka_config, "earliest"), lambda k, o: None
            )
            assert started == {(topic, 0): 0, (topic, 1): 0}
            assert fetcher.log_ends(topic, [0, 1], earliest=False) == {0: 10, 1: 10}
    finally:
        fetcher.stop()


def test_kafka_group_starts_where_that_group_committed_clamped_into_the_log(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=4)
    produce(topic, values(40, 4))  # 10 events per partition
    kafka_group = f"legacy-{uuid.uuid4().hex[:6]}"
    legacy = Consumer({**kafka_config, "group.id": kafka_group, "enable.auto.commit": False})
    # Partition 0 at 7, 1 at 0, 2 past the log end (clamped to 10), 3 never committed (earliest).
    legacy.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 0), TopicPartition(topic, 2, 25)], asynchronous=False)
    legacy.close()
    fetcher = Fetcher(kafka_config, "g", lambda key: None, lambda state: None, BufferBudget(10, 1000))
    config = channel_config(kafka_config, "kafka-group", start_kafka_group=kafka_group)
    try:
        with two_clients(zk_connect) as (a, _):
            own = PartitionOwnership(a, PATHS, "a")
            own.prepare(topic)
            leases = own.take_many(topic, [0, 1, 2, 3])
            started = commit_start_offsets(leases, fetcher, OffsetStore(a, PATHS), config, lambda k, o: None)
            assert started == {(topic, 0): 7, (topic, 1): 0, (topic, 2): 10, (topic, 3): 0}
            store = OffsetStore(a, PATHS)
            assert [store.read(topic, p) for p in range(4)] == [7, 0, 10, 0]
    finally:
        fetcher.stop()


def test_kafka_group_unreadable_starts_nothing(zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any) -> None:
    """A Kafka group that cannot be read gives no start offset at all, rather than a guess."""
    from jetkafka.kafka_groups import KafkaGroupError

    topic = topic_factory(partitions=1)
    fetcher = Fetcher(kafka_config, "g", lambda key: None, lambda state: None, BufferBudget(10, 1000))
    unreachable = {**kafka_config, "bootstrap.servers": "127.0.0.1:9"}
    config = channel_config(unreachable, "kafka-group", kafka_connection_timeout_s=2)
    try:
        with two_clients(zk_connect) as (a, _):
            own = PartitionOwnership(a, PATHS, "a")
            own.prepare(topic)
            leases = own.take_many(topic, [0])
            with pytest.raises(KafkaGroupError, match=r"jetkafka\.g .*bootstrap\.servers"):
                commit_start_offsets(leases, fetcher, OffsetStore(a, PATHS), config, lambda k, o: None)
            assert OffsetStore(a, PATHS).read(topic, 0) is None
    finally:
        fetcher.stop()
