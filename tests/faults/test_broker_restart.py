"""Restart the Kafka-protocol broker under a consuming channel and a producing client.

Injected: a clean stop of the broker (its own, not the session's shared one), about 3 s down,
and a start on the same port with the same data directory, while a producer keeps producing
(idempotent, with a delivery timeout long enough to wait the restart out) and a channel
consumes.
Asserted: the channel keeps running through it (no crash, it logs that Kafka is unreachable
and carries on, and its readiness says its consumer does not fetch), keeps its partitions (same owner nodes), and after the restart goes on
consuming; every acknowledged id is delivered; compared with the topic read back in full
afterwards, every record was delivered exactly once (no offset twice, none skipped).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from jetkafka.devstack import LocalBroker
from jetkafka.ops._health import PartitionCounts, channel_readiness
from tests.support.channels import make_channel
from tests.support.group_watch import committed, owner_nodes
from tests.support.instances import TimedRecorder
from tests.support.load import AckedProducer, wait_delivered, wait_for

PARTITIONS = 4
DOWN_S = 3.0


def create_topic(kafka: dict[str, Any], partitions: int) -> str:
    topic = f"t-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({**kafka, "logger": logging.getLogger(__name__)})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout=30)
    wait_for(
        lambda: (lambda t: t is not None and len(t.partitions) == partitions)(admin.list_topics(timeout=10).topics.get(topic)),
        30,
        f"{topic} in the metadata",
    )
    return topic


def read_back(kafka: dict[str, Any], topic: str, ends: dict[int, int]) -> list[tuple[int, int, int]]:
    """Every record of ``topic`` below ``ends``: ``(partition, offset, id)``."""
    consumer = Consumer({**kafka, "group.id": "read-back", "enable.auto.commit": False, "logger": logging.getLogger(__name__)})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out: list[tuple[int, int, int]] = []
    left = {p: end for p, end in ends.items() if end > 0}
    deadline = time.monotonic() + 60
    try:
        while left and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error() is None and m.offset() < ends[m.partition()]:
                    out.append((m.partition(), m.offset(), int(m.value())))
                    if m.offset() == ends[m.partition()] - 1:
                        left.pop(m.partition(), None)
    finally:
        consumer.close()
    assert not left, f"could not read {topic} back to its end on partitions {sorted(left)}"
    return out


def test_broker_restart_under_load_delivers_every_record_once(
    tmp_path: Path, zk: KazooClient, zk_connect: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    broker = LocalBroker(tmp_path / "broker")
    broker.start(timeout=60)
    producer = None
    try:
        kafka = broker.client_config()
        topic = create_topic(kafka, PARTITIONS)
        producer = AckedProducer(
            kafka,
            topic,
            range(PARTITIONS),
            rate=300,
            config={"enable.idempotence": True, "message.timeout.ms": 120_000, "reconnect.backoff.max.ms": 500},
        )
        proc = TimedRecorder()
        with make_channel(zk_connect, kafka, topic, proc, threads=2, batch_max_events=50) as channel:
            wait_for(lambda: len(channel.owned_partitions()) == PARTITIONS, 30, "all partitions owned")
            wait_for(
                lambda: (lambda c: len(c) == PARTITIONS and min(c.values()) >= 50)(committed(zk, topic)),
                60,
                "commits on every partition",
            )
            owners_before = owner_nodes(zk, topic)
            port, data_dir = broker.port, broker.data_dir
            marks = len(caplog.records)

            down = time.monotonic()
            broker.stop()
            time.sleep(DOWN_S)
            assert channel.running and all(t.is_alive() for t in channel._workers)
            # What /readyz says meanwhile: the consumer reaches no broker.
            wait_for(lambda: channel.fetching() is not None, 10, "librdkafka to report every broker down")
            ready, entry = channel_readiness(channel, PartitionCounts(lambda topics: channel.partition_counts()))
            assert not ready and entry["reason"].startswith("its consumer does not fetch: no broker reachable since")
            broker.start(timeout=60)
            outage = time.monotonic() - down
            assert (broker.port, broker.data_dir) == (port, data_dir)

            mark = producer.next_id
            resumed = wait_for(
                lambda: any(i >= mark for i in proc.ids()[-200:]), 60, "deliveries of records written after the restart"
            )
            assert channel.fetching() is None  # records came again: fetching
            time.sleep(1.0)
            acked = producer.stop()
            wait_delivered(proc.ids, acked)
            ends = {p: max(o for q, o in producer.acked.values() if q == p) + 1 for p in range(PARTITIONS)}
            wait_for(
                lambda: (lambda c: all(c.get(p) == ends[p] for p in range(PARTITIONS)))(committed(zk, topic)),
                30,
                "every record committed",
            )
            assert owner_nodes(zk, topic) == owners_before
            assert channel.running
        # The outage was seen and retried through: librdkafka's reconnect attempts, logged
        # through the channel's logger.
        retries = [
            r.getMessage()
            for r in caplog.records[marks:]
            if r.name.startswith("jetkafka.") and ("Connection refused" in r.getMessage() or "Kafka unreachable" in r.getMessage())
        ]
        assert retries, "the channel logged nothing about the broker being down"
        # The topic as the broker holds it now, read by a plain consumer.
        on_broker = read_back(kafka, topic, ends)
    finally:
        if producer is not None:
            producer.close()
        broker.stop()

    delivered = Counter((p, o) for _, p, o, _ in proc.delivered)
    twice = {k: n for k, n in delivered.items() if n > 1}
    assert twice == {}, f"records delivered more than once: {dict(list(twice.items())[:10])}"
    assert set(delivered) == {(p, o) for p, o, _ in on_broker}, "delivered records differ from the topic's records"
    ids_on_broker = Counter(i for _, _, i in on_broker)
    assert set(ids_on_broker) >= acked
    assert set(proc.ids()) == set(ids_on_broker)
    log_duplicates = {i for i, n in ids_on_broker.items() if n > 1}
    assert log_duplicates == set(), f"the idempotent producer wrote ids twice: {sorted(log_duplicates)[:10]}"
    assert proc.losses() == [] and proc.violations == []
    print(
        f"broker down {outage:.1f} s; first records written after the restart delivered {resumed:.2f} s after it "
        f"served again; {len(acked)} acknowledged ids, {len(on_broker)} records, each delivered once"
    )
