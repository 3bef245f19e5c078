"""commit_to_kafka against real brokers: the mirror is batched per commit_interval_ms, ends at
exactly ZooKeeper's offsets, and a broker that refuses its commits is counted and logged once.

The refusing broker is Tansu (tests/kafka_groups/conftest.py): a plain consumer subscribed with
the mirror's group id is a live member there, and Kafka refuses offsets written from outside a
group that has members. The channel's ZooKeeper is the shared test ZooKeeper either way.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from jetkafka import InboundChannel
from jetkafka.kafka_groups._mirror import MirrorSnapshot
from jetkafka.ops._metrics import ChannelMetrics, JetkafkaCollector
from tests.support.channels import RecordingProcessor, committed_offsets, make_channel, values, wait_until

INTERVAL_MS = 100


def kafka_group_offsets(config: dict[str, Any], group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as Kafka keeps them (what kafka-consumer-groups shows)."""
    admin = AdminClient(config)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    answer = admin.list_consumer_group_offsets([request])[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in answer.topic_partitions}


def mirror_of(channel: InboundChannel) -> MirrorSnapshot:
    snapshot = channel.kafka_mirror()
    assert snapshot is not None
    return snapshot


def samples(channel: InboundChannel, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    collector = JetkafkaCollector()
    collector.add(ChannelMetrics(channel, interval_s=60))
    return {
        tuple(sorted(s.labels.items())): s.value for family in collector.collect() for s in family.samples if s.name == name
    }


def test_a_busy_partition_is_mirrored_once_per_interval_and_ends_at_zookeepers_offsets(
    zk_connect: str,
    zk: KazooClient,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce: Callable[..., list[int]],
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(2400, 2))
    proc = RecordingProcessor()
    # One synchronous ZooKeeper commit per record: far more commits than intervals.
    channel = make_channel(
        zk_connect, kafka_config, topic, proc,
        commit_to_kafka=True, pipelined_commits=False, batch_max_events=1, commit_interval_ms=INTERVAL_MS,
    )
    started = time.monotonic()
    with channel:
        wait_until(lambda: len(proc.delivered) == 2400, what="every record processed")
        # Caught up: Kafka confirmed ZooKeeper's newest commit of each partition.
        wait_until(
            lambda: all(
                p.trail_seconds == 0 and p.behind_offsets == 0 and p.confirmed == 1200
                for p in mirror_of(channel).partitions.values()
            ) and len(mirror_of(channel).partitions) == 2,
            timeout=10,
            what="the mirror caught up",
        )
        labels = {(("group", "g"), ("partition", str(p)), ("topic", topic)) for p in (0, 1)}
        assert samples(channel, "jetkafka_kafka_mirror_trail_seconds") == dict.fromkeys(labels, 0.0)
        assert samples(channel, "jetkafka_kafka_mirror_behind_offsets") == dict.fromkeys(labels, 0.0)
        assert kafka_group_offsets(kafka_config, "jetkafka.g", topic, 2) == {0: 1200, 1: 1200}
        requests = samples(channel, "jetkafka_kafka_mirror_commits_total")
        assert list(requests.values()) == [mirror_of(channel).commits_sent]
    elapsed = time.monotonic() - started
    zookeeper_commits = int(channel.stats.summary()["commits"])
    snapshot = mirror_of(channel)
    print(
        f"{elapsed:.2f} s: {zookeeper_commits} commits in ZooKeeper, {snapshot.commits_sent} OffsetCommit requests "
        f"carrying {snapshot.partitions_sent} partition offsets, failures {snapshot.failures}"
    )
    assert zookeeper_commits >= 2400
    # Per partition at most one send per interval (the first at once, one more at the release).
    assert snapshot.partitions_sent <= 2 * (elapsed * 1000 / INTERVAL_MS + 1) + 4
    assert snapshot.commits_sent <= snapshot.partitions_sent
    assert snapshot.partitions_sent < zookeeper_commits  # merged: fewer copies than commits
    assert snapshot.failures == {}
    # After the stop, Kafka's copy is exactly ZooKeeper's.
    in_zookeeper = committed_offsets(zk, "g", topic)
    assert in_zookeeper == {0: 1200, 1: 1200}
    assert kafka_group_offsets(kafka_config, "jetkafka.g", topic, 2) == in_zookeeper


@pytest.fixture
def tansu_topic(tansu: dict[str, Any]) -> str:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient(tansu)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=30)
    wait_until(lambda: topic in admin.list_topics(timeout=10).topics, what="the topic on Tansu")
    # Tansu's watermarks count batches: one record per batch keeps them equal to offsets.
    producer = Producer({**tansu, "linger.ms": 0})
    for i in range(40):
        producer.produce(topic, value=str(i).encode(), partition=0)
        producer.flush(10)
    return topic


