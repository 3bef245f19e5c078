"""jetkafka: consume Kafka at scale with ZooKeeper-coordinated partition ownership.

The public API is re-exported here; see README.md and docs/ for the guide.
"""

from __future__ import annotations

import warnings
from typing import Any

# The composition root: it provides the standard add-ons (reset responder, recovery, metrics)
# of every channel built without add_ons=, so it is imported before any channel can be built.
from jetkafka._assembly import build_channel, standard_add_ons
from jetkafka.channel import DeadLetterError, InboundChannel, OffsetOutOfRange, PartitionFailure, PartitionSnapshot
from jetkafka.config import JetkafkaConfig, load_config, parse_config
from jetkafka.coordination import ProcessSession
from jetkafka.coordination._errors import CommitUncertain
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
from jetkafka.processors import AsyncBatchEventProcessor, BatchEventProcessor, BatchResponse, SimpleKafkaProcessor

__version__ = "0.1.0"

__all__ = [
    "AsyncBatchEventProcessor",
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
    "MissingExtra",
    "OffsetMoved",
    "OffsetOutOfRange",
    "PartitionFailure",
    "PartitionLost",
    "PartitionSnapshot",
    "PartitionSource",
    "ProcessSession",
    "ProcessorError",
    "SimpleKafkaProcessor",
    "TopicNotFound",
    "build_channel",
    "load_config",
    "parse_config",
    "standard_add_ons",
]


def __getattr__(name: str) -> Any:
    # The old name stays importable for one release (docs/changes.md); each use warns.
    if name == "KafkaController":
        warnings.warn(
            "jetkafka.KafkaController is deprecated: use jetkafka.ProcessSession, the same class (docs/changes.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return ProcessSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
