"""Background recovery of backlogs after long outages.

When an instance takes a partition whose backlog exceeds ``recovery.max_partition_lag``, live
reading starts near the high watermark and the skipped offsets are recorded as a recovery range
in ZooKeeper; a recovery thread per channel processes them in parallel with live consumption, at
``recovery.max_rate`` events per second, and stores its progress fenced by ownership. See
docs/recovery.md.

Modules: :mod:`~jetkafka.recovery._ranges` (half-open range lists), :mod:`~jetkafka.recovery._rate`
(token bucket), :mod:`~jetkafka.recovery._ledger` (the ZooKeeper node), :mod:`~jetkafka.recovery._reader`
(the recovery consumer), :mod:`~jetkafka.recovery._progress` (one partition's batches and
progress), :mod:`~jetkafka.recovery._worker` (the thread), :mod:`~jetkafka.recovery._service` (the
take-over decision, and :class:`~jetkafka.recovery._service.RecoveryAddOn`: recovery as a channel add-on), :mod:`~jetkafka.recovery._commands` (``jetkafka
recovery list|cancel``).
"""

from jetkafka.recovery._ledger import RecoveryLedger, RecoveryRecord, Snapshot
from jetkafka.recovery._service import GapPlan, RecoveryAddOn, RecoveryService, choose_processor, plan_gap

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
