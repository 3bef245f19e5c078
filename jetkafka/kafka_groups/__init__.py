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

from __future__ import annotations

from typing import Any

from jetkafka.kafka_groups._errors import KafkaGroupActive, KafkaGroupError
from jetkafka.kafka_groups._group_offsets import GroupState, KafkaGroupOffsets
from jetkafka.kafka_groups._mirror import MirroredPartition, MirrorSnapshot

# The moves use the offset commands' machinery (jetkafka.ops), which itself reads Kafka groups
# through this package: loaded on first use, so importing either package first works.
_MOVES = ("GroupMove", "export_to_kafka_group", "import_from_kafka_group")


def __getattr__(name: str) -> Any:
    if name in _MOVES:
        from jetkafka.kafka_groups import _moves

        return getattr(_moves, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
