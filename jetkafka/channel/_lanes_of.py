"""How a newly leased partition is processed: one batch at a time, or in lanes.

Under ``channel.ordering: partition`` a partition has no :class:`KeyScheduler`; under ``key``
or ``none`` it gets one, starting at the offset the partition starts at with the offsets an
earlier owner finished above its commit (the committed :class:`CommitPoint`'s map, when the
partition starts at that commit), and as many batches in flight as can run at once: the
channel's threads for a synchronous processor, ``max_in_flight_per_partition`` for an
asynchronous one (its batches wait on the event loop, not on a thread).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetkafka.ordering._commit_point import finished_of
from jetkafka.ordering._key_scheduler import KeyScheduler

if TYPE_CHECKING:
    from jetkafka.config import ChannelConfig
    from jetkafka.coordination._ownership import Lease


def lanes_of(cfg: ChannelConfig, lease: Lease, start: int, asynchronous: bool = False) -> tuple[KeyScheduler | None, int]:
    """The scheduler and parallelism of a partition leased under ``cfg`` and started at ``start``."""
    if cfg.ordering == "partition":
        return None, 1
    committed = lease.committed
    inherited = finished_of(committed) if committed is not None and int(committed) == start else ()
    scheduler = KeyScheduler(cfg.ordering, cfg.max_in_flight_per_partition, start, inherited)
    return scheduler, (cfg.max_in_flight_per_partition if asynchronous else cfg.threads)
