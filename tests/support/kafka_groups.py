"""Topics, records and Kafka group offsets for the tests of moving a Kafka group in and out.

They work the same on the dev stack's broker and on Tansu: records go one per batch, since
Tansu's watermarks count batches, not records.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.channels import channel_config, wait_until

PARTITIONS = 3


def new_topic(kafka: dict[str, Any], partitions: int = PARTITIONS) -> str:
    topic = f"kg-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(dict(kafka))
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    wait_until(
        lambda: len(getattr(admin.list_topics(timeout=10).topics.get(topic), "partitions", {})) == partitions,
        what=f"{topic}'s {partitions} partitions in the metadata",
    )
    return topic


def produce_ids(kafka: dict[str, Any], topic: str, ids: range) -> None:
    """Ids round-robin over the partitions, one record per batch (Tansu's watermarks count batches)."""
    producer = Producer({**kafka, "linger.ms": 0, "batch.num.messages": 1})
    for ident in ids:
        producer.produce(topic, str(ident).encode(), partition=ident % PARTITIONS)
    assert producer.flush(30) == 0


def commit_kafka_group(kafka: dict[str, Any], group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({**kafka, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    consumer.close()


def kafka_group_offsets(kafka: dict[str, Any], group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({**kafka, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def config_file(tmp_path: Path, zk_connect: str, kafka: dict[str, Any], topic: str, group: str, **channel: Any) -> str:
    path = tmp_path / f"{group}.yaml"
    path.write_text(yaml.safe_dump(channel_config(zk_connect, kafka, [topic], group=group, **channel)))
    return str(path)


def id_offsets(topic: str, count: int) -> dict[int, tuple[int, int]]:
    """Where produce_ids put each id: partition ``id % 3`` at offset ``id // 3``."""
    return {i: (i % PARTITIONS, i // PARTITIONS) for i in range(count)}
