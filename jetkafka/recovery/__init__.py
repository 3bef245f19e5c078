"""Background recovery of backlogs after long outages.

When an instance takes a partition whose backlog exceeds ``recovery.max_partition_lag``, live
reading starts near the high watermark and the skipped offsets are recorded as a recovery range
in ZooKeeper; a recovery thread per channel processes them in parallel with live consumption, at
``recovery.max_rate`` events per second, and stores its progress fenced by ownership. See
docs/recovery.md.

Modules: :mod:`~jetkafka.recovery.ranges` (half-open range lists), :mod:`~jetkafka.recovery.rate`
(token bucket), :mod:`~jetkafka.recovery.ledger` (the ZooKeeper node), :mod:`~jetkafka.recovery.reader`
(the recovery consumer), :mod:`~jetkafka.recovery.progress` (one partition's batches and
progress), :mod:`~jetkafka.recovery.worker` (the thread), :mod:`~jetkafka.recovery.service` (the
take-over decision, and :class:`~jetkafka.recovery.service.RecoveryAddOn`: recovery as a channel add-on), :mod:`~jetkafka.recovery.commands` (``jetkafka
recovery list|cancel``).
"""

from jetkafka.recovery.ledger import RecoveryLedger, RecoveryRecord, Snapshot
from jetkafka.recovery.service import GapPlan, RecoveryAddOn, RecoveryService, choose_processor, plan_gap

__all__ = [
    "GapPlan",
    "RecoveryAddOn",
    "RecoveryLedger",
    "RecoveryRecord",
    "RecoveryService",
    "Snapshot",
    "choose_processor",
    "plan_gap",
]
