"""The channel: fetching, the partition queue, and the workers."""

from jetkafka.channel._add_ons import ChannelAddOn
from jetkafka.channel._context import ChannelContext
from jetkafka.channel._errors import DeadLetterError, OffsetOutOfRange
from jetkafka.channel._inbound import InboundChannel
from jetkafka.channel._partition import PartitionFailure, PartitionSnapshot
from jetkafka.channel._running import RunningChannel

__all__ = [
    "ChannelAddOn",
    "ChannelContext",
    "DeadLetterError",
    "InboundChannel",
    "OffsetOutOfRange",
    "PartitionFailure",
    "PartitionSnapshot",
    "RunningChannel",
]
