"""The channel's side of group membership: partition leases taken, asked back and lost.

:class:`PartitionLeases` is the channel's ``PartitionHolder``: :class:`GroupMembership` calls
it from the controller thread. It only sets state and queues the partition, and the worker
holding its turn does the rest, so a partition's events and its hand-over never run in two
threads at once. A new lease's state enters the :class:`PartitionTable` here (controller
thread) and leaves it through :meth:`PartitionLeases.remove` (the worker holding its turn).
It owns one flag, ``suspended`` (commits suspended while ZooKeeper is out of reach), written
by the controller thread and read by the workers.

Guarantees:

* A partition taken starts at its committed offset; one without a commit starts at
  ``auto_offset_reset``, committed before any event is handed over, so a later owner starts at
  the same place. A take-over of a lagging partition may start where recovery says instead.
* A release lets the worker in hand finish its batch and call ``on_stream_termination`` before
  the owner node is given up; a loss (session expired, lease taken) commits nothing more.
* Events the fetcher still delivers from an earlier assignment of a partition taken again are
  dropped until the fetcher has moved to the new start offset.
* A lease lost before it is adopted is never worked on. Starting a partition makes slow calls
  (start offsets, recovery's check) after the rebalance handed it over; a session that expires
  meanwhile ends the lease while nothing of it is in the table, so the loss reaches nobody.
  The lease is therefore checked once more right before its adoption, and again after it:
  :meth:`GroupMembership.adopted` says whether it is still held, under the lock the session's
  expiry takes, so an expiry either comes before (not adopted, or adopted and found lost) or
  after (the state is in the table: ``partitions_lost`` marks it).
* A partition whose state of an ended start may still be inside the processor's code (a call
  that outlasted a resubscribe or a shutdown, :mod:`jetkafka.channel._ended_start`) is not
  adopted again until that call returns: the lease is given up and taken again after a
  back-off, so one partition never has two calls in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jetkafka.channel._committer import PartitionCommitter
from jetkafka.channel._lanes_of import lanes_of
from jetkafka.channel._partition import PartitionState
from jetkafka.channel._start_offsets import commit_start_offsets
from jetkafka.errors import CommitFenced
from jetkafka.events import Key
from jetkafka.processors._async import AsyncBatchEventProcessor

if TYPE_CHECKING:
    from jetkafka.channel._controls import ChannelControls
    from jetkafka.channel._internals import ChannelInternals
    from jetkafka.channel._partition_table import PartitionTable
    from jetkafka.coordination._ownership import Lease

log = logging.getLogger("jetkafka.channel")


class PartitionLeases:
    """The leases of ``channel``'s partitions as they come and go, over its partition ``table``;
    uses the fetcher, work queue, membership and add-ons of the channel's current start, and ``controls`` to start a partition paused."""

    def __init__(self, channel: ChannelInternals, table: PartitionTable, controls: ChannelControls) -> None:
        self._channel = channel
        self._table = table
        self._controls = controls
        self.suspended = False
        self._lease_lapsed = False  # logged once per lapse of the local (session) lease

    def partition_counts(self, topics: tuple[str, ...], missing_ok: bool = False) -> Mapping[str, int]:
        fetcher = self._channel._fetcher
        assert fetcher is not None
        return fetcher.partition_counts(topics, missing_ok=missing_ok)

    def partitions_taken(self, leases: list[Lease]) -> None:
        """Start working on the partitions a rebalance took (on the controller thread).

        Every lease ends one of two ways: *adopted* (a :class:`PartitionState` is queued and
        the membership is told) or *given up* (its owner node deleted through
        ``finish_release``, so that it is taken again at a later rebalance, here or by another
        instance). Given up: a partition whose start offset cannot be looked up (the broker
        slow or unreachable, a partition without a leader yet) or committed, or whose recovery
        check fails. One ERROR per failure names the partitions, the cause and what follows.
        """
        channel = self._channel
        fetcher, queue, membership = channel._fetcher, channel._queue, channel._membership
        assert fetcher is not None and queue is not None and membership is not None
        cfg = channel.config.channel
        # Already given up again (the channel is leaving the group): skip.
        leases = [lease for lease in leases if membership.lease(lease.key) is lease]
        fresh = [lease for lease in leases if lease.committed is None]
        try:
            starts = commit_start_offsets(fresh, fetcher, membership.offsets, channel.config, channel._committed)
        except Exception as exc:  # noqa: BLE001 - any failure of the look-up: nothing was committed, the leases are given up
            if fresh:
                log.error(
                    "cannot look up where %s start (%s: %s); giving them up, to be taken again at a later rebalance",
                    ", ".join(f"{t}[{p}]" for t, p in sorted(lease.key for lease in fresh)),
                    type(exc).__name__,
                    exc,
                )
            starts = {}
        positions: list[tuple[PartitionState, int]] = []
        queued: list[PartitionState] = []
        for lease in leases:
            if self._table.in_earlier_start(lease.key):
                log.warning(
                    "%s[%d]: an earlier start of this channel is still inside the processor's code on it; "
                    "giving the lease up, to be taken again once that call returned",
                    *lease.key,
                )
                membership.finish_release(lease.key, lease)
                continue
            offset = lease.committed
            if lease.key in starts:
                offset = starts[lease.key]
            elif offset is None:  # its start offset was not committed (logged)
                membership.finish_release(lease.key, lease)
                continue
            else:  # an add-on may start it elsewhere (recovery: a backlog over max_partition_lag)
                try:
                    offset = channel._add_ons.start_offset(lease)
                except Exception as exc:  # noqa: BLE001 - an add-on's failure gives the partition up, logged
                    log.error(
                        "%s[%d]: start-offset check (recovery) at committed offset %s failed (%s: %s); giving the partition up, "
                        "to be taken again at a later rebalance",
                        lease.topic,
                        lease.partition,
                        lease.committed,
                        type(exc).__name__,
                        exc,
                    )
                    offset = None
                if offset is None:  # the take-over commit failed (logged): give the partition up
                    membership.finish_release(lease.key, lease)
                    continue
            if membership.lease(lease.key) is not lease:
                # The session expired during the calls above: its owner node is gone.
                log.warning(
                    "%s[%d]: lease lost while the partition was being started (ZooKeeper session expired); "
                    "not started, to be taken again under a live session",
                    *lease.key,
                )
                membership.finish_release(lease.key, lease)
                continue
            state = PartitionState(
                lease, offset, cfg.buffer_max_events, cfg.buffer_max_bytes, channel._budget, *lanes_of(cfg, lease, offset, isinstance(channel.processor, AsyncBatchEventProcessor))
            )
            # Until the fetcher applies the assign below, it may still deliver from an earlier
            # assignment of this partition (lost and taken again), past ``offset``: drop that.
            state.buffer.await_seek()
            old = self._table.adopt(state, channel._budget, lambda s: self._controls.set_paused(s, True))
            if old is not None:  # lost and taken again before a worker handled the loss
                old.lost_reason = old.lost_reason or "taken again"
            # Adopted first, asked after: an expiry from now on finds the state in the table.
            if not membership.adopted(lease):
                state.lost_reason = state.lost_reason or "ZooKeeper session expired"
                queued.append(state)  # its worker handles the loss; nothing is fetched for it
                continue
            positions.append((state, offset))
            queued.append(state)
        # Resets issued while the partition had another owner: filed before its first turn,
        # which fetched events could start as soon as the fetcher is assigned.
        channel._add_ons.partitions_taken([state.key for state in queued])
        # One command for all: the first fetch then asks for every partition taken.
        if positions:
            fetcher.assign(positions)
        for state in queued:
            queue.offer(state)

    def held_elsewhere(self, topic: str) -> set[int]:
        """Partitions of ``topic`` an ended start of this channel still holds (the membership's
        ``PartitionHolder``): see :mod:`jetkafka.channel._ended_start`."""
        return self._table.held_over(topic)

    def release_requested(self, keys: list[Key], reason: str) -> None:
        queue, membership = self._channel._queue, self._channel._membership
        assert queue is not None and membership is not None
        for key in keys:
            state = self._table.get(key)
            if state is None:
                membership.finish_release(key)
                continue
            state.release_reason = reason
            queue.offer(state)

    def partitions_lost(self, keys: list[Key], reason: str) -> None:
        queue = self._channel._queue
        assert queue is not None
        for key in keys:
            state = self._table.get(key)
            if state is not None:
                state.lost_reason = reason
                queue.offer(state)

    def commits_suspended(self, suspended: bool) -> None:
        self.suspended = suspended

    def remove(self, state: PartitionState) -> None:
        """The lease is over (released or lost): by the worker holding the partition's turn."""
        channel = self._channel
        fetcher = channel._fetcher
        assert fetcher is not None
        channel._add_ons.partition_removed(state.lease)  # recovery: its batch in hand is stored first
        state.remove()
        if self._table.drop(state, channel._budget):  # else taken again already, being fetched anew
            fetcher.unassign(state)
            channel.stats.forget(state.key)

    def may_act(self) -> bool:
        """Whether workers may start work: commits not suspended, and the session's local lease
        running (:class:`~jetkafka.coordination._session_lease.SessionLease`, which bounds every
        partition's lease). Called by the workers and the recovery thread."""
        if self.suspended:
            return False
        controller = self._channel._controller
        if controller is None:
            return False
        if controller.lease.valid():
            if self._lease_lapsed:
                self._lease_lapsed = False
                log.info("ZooKeeper answered again: the local lease runs; starting batches again")
            return True
        if not self._lease_lapsed:
            self._lease_lapsed = True
            lease = controller.lease
            if lease.voided:
                log.warning("ZooKeeper session lost: starting no batch until a new session is established")
            else:
                log.warning(
                    "no answer from ZooKeeper for %.1f s (session timeout %.1f s less lease_margin_s %.1f s): "
                    "the session may have expired unnoticed; starting no batch until ZooKeeper answers",
                    lease.since_contact(),
                    lease.timeout_s,
                    lease.margin_s,
                )
        return False

    def commit_outside_turns(
        self, commits: dict[Key, tuple[Lease, int]], extra: Any, expected: Mapping[Key, int | None] | None = None
    ) -> None:
        """A processor's own commit of several partitions (:meth:`ChannelContext.commit`, on
        the processor's thread): one fenced transaction; a refusal loses the refused lease."""
        membership = self._channel._membership
        assert membership is not None
        committer = self._channel._committer
        if committer is not None:
            # No advance made before this commit may land after it.
            committer.superseded(
                state
                for key, (lease, _) in commits.items()
                if (state := self._table.get(key)) is not None and state.lease is lease
            )
        try:
            membership.offsets.commit_many(commits, extra, expected)
        except CommitFenced as exc:
            self._refused(commits, exc)
            raise
        self._committed_outside_turns(commits)

    def _refused(self, commits: Mapping[Key, tuple[Lease, int]], exc: CommitFenced) -> None:
        """A commit outside the partitions' turns was refused: count it, and lose the lease."""
        key = (exc.topic, exc.partition)
        self._channel.stats.commit_refused(key, exc.cause)
        state = self._table.get(key)
        refused = commits.get(key)
        # Only the lease that was refused is lost; a newer lease of the partition stays.
        if state is not None and refused is not None and state.lease is refused[0]:
            self.partitions_lost([key], exc.reason)

    def _committed_outside_turns(self, commits: dict[Key, tuple[Lease, int]]) -> None:
        """After a processor's own multi-partition commit: it is now the newest commit."""
        for key, (lease, offset) in commits.items():
            state = self._table.get(key)
            if state is not None and state.lease is lease:
                PartitionCommitter.committed_outside_turns(state)
            self._channel._committed(key, offset)
