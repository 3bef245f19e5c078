"""Moving between a Kafka consumer group and a jetkafka group, and the offset mirror.

A jetkafka group keeps its offsets in ZooKeeper. This package is its border with Kafka's own
group offsets: reading a Kafka group's committed offsets to start from them (``offsets import
--from-kafka-group``, ``offsets reset --to-kafka-group``, ``channel.auto_offset_reset:
kafka-group``), writing the jetkafka group's into a Kafka group to go back (``offsets export
--to-kafka-group``), and the mirror of every landed commit (``channel.commit_to_kafka``) that
lets Kafka's lag tools watch a jetkafka group.

From Python::

    from jetkafka import load_config
    from jetkafka.kafka_groups import export_to_kafka_group, import_from_kafka_group

    config = load_config("orders.yaml")
    moves = import_from_kafka_group(config, config.channel.group, "orders-consumer", dry_run=True)
"""

from jetkafka.kafka_groups._errors import KafkaGroupActive, KafkaGroupError
from jetkafka.kafka_groups._group_offsets import GroupState, KafkaGroupOffsets
from jetkafka.kafka_groups._mirror import MirroredPartition, MirrorSnapshot
from jetkafka.kafka_groups._moves import GroupMove, export_to_kafka_group, import_from_kafka_group

__all__ = [
    "GroupMove",
    "GroupState",
    "KafkaGroupActive",
    "KafkaGroupError",
    "KafkaGroupOffsets",
    "MirrorSnapshot",
    "MirroredPartition",
    "export_to_kafka_group",
    "import_from_kafka_group",
]
