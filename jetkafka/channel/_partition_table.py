"""The partitions a channel holds a lease on, and which of them are paused.

:class:`PartitionTable` is the one owner of the channel's map of leased partitions (key ->
:class:`PartitionState`) and of its pauses (the whole channel, or a set of partitions, kept
also for partitions not leased now so that they start paused when taken). Nobody else writes
either; everyone changes them through the table's methods.

Threads:

* ``adopt`` runs on the controller thread (a rebalance took the partition); ``drop`` on the
  worker holding the partition's turn (released or lost); ``mark_paused`` / ``mark_resumed``
  on any thread (the API, the controller thread for ZooKeeper's pause markers).
* Every write, and every read that must see the table whole (``keys``, ``states``,
  ``wait_empty``), holds ``cond``; ``drop`` notifies it, so a shutdown waiting for the table
  to empty wakes. ``get`` and ``is_paused`` read without it: one dict or set look-up is atomic
  in CPython, and their callers (the fetcher, the controller thread, a processor) act on a
  state that may leave the table the next moment anyway; that is what ``removed`` and
  ``lost_reason`` on the state are for.
* A decision that depends on both the table and a pause is taken under ``cond``: a partition
  adopted while paused is paused before ``cond`` is released (``adopt``'s ``pause``), so a
  :meth:`mark_resumed` on another thread either sees the new state or comes before it.

States of an ended start: a start of the channel (:meth:`InboundChannel.start`) ends with a
resubscribe or a shutdown, after waiting ``shutdown_timeout_s`` for its partitions' releases. A
state still in the table then is *held over* (:meth:`hold_over`, by the thread ending the
start): it stays leased (a resubscribe keeps its owner node until the start's workers hand it
over, :mod:`jetkafka.channel._ended_start`) and leaves through ``drop`` as any other. A shutdown
*gives it up* (:meth:`give_up`): it leaves the leased partitions at once, and is kept apart,
only while a worker of its start still has it in hand, so that :meth:`in_earlier_start` can
answer. A rebalance never adopts a partition whose state of an ended start may still be inside
the processor's code (:meth:`in_earlier_start`): the work queue, which keeps one thread per
partition, is one per start.

Lock order: ``cond`` is taken first; under it the table calls only the budget's
``set_partitions`` and ``adopt``'s ``pause`` (the fetcher's command queue), never the work
queue's lock nor a partition's buffer lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from jetkafka.channel._partition import Turn
from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel._budget import BufferBudget
    from jetkafka.channel._partition import PartitionState


class PartitionTable:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._states: dict[Key, PartitionState] = {}
        self._paused_all = False
        self._paused: set[Key] = set()
        # Leased states of ended starts (held over), and states given up while their start's
        # worker may still have them in hand; by identity (see the module's docstring).
        self._held_over: dict[Key, PartitionState] = {}
        self._given_up: dict[Key, PartitionState] = {}

    # -- the leased partitions ---------------------------------------------------------------

    def get(self, key: Key) -> PartitionState | None:
        """The state of a leased partition (without the lock: see the module's docstring)."""
        return self._states.get(key)

    def keys(self) -> list[Key]:
        """The leased partitions now, sorted."""
        with self.cond:
            return sorted(self._states)

    def states(self) -> list[PartitionState]:
        """The states now, sorted by partition."""
        with self.cond:
            return [s for _, s in sorted(self._states.items())]

    def adopt(
        self, state: PartitionState, budget: BufferBudget, pause: Callable[[PartitionState], None]
    ) -> PartitionState | None:
        """Put a newly leased partition's state in the table (on the controller thread); calls
        ``pause(state)`` under the lock if it is to start paused. Returns the state it replaces
        (lost and taken again before a worker handled the loss), if any."""
        with self.cond:
            old = self._states.get(state.key)
            self._states[state.key] = state
            budget.set_partitions(len(self._states))
            # Decided with the state in the table, under its lock: a pause() or resume()
            # from another thread either sees the state or comes before the decision.
            if self.is_paused(state.key):
                pause(state)
        return old

    def drop(self, state: PartitionState, budget: BufferBudget) -> bool:
        """Take ``state`` out of the table (by the worker holding its turn, once released or
        lost); False if the partition was leased again already and has a newer state."""
        with self.cond:
            current = self._states.get(state.key) is state
            if current:
                del self._states[state.key]
                budget.set_partitions(len(self._states))
            for apart in (self._held_over, self._given_up):
                if apart.get(state.key) is state:
                    del apart[state.key]
            self.cond.notify_all()
        return current

    def wait_empty(self, deadline: float) -> list[Key]:
        """Wait until no partition is leased or ``deadline`` (monotonic) passed; what is left, sorted."""
        with self.cond:
            while self._states and time.monotonic() < deadline:
                self.cond.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            return sorted(self._states)

    def wait_gone(self, states: list[PartitionState], timeout: float) -> bool:
        """Wait until none of ``states`` is leased any more (dropped or given up); False on timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while any(self._states.get(s.key) is s for s in states):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(0.5, left))
            return True

    # -- states of ended starts --------------------------------------------------------------

    def hold_over(self) -> list[PartitionState]:
        """A start ends: the states leased now that are not held over yet become so (the
        ending start's); returns them, sorted."""
        with self.cond:
            ending = [s for _, s in sorted(self._states.items()) if self._held_over.get(s.key) is not s]
            for state in ending:
                self._held_over[state.key] = state
            return ending

    def give_up(self, states: list[PartitionState], budget: BufferBudget | None) -> None:
        """``states`` of ended starts are no longer leased (their owner nodes are being given
        up): out of the leased partitions now; kept apart while a worker has them in hand."""
        with self.cond:
            for state in states:
                if self._held_over.get(state.key) is state:
                    del self._held_over[state.key]
                if self._states.get(state.key) is state:
                    del self._states[state.key]
                if (state.turn is Turn.IN_HAND or state.lanes_busy()) and not state.removed:
                    self._given_up[state.key] = state
            if budget is not None:
                budget.set_partitions(len(self._states))
            self.cond.notify_all()

    def held_over(self, topic: str) -> set[int]:
        """Partitions of ``topic`` leased by an ended start (a resubscribe's, handing them over)."""
        with self.cond:
            return {p for t, p in self._held_over if t == topic}

    def in_earlier_start(self, key: Key) -> bool:
        """Whether an ended start may still run the processor's code on the partition: a state
        held over until its worker hands it over, or one given up while a worker had it in hand
        and still has. A new lease of the partition must wait for that."""
        with self.cond:
            held = self._held_over.get(key)
            if held is not None and not held.removed:
                return True
            given_up = self._given_up.get(key)
            busy = given_up is not None and (given_up.turn is Turn.IN_HAND or given_up.lanes_busy())
            if given_up is not None and (not busy or given_up.removed):
                del self._given_up[key]  # its worker is done with it: nothing more runs on it
                given_up = None
            return given_up is not None

    # -- pauses ------------------------------------------------------------------------------

    @property
    def paused_all(self) -> bool:
        return self._paused_all

    def is_paused(self, key: Key) -> bool:
        """Whether the partition is (or would start) paused."""
        return self._paused_all or key in self._paused

    def mark_paused(self, topic: str | None, partition: int | None) -> tuple[list[Key], list[PartitionState]]:
        """Record a pause (all partitions, a topic, or one partition); returns the keys it names
        and the states leased now among them, for the caller to pause."""
        with self.cond:
            if topic is None:
                self._paused_all = True
                keys = list(self._states)
            else:
                keys = [k for k in self._states if k[0] == topic and partition in (None, k[1])]
                if partition is not None:
                    keys = [(topic, partition)]
                self._paused.update(keys)
            return keys, [self._states[k] for k in keys if k in self._states]

    def mark_resumed(self, topic: str | None, partition: int | None) -> tuple[list[Key], list[PartitionState]]:
        """Undo :meth:`mark_paused`; returns the keys it names and the states leased now among
        them (some may stay paused by a wider pause: check :meth:`is_paused`)."""
        with self.cond:
            if topic is None:
                self._paused_all = False
                self._paused.clear()
                keys = list(self._states)
            else:
                keys = [k for k in self._states if k[0] == topic and partition in (None, k[1])]
                # Also partitions not leased now: they must not start paused when taken later.
                self._paused = {k for k in self._paused if not (k[0] == topic and partition in (None, k[1]))}
            return keys, [self._states[k] for k in keys if k in self._states]
