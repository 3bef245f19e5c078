"""The channel's side of group membership: partitions taken, released and lost.

:class:`GroupMembership` calls these methods (its ``PartitionHolder``) from the controller
thread; they only set state and queue the partition, and the worker holding its turn does the
rest, so a partition's events and its hand-over never run in two threads at once.

Guarantees:

* A partition taken starts at its committed offset; one without a commit starts at
  ``auto_offset_reset``, committed before any event is handed over, so a later owner starts at
  the same place. A take-over of a lagging partition may start where recovery says instead.
* A release lets the worker in hand finish its batch and call ``on_stream_termination`` before
  the owner node is given up; a loss (session expired, lease taken) commits nothing more.
* Events the fetcher still delivers from an earlier assignment of a partition taken again are
  dropped until the fetcher has moved to the new start offset.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from jetkafka.channel.partition import PartitionState
from jetkafka.channel.start_offsets import commit_start_offsets
from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel.add_ons import AddOns
    from jetkafka.channel.budget import BufferBudget
    from jetkafka.channel.fetcher import Fetcher
    from jetkafka.channel.stats import ChannelStats
    from jetkafka.channel.work_queue import PartitionQueue
    from jetkafka.config import JetkafkaConfig
    from jetkafka.coordination.membership import GroupMembership
    from jetkafka.coordination.ownership import Lease

log = logging.getLogger("jetkafka.channel")


class PartitionHoldings:
    """Mixed into :class:`InboundChannel`; uses its partition states, fetcher and queue."""

    config: JetkafkaConfig
    stats: ChannelStats
    _states: dict[Key, PartitionState]
    _states_cond: threading.Condition
    _budget: BufferBudget
    _fetcher: Fetcher | None
    _queue: PartitionQueue | None
    _membership: GroupMembership | None
    _add_ons: AddOns
    _suspended: bool
    _committed: Callable[[Key, int], None]
    _is_paused: Callable[[Key], bool]
    _set_paused: Callable[[PartitionState, bool], None]

    def _state(self, key: Key) -> PartitionState | None:
        return self._states.get(key)

    def partition_counts(self, topics: tuple[str, ...], missing_ok: bool = False) -> Mapping[str, int]:
        assert self._fetcher is not None
        return self._fetcher.partition_counts(topics, missing_ok=missing_ok)

    def partitions_taken(self, leases: list[Lease]) -> None:
        """Start working on the partitions a rebalance took (on the controller thread).

        Every lease ends one of two ways: *adopted* (a :class:`PartitionState` is queued and
        the membership is told) or *given up* (its owner node deleted through
        ``finish_release``, so that it is taken again at a later rebalance, here or by another
        instance). Given up: a partition whose start offset cannot be looked up (the broker
        slow or unreachable, a partition without a leader yet) or committed, or whose recovery
        check fails. One ERROR per failure names the partitions, the cause and what follows.
        """
        assert self._fetcher is not None and self._queue is not None and self._membership is not None
        membership = self._membership
        cfg = self.config.channel
        # Already given up again (the channel is leaving the group): skip.
        leases = [lease for lease in leases if membership.lease(lease.key) is lease]
        fresh = [lease for lease in leases if lease.committed is None]
        try:
            starts = commit_start_offsets(fresh, self._fetcher, membership.offsets, cfg.auto_offset_reset, self._committed)
        except Exception as exc:  # the look-up of the log ends failed: nothing was committed
            if fresh:
                log.error(
                    "cannot look up where %s start (%s: %s); giving them up, to be taken again at a later rebalance",
                    ", ".join(f"{t}[{p}]" for t, p in sorted(lease.key for lease in fresh)),
                    type(exc).__name__,
                    exc,
                )
            starts = {}
        positions: dict[Key, int] = {}
        queued: list[PartitionState] = []
        for lease in leases:
            offset = lease.committed
            if lease.key in starts:
                offset = starts[lease.key]
            elif offset is None:  # its start offset was not committed (logged)
                membership.finish_release(lease.key, lease)
                continue
            else:  # an add-on may start it elsewhere (recovery: a backlog over max_partition_lag)
                try:
                    offset = self._add_ons.start_offset(lease)
                except Exception as exc:
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
            state = PartitionState(lease, offset, cfg.buffer_max_events, cfg.buffer_max_bytes, self._budget)
            # Until the fetcher applies the assign below, it may still deliver from an earlier
            # assignment of this partition (lost and taken again), past ``offset``: drop that.
            state.seek_pending = True
            with self._states_cond:
                old = self._states.get(lease.key)
                self._states[lease.key] = state
                self._budget.set_partitions(len(self._states))
                # Decided with the state in the table, under its lock: a pause() or resume()
                # from another thread either sees the state or comes before the decision.
                if self._is_paused(lease.key):
                    self._set_paused(state, True)
            membership.adopted(lease)
            if old is not None:  # lost and taken again before a worker handled the loss
                old.lost_reason = old.lost_reason or "taken again"
            positions[lease.key] = offset
            queued.append(state)
        # One command for all: the first fetch then asks for every partition taken.
        if positions:
            self._fetcher.assign(positions)
        # Resets issued while the partition had another owner: filed before its first turn.
        self._add_ons.partitions_taken([state.key for state in queued])
        for state in queued:
            self._queue.offer(state)

    def release_requested(self, keys: list[Key], reason: str) -> None:
        assert self._queue is not None and self._membership is not None
        for key in keys:
            state = self._states.get(key)
            if state is None:
                self._membership.finish_release(key)
                continue
            state.release_reason = reason
            self._queue.offer(state)

    def partitions_lost(self, keys: list[Key], reason: str) -> None:
        assert self._queue is not None
        for key in keys:
            state = self._states.get(key)
            if state is not None:
                state.lost_reason = reason
                self._queue.offer(state)

    def commits_suspended(self, suspended: bool) -> None:
        self._suspended = suspended

    def _remove(self, state: PartitionState) -> None:
        assert self._fetcher is not None
        self._add_ons.partition_removed(state.lease)  # recovery: its batch in hand is stored first
        state.remove()
        with self._states_cond:
            current = self._states.get(state.key) is state
            if current:
                del self._states[state.key]
                self._budget.set_partitions(len(self._states))
            self._states_cond.notify_all()
        if current:  # else the partition was taken again already and is being fetched anew
            self._fetcher.unassign(state.key)
            self.stats.forget(state.key)
