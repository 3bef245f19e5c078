"""The end of a channel start, and the partitions still inside the processor's code then.

Each :meth:`InboundChannel.start` builds its parts (worker threads, work queue, committer,
membership, a reference to the ZooKeeper session); a shutdown or a resubscribe ends them. The
channel first asks every partition back and waits up to ``channel.shutdown_timeout_s`` for the
releases. A partition still in the table after that is one whose turn outlasted the wait: a
batch, ``on_stream_termination`` or another callback still running. The work queue keeps one
thread per partition within one start only, so the end decides what becomes of it:

* **A resubscribe holds it over** (:meth:`EndedStart.hand_over_in_background`). The partition
  stays leased: its owner node is kept, and the session with it, and the ended start's own
  workers, queue, committer and membership go on for it alone. When the call returns, its
  response is applied and committed under the same lease (nobody else can have written the
  offset meanwhile), then the partition is released as usual (``on_stream_termination``, its
  response committed, the owner node deleted) and taken again, by the new start or another
  instance, from that commit: nothing lost, nothing processed twice, one call at a time. Until
  then nobody else can take it, and the new start does not either: its membership counts the
  owner node as this consumer's (:meth:`PartitionLeases.held_elsewhere`), and a take after the
  owner node went another way (the session expired) is given up again while the old call runs
  (:meth:`PartitionTable.in_earlier_start`). The ended start's parts stop once its last
  partition is handed over.
* **A shutdown gives it up** (:meth:`EndedStart.give_up`), as ``shutdown_timeout_s`` says: its
  owner node is deleted at once and another instance takes it, re-reading what was not
  committed; the call's own commit, when it returns, is refused by the fence. The partition
  leaves :meth:`InboundChannel.owned_partitions` at once and no later shutdown waits for it.
  A shutdown gives up what earlier resubscribes still hold over as well. A later start of the
  channel takes the partition only once that call has returned.

Threads: an :class:`EndedStart` is built and given up by the thread ending the start (under the
hot deploy's ``reconfiguring`` lock); a held-over one is watched by its own daemon thread,
``jetkafka-held-over``, which stops the parts once every held-over partition left the table.
The parts stop exactly once, whoever gets there first; a second caller waits until they have.

Failure modes: a call that never returns keeps a held-over partition owned and unprocessed until
a shutdown gives it up, as it would have stayed without the resubscribe. A session that expires
meanwhile ends the lease: the call's commit is refused when it returns, and the partition is
taken again only after that.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jetkafka.channel._budget import BufferBudget
    from jetkafka.channel._committer import PartitionCommitter
    from jetkafka.channel._partition import PartitionState
    from jetkafka.channel._partition_table import PartitionTable
    from jetkafka.channel._work_queue import PartitionQueue
    from jetkafka.channel._worker import BatchRunner
    from jetkafka.coordination._membership import GroupMembership
    from jetkafka.coordination._process_session import ProcessSession

log = logging.getLogger("jetkafka.channel")

# How long the end of a start waits, in all, for its idle workers to leave.
WORKERS_JOIN_S = 5.0

GIVEN_UP = "given up at shutdown: its call outlasted channel.shutdown_timeout_s"


@dataclass
class StartParts:
    """What one start of a channel built and must stop. ``session`` is the reference to the
    process session the start took (None when the caller gave the channel its session)."""

    queue: PartitionQueue | None = None
    workers: list[threading.Thread] = field(default_factory=list)
    workers_stop: threading.Event = field(default_factory=threading.Event)
    committer: PartitionCommitter | None = None
    runner: BatchRunner | None = None
    membership: GroupMembership | None = None
    session: ProcessSession | None = None


class EndedStart:
    """A start that ended, with the ``states`` it still had in the table (none: it ends at once).

    Stopping its membership deletes the consumer's registration too, unless the start was held
    over: the channel's next start registers the same consumer id by then.
    """

    def __init__(self, parts: StartParts, states: list[PartitionState], table: PartitionTable) -> None:
        self.parts = parts
        self.states = states
        self._table = table
        self._stopping = threading.Lock()
        self._stopped = False
        self._given_up = False
        self._deregister = True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def hand_over_in_background(self) -> None:
        """Keep the held-over partitions leased and the start's parts running until their
        workers have handed them over; then stop the parts."""
        self._deregister = False
        for state in self.states:
            log.warning(
                "%s[%d]: still in hand at offset %d after channel.shutdown_timeout_s; kept (owner node and "
                "session) until its call returns and it is released, then taken again from its commit",
                state.topic,
                state.partition,
                state.position,
            )
        threading.Thread(target=self._stop_once_handed_over, name="jetkafka-held-over", daemon=True).start()

    def give_up(self, budget: BufferBudget | None) -> None:
        """Give the partitions up now (their owner nodes deleted, the leases lost) and stop the
        parts; returns once they are stopped."""
        self._given_up = True
        leased = [s for s in self.states if not s.removed]
        for state in leased:
            # The call still running finds its lease gone: its commit is refused by the fence.
            state.lost_reason = state.lost_reason or GIVEN_UP
        self._table.give_up(leased, budget)
        runner = self.parts.runner
        if runner is not None:
            for state in leased:
                runner.stats.forget(state.key)
        self._stop_parts()

    def _stop_once_handed_over(self) -> None:
        while not self._given_up and not self._table.wait_gone(self.states, 1.0):
            pass
        if not self._given_up:
            log.info(
                "the partitions held over (%s) are handed over; the start they belonged to ends",
                ", ".join(f"{s.topic}[{s.partition}]" for s in self.states),
            )
        self._stop_parts()

    def _stop_parts(self) -> None:
        with self._stopping:
            if self._stopped:
                return
            parts = self.parts
            parts.workers_stop.set()
            if parts.queue is not None:
                parts.queue.close()
            deadline = time.monotonic() + WORKERS_JOIN_S
            for worker in parts.workers:
                worker.join(timeout=max(0.0, deadline - time.monotonic()))
            if parts.committer is not None:
                parts.committer.close()
            if parts.runner is not None and parts.runner.failures.dead_letter is not None:
                parts.runner.failures.dead_letter.close()
            if parts.membership is not None:
                # Deletes the owner nodes still held: none once handed over; given up, those of
                # the calls still running (their commits are refused from then on).
                parts.membership.stop(deregister=self._deregister)
            if parts.session is not None:
                parts.session.release()
            self._stopped = True
