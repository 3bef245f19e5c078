"""The channel: fetching, the partition queue, and the workers."""

from jetkafka.channel.errors import DeadLetterError, OffsetOutOfRange
from jetkafka.channel.inbound import InboundChannel
from jetkafka.channel.partition import PartitionSnapshot

__all__ = ["DeadLetterError", "InboundChannel", "OffsetOutOfRange", "PartitionSnapshot"]