@contextmanager
def live_member(tansu: dict[str, Any], group: str, topic: str) -> Iterator[Callable[[], None]]:
    """A Kafka consumer of ``group`` with its assignment (Tansu answers a join after half the
    session timeout), polled in the background; yields the function that closes it (leaving
    the group empty), called at the latest when the block ends."""
    member = KafkaConsumer(
        {**tansu, "group.id": group, "session.timeout.ms": 6000, "enable.auto.commit": False}
    )
    member.subscribe([topic])
    deadline = time.monotonic() + 15
    while not member.assignment():
        assert time.monotonic() < deadline, "the member got no assignment from Tansu"
        member.poll(0.1)
    stop = threading.Event()

    def keep_polling() -> None:
        while not stop.is_set():
            member.poll(0.1)

    poller = threading.Thread(target=keep_polling, daemon=True)
    poller.start()

    def close() -> None:
        if not stop.is_set():
            stop.set()
            poller.join(5)
            member.close()

    try:
        yield close
    finally:
        close()


def test_refused_mirror_commits_are_counted_and_logged_once_and_the_mirror_catches_up_when_the_group_empties(
    zk_connect: str,
    zk: KazooClient,
    tansu: dict[str, Any],
    tansu_topic: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    group = f"live-{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.INFO, logger="jetkafka.channel")
    proc = RecordingProcessor()
    kafka = {**tansu, "group.id": group}
    channel = make_channel(
        zk_connect, kafka, tansu_topic, proc,
        commit_to_kafka=True, pipelined_commits=False, batch_max_events=1, commit_interval_ms=INTERVAL_MS,
    )
    with live_member(tansu, group, tansu_topic) as leave_group, channel:
        wait_until(lambda: len(proc.delivered) == 40, what="every record processed")
        # Each mirror commit is refused; the last one is sent again once a second.
        wait_until(
            lambda: mirror_of(channel).failures.get("UNKNOWN_MEMBER_ID", 0) >= 3, timeout=10, what="3 refusals"
        )
        # Once per reason (a leaving member may add another reason, logged once too).
        refused = [
            r for r in caplog.records
            if "Kafka refused the mirrored offsets" in r.getMessage() and "UNKNOWN_MEMBER_ID" in r.getMessage()
        ]
        assert len(refused) == 1, [r.getMessage() for r in refused]
        assert refused[0].levelno == logging.ERROR
        message = refused[0].getMessage()
        assert group in message and f"{tansu_topic}[0]@" in message and "UNKNOWN_MEMBER_ID" in message
        assert "give kafka.group.id a group of its own" in message
        trail = mirror_of(channel).partitions[(tansu_topic, 0)]
        assert trail.trail_seconds > 1.0 and trail.confirmed is None
        failures = samples(channel, "jetkafka_kafka_mirror_failures_total")
        instance = (("consumer", channel.consumer_id), ("group", "g"))
        assert failures[(*instance, ("reason", "UNKNOWN_MEMBER_ID"))] >= 3
        assert failures[(*instance, ("reason", "GROUP_AUTHORIZATION_FAILED"))] == 0
        assert samples(channel, "jetkafka_kafka_mirror_trail_seconds")[
            (("group", "g"), ("partition", "0"), ("topic", tansu_topic))
        ] > 1.0

        leave_group()  # the group is empty now: Kafka takes offsets from outside it again
        wait_until(
            lambda: mirror_of(channel).partitions[(tansu_topic, 0)].confirmed == 40, timeout=10, what="caught up"
        )
        assert mirror_of(channel).partitions[(tansu_topic, 0)].trail_seconds == 0.0
        recovered = [r for r in caplog.records if "takes the mirrored offsets" in r.getMessage()]
        assert len(recovered) == 1 and recovered[0].levelno == logging.INFO
        assert kafka_group_offsets(tansu, group, tansu_topic, 1) == {0: 40}
    assert committed_offsets(zk, "g", tansu_topic) == {0: 40}
    assert kafka_group_offsets(tansu, group, tansu_topic, 1) == {0: 40}
    assert sum(
        "Kafka refused the mirrored offsets" in r.getMessage() and "UNKNOWN_MEMBER_ID" in r.getMessage()
        for r in caplog.records
    ) == 1


def test_a_reset_that_moves_a_partition_back_is_copied_to_kafka_as_it_landed(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Callable[..., list[int]]
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(50, 1))
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc, commit_to_kafka=True) as channel:
        wait_until(lambda: kafka_group_offsets(kafka_config, "jetkafka.g", topic, 1) == {0: 50}, what="mirrored")
        channel.pause(topic, 0)  # nothing is processed again after the reset: the copy must stay there
        assert channel.reposition(topic, 0, 10) == 50
        wait_until(lambda: kafka_group_offsets(kafka_config, "jetkafka.g", topic, 1) == {0: 10}, what="moved back")
        # The answer reaches the mirror on the fetcher thread, maybe just after Kafka shows it.
        wait_until(
            lambda: (lambda f: (f.newest, f.confirmed, f.behind_offsets))(mirror_of(channel).partitions[(topic, 0)])
            == (10, 10, 0),
            what="the answer counted",
        )
        channel.resume(topic, 0)
        wait_until(lambda: kafka_group_offsets(kafka_config, "jetkafka.g", topic, 1) == {0: 50}, what="forward again")
