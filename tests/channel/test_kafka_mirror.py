"""commit_to_kafka: committed offsets are copied to Kafka's group offsets for lag tools."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from tests.support.channels import RecordingProcessor, make_channel, values, wait_until


def kafka_committed(kafka_config: dict, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({**kafka_config, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in tps]
    finally:
        consumer.close()


def test_offsets_are_mirrored_to_kafka_group_offsets(zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(100, 2))
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc, commit_to_kafka=True):
        wait_until(lambda: kafka_committed(kafka_config, "jetkafka.g", topic, 2) == [50, 50], what="mirrored offsets")


def test_no_mirror_by_default(zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(10, 1))
    proc = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, proc):
        wait_until(lambda: len(proc.delivered) == 10)
    assert kafka_committed(kafka_config, "jetkafka.g", topic, 1) == [-1001]  # OFFSET_INVALID: none stored
