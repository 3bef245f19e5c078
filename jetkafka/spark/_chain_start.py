"""Where a partition's chain of micro-batch slices starts under a hold.

The Spark processor's output is exactly once because each partition's slices form an unbroken
chain of offset ranges from the committed offset of the hold it gathers under. The chain starts
at a partition's first batch under a hold, and again after a reposition:

* The first batch must start at the hold's committed offset. One that does not (read under an
  earlier hold, or before a reset landed) is sent back to re-read from that very offset.
  When the batch that follows still starts above it, the log holds no record in between (a
  transaction's commit marker, which a micro-batch ending at a transaction's last record
  commits; aborted records; a compacted topic): the chain starts at the committed offset and
  its first slice covers the empty offsets. Re-reading again would find the same, forever.
* A pending range recorded by an earlier owner and starting at the committed offset is replayed
  with its batch id (:meth:`jetkafka.spark._batch.Collector.register`).
* After a reposition the chain starts at the new offset once its commit has landed (until then
  the batch is read again after a short wait), and the pending range the move made void is
  deleted, so no owner replays it.

Threads: every call for a partition comes from the worker holding its turn, one at a time;
calls for different partitions touch different keys. Failure modes: a ZooKeeper error while
reading or abandoning the pending range propagates to the processor, which reads the batch
again after a back-off with nothing registered; a pending node rewritten on every attempt raises
after a few.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NoNodeError

from jetkafka.events import PartitionSource
from jetkafka.processors._base import BatchResponse
from jetkafka.spark._batch import Collector
from jetkafka.spark._ledger import MicroBatchLedger, PendingRange

if TYPE_CHECKING:
    from jetkafka.channel._context import ChannelContext
    from jetkafka.coordination._ownership import Lease

log = logging.getLogger("jetkafka.spark")

Key = tuple[str, int]

# Re-reading a batch whose reposition commit has not reached ZooKeeper yet waits this long.
_MOVE_PENDING_WAIT_MS = 200
_ABANDON_ATTEMPTS = 5


@dataclass(frozen=True)
class _Moved:
    """A reposition of a partition under ``hold``, not yet followed by its first batch."""

    hold: Lease
    offset: int  # the new position
    old_offset: int
    reason: str


class ChainStarts:
    """Per partition: a reposition waiting for its first batch, and the re-read a first batch
    was sent back for."""

    def __init__(self) -> None:
        self._moved: dict[Key, _Moved] = {}
        self._reread: dict[Key, tuple[Lease, int]] = {}

    def clear(self) -> None:
        """A new start of the processor: nothing of the last one's partitions counts."""
        self._moved.clear()
        self._reread.clear()

    def moved(self, key: Key, hold: Lease, offset: int, old_offset: int, reason: str) -> None:
        self._moved[key] = _Moved(hold, offset, old_offset, reason)

    def forget(self, key: Key) -> None:
        """The partition was released or lost: nothing filed under its hold applies any more."""
        self._moved.pop(key, None)
        self._reread.pop(key, None)

    def start(
        self, source: PartitionSource, hold: Lease, ledger: MicroBatchLedger, collector: Collector,
        context: ChannelContext,
    ) -> BatchResponse | None:
        """First batch under ``hold``, or after a reposition: start the partition's chain at its
        committed offset (None), or say how to re-read first."""
        key = (source.topic, source.partition)
        collector.forget(key)
        moved = self._moved.get(key)
        if moved is not None and moved.hold is not hold:
            moved = None  # repositioned under an earlier hold: the new hold starts from ZooKeeper
            del self._moved[key]
        committed = hold.committed
        if moved is not None:
            if committed != moved.offset:
                # The reposition's commit is still on its way (ZooKeeper unreachable when it was
                # made): read this batch again once it has landed, not from the old offset.
                return BatchResponse.revert().seek(source.head_offset).wait(_MOVE_PENDING_WAIT_MS)
        elif committed is None or source.head_offset != committed:
            if committed is None or not self._gap_confirmed(key, hold, committed, source.head_offset):
                log.warning(
                    "%s[%d]: batch at offset %d does not start at the committed offset %s of the current hold; "
                    "re-reading from the committed offset",
                    source.topic, source.partition, source.head_offset, committed,
                )
                if committed is None:
                    return BatchResponse.revert()
                # To the hold's committed offset by name: the channel's own last commit may be
                # another (an advance still in the pipeline, a batch of an earlier hold).
                self._reread[key] = (hold, committed)
                return BatchResponse.revert().seek(committed)
            log.info(
                "%s[%d]: no records at offsets %d..%d (transaction markers or compaction); the micro-batch "
                "chain starts at the committed offset %d, its first event at %d",
                source.topic, source.partition, committed, source.head_offset - 1, committed, source.head_offset,
            )
        # Read before registering: if ZooKeeper fails, the batch is re-delivered and nothing changed.
        pending = ledger.read_pending(*key)
        if moved is not None:
            if pending is not None:
                self._abandon(ledger, hold, pending, moved, context)
                pending = None
            del self._moved[key]
        collector.register(key, hold, pending)
        self._reread.pop(key, None)
        return None

    def _gap_confirmed(self, key: Key, hold: Lease, committed: int, head: int) -> bool:
        """Whether this batch, above the committed offset, came right after a re-read from that
        offset under the same hold: then nothing lies in between."""
        reread = self._reread.get(key)
        return head > committed and reread is not None and reread[0] is hold and reread[1] == committed

    def _abandon(
        self, ledger: MicroBatchLedger, hold: Lease, pending: PendingRange, moved: _Moved, context: ChannelContext
    ) -> None:
        """Delete the pending range a reposition made void, so no owner ever replays it."""
        current: PendingRange | None = pending
        for _ in range(_ABANDON_ATTEMPTS):
            if current is None:
                return
            try:
                ledger.abandon(context, hold, current)
            except (BadVersionError, NoNodeError):
                current = ledger.read_pending(*current.key)  # rewritten meanwhile: read it again
                continue
            log.warning(
                "%s[%d]: micro-batch %d's recorded range %d..%d is abandoned: the partition was repositioned (%s) "
                "from %d to %d, so its events from %d on are read into new micro-batches; output an earlier run "
                "of micro-batch %d wrote stays as written",
                current.topic, current.partition, current.batch_id, current.start, current.end - 1, moved.reason,
                moved.old_offset, moved.offset, moved.offset, current.batch_id,
            )
            return
        raise RuntimeError(f"{pending.topic}[{pending.partition}]: its pending micro-batch node kept changing")
