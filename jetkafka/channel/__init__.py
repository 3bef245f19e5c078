"""The channel: fetching, the partition queue, and the workers."""

from jetkafka.channel.inbound import InboundChannel
from jetkafka.channel.partition import PartitionSnapshot
from jetkafka.channel.errors import DeadLetterError, OffsetOutOfRange

__all__ = ["DeadLetterError", "InboundChannel", "OffsetOutOfRange", "PartitionSnapshot"]
