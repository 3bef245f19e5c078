"""Coordination through ZooKeeper: registration, ownership with fencing, offsets, rebalancing."""

from __future__ import annotations

import warnings
from typing import Any

from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import Lease, PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._process_session import ProcessSession
from jetkafka.coordination._registry import ConsumerInfo, ConsumerRegistry

__all__ = [
    "ConsumerInfo",
    "ConsumerRegistry",
    "GroupPaths",
    "Lease",
    "OffsetStore",
    "PartitionOwnership",
    "ProcessSession",
]


def __getattr__(name: str) -> Any:
    # The old name stays importable for one release (docs/changes.md); each use warns.
    if name == "KafkaController":
        warnings.warn(
            "jetkafka.coordination.KafkaController is deprecated: use ProcessSession, the same class "
            "(docs/changes.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return ProcessSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
