"""Coordination through ZooKeeper: registration, ownership with fencing, offsets, rebalancing."""

from jetkafka.coordination.controller import KafkaController
from jetkafka.coordination.offsets import OffsetStore
from jetkafka.coordination.ownership import Lease, PartitionOwnership
from jetkafka.coordination.paths import GroupPaths
from jetkafka.coordination.registry import ConsumerInfo, ConsumerRegistry

__all__ = [
    "ConsumerInfo",
    "ConsumerRegistry",
    "GroupPaths",
    "KafkaController",
    "Lease",
    "OffsetStore",
    "PartitionOwnership",
]
