"""Moving between a Kafka consumer group and a jetkafka group, and the offset mirror.

A jetkafka group keeps its offsets in ZooKeeper. This package is its border with Kafka's own
group offsets: reading a Kafka group's committed offsets to start from them (``offsets import
--from-kafka-group``, ``offsets reset --to-kafka-group``, ``channel.auto_offset_reset:
kafka-group``), writing the jetkafka group's into a Kafka group to go back (``offsets export
--to-kafka-group``), and the mirror of every landed commit (``channel.commit_to_kafka``) that
lets Kafka's lag tools watch a jetkafka group.
"""

from jetkafka.kafka_groups._errors import KafkaGroupActive, KafkaGroupError

__all__ = ["KafkaGroupActive", "KafkaGroupError"]
