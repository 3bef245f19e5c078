"""jetkafka: consume Kafka at scale with ZooKeeper-coordinated partition ownership.

The public API is re-exported here; see README.md and docs/ for the guide.
"""

from jetkafka.channel import DeadLetterError, InboundChannel, OffsetOutOfRange, PartitionSnapshot
from jetkafka.config import JetkafkaConfig, load_config, parse_config
from jetkafka.coordination import KafkaController
from jetkafka.coordination.errors import CommitUncertain
from jetkafka.errors import (
    CommitFenced,
    ConfigError,
    ConnectError,
    DevStackError,
    JetkafkaError,
    MissingExtra,
    OffsetMoved,
    PartitionLost,
    ProcessorError,
    TopicNotFound,
)
from jetkafka.events import Event, EventBatch, PartitionSource
from jetkafka.processors import BatchEventProcessor, BatchResponse, SimpleKafkaProcessor

__version__ = "0.1.0"

__all__ = [
    "BatchEventProcessor",
    "BatchResponse",
    "CommitFenced",
    "CommitUncertain",
    "ConfigError",
    "ConnectError",
    "DeadLetterError",
    "DevStackError",
    "Event",
    "EventBatch",
    "InboundChannel",
    "JetkafkaConfig",
    "JetkafkaError",
    "KafkaController",
    "MissingExtra",
    "OffsetMoved",
    "OffsetOutOfRange",
    "PartitionLost",
    "PartitionSnapshot",
    "PartitionSource",
    "ProcessorError",
    "SimpleKafkaProcessor",
    "TopicNotFound",
    "load_config",
    "parse_config",
]
