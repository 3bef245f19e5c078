"""The channel: fetching, the partition queue, and the workers."""

from jetkafka.channel.inbound import InboundChannel
from jetkafka.channel.partition import PartitionSnapshot
from jetkafka.channel.worker import OffsetOutOfRange

__all__ = ["InboundChannel", "OffsetOutOfRange", "PartitionSnapshot"]
