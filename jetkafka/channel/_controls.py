"""Operator controls of a running channel: pause, resume, reposition.

:class:`ChannelControls` belongs to an :class:`InboundChannel`, which hands it ``pause``,
``resume`` and ``reposition``. Pauses are recorded in the :class:`PartitionTable`, a
partition's ``paused`` flag is set only here (and applied to the fetcher here), and a
reposition is filed as a :class:`Move` on the partition for its turn. Its methods may be
called from any thread (the API, the reset responder's thread, the controller thread for
ZooKeeper's pause markers). It owns one field, ``marker_paused``: what the pause markers in
ZooKeeper last asked for, written on kazoo's thread by :meth:`paused_from_zookeeper` and read
by the channel's next start.

A pause keeps the partitions owned and the ZooKeeper session open: the batch in hand
finishes, then nothing more is fetched or processed until resume, which continues at the
exact offset where processing stopped. A reposition moves an owned partition to a new offset
under its own lease, so the fencing token stays valid and no other instance is involved; it is
carried out by the partition's own turn (:mod:`jetkafka.channel._moves`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from jetkafka.channel._moves import Move
from jetkafka.errors import CommitFenced
from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel._internals import ChannelInternals
    from jetkafka.channel._partition import PartitionState
    from jetkafka.channel._partition_table import PartitionTable

log = logging.getLogger("jetkafka.channel")


class ChannelControls:
    """Pause, resume and reposition for ``channel``, over its partition ``table``; uses the
    fetcher, work queue and membership of the channel's current start."""

    def __init__(self, channel: ChannelInternals, table: PartitionTable) -> None:
        self._channel = channel
        self._table = table
        # What the pause markers in ZooKeeper last asked for (a pause through the API is not
        # theirs to undo): the next start's watch compares the markers with it.
        self.marker_paused = False

    def paused_from_zookeeper(self, paused: bool) -> None:
        """The pause markers changed (a watch callback, on kazoo's thread)."""
        self.marker_paused = paused
        # Pausing writes to ZooKeeper, which a kazoo callback must not wait for: hand it over.
        controller = self._channel._controller
        if controller is not None:
            controller.call(self.pause if paused else self.resume)

    def pause(self, topic: str | None = None, partition: int | None = None) -> None:
        """See :meth:`InboundChannel.pause`."""
        keys, states = self._table.mark_paused(topic, partition)
        for state in states:
            self.set_paused(state, True)
        membership = self._channel._membership
        if topic is None and membership is not None:
            membership.set_paused(True)
        log.info("paused %s", "all partitions" if topic is None else _fmt_keys(keys))

    def resume(self, topic: str | None = None, partition: int | None = None) -> None:
        """See :meth:`InboundChannel.resume`."""
        keys, states = self._table.mark_resumed(topic, partition)
        for state in states:
            if not self._table.is_paused(state.key):
                self.set_paused(state, False)
        membership = self._channel._membership
        if topic is None and membership is not None:
            membership.set_paused(False)
        log.info("resumed %s", "all partitions" if topic is None else _fmt_keys(keys))

    def reposition(
        self,
        topic: str,
        partition: int,
        offset: int,
        extra: Any = None,
        timeout: float = 30.0,
        reason: str = "reset",
    ) -> int | None:
        """See :meth:`InboundChannel.reposition`."""
        move = self.file_move(topic, partition, offset, extra, reason)
        if not move.wait(timeout) and move.cancel():
            raise TimeoutError(f"{topic}[{partition}]: batch in hand did not finish within {timeout:g} s")
        move.wait(None)  # started before the time was up: a commit, it ends soon
        return move.outcome()

    def file_move(self, topic: str, partition: int, offset: int, extra: Any = None, reason: str = "reset") -> Move:
        """See :meth:`InboundChannel.file_move`."""
        queue = self._channel._queue
        assert queue is not None
        state = self._table.get((topic, partition))
        if state is None or state.lost_reason:
            raise CommitFenced(topic, partition, "reposition refused: partition not owned by this instance", "not_held")
        move = Move(offset, extra, reason)
        state.moves.append(move)
        if state.removed:  # given up while filing: its removal may have emptied moves before
            state.remove()
        queue.offer(state)
        return move

    def set_paused(self, state: PartitionState, paused: bool) -> None:
        """Pause or resume one leased partition's fetching and processing (the one writer of
        ``state.paused``)."""
        fetcher, queue = self._channel._fetcher, self._channel._queue
        assert fetcher is not None and queue is not None
        if state.paused == paused:
            return
        state.paused = paused
        if paused:
            fetcher.pause(state)
        else:
            fetcher.resume(state)
            queue.offer(state)


def _fmt_keys(keys: list[Key]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(keys)) or "no partitions"
