"""Operator controls of a running channel: pause, resume, reposition.

A pause keeps the partitions owned and the ZooKeeper session open: the batch in hand
finishes, then nothing more is fetched or processed until resume, which continues at the
exact offset where processing stopped. A reposition moves an owned partition to a new offset
under its own lease, so the fencing token stays valid and no other instance is involved; it is
carried out by the partition's own turn (:mod:`jetkafka.channel.moves`).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from jetkafka.channel.moves import Move
from jetkafka.errors import CommitFenced
from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel.fetcher import Fetcher
    from jetkafka.channel.partition import PartitionState
    from jetkafka.channel.work_queue import PartitionQueue
    from jetkafka.coordination.membership import GroupMembership

log = logging.getLogger("jetkafka.channel")


class ChannelControls:
    """Mixed into :class:`InboundChannel`; uses its partition states, fetcher and queue."""

    _states: dict[Key, PartitionState]
    _states_cond: threading.Condition
    _paused_all: bool
    _paused: set[Key]
    _queue: PartitionQueue | None
    _fetcher: Fetcher | None
    _membership: GroupMembership | None

    def pause(self, topic: str | None = None, partition: int | None = None) -> None:
        """Stop fetching and processing (all partitions, a topic, or one partition).

        Partitions stay owned and the session stays open; the batch in hand finishes.
        Partitions taken while paused start paused.
        """
        with self._states_cond:
            if topic is None:
                self._paused_all = True
                keys = list(self._states)
            else:
                keys = [k for k in self._states if k[0] == topic and partition in (None, k[1])]
                if partition is not None:
                    keys = [(topic, partition)]
                self._paused.update(keys)
            states = [self._states[k] for k in keys if k in self._states]
        for state in states:
            self._set_paused(state, True)
        if topic is None and self._membership is not None:
            self._membership.set_paused(True)
        log.info("paused %s", "all partitions" if topic is None else _fmt_keys(keys))

    def resume(self, topic: str | None = None, partition: int | None = None) -> None:
        """Undo :meth:`pause`; processing continues at the exact offset it stopped at."""
        with self._states_cond:
            if topic is None:
                self._paused_all = False
                self._paused.clear()
                keys = list(self._states)
            else:
                keys = [k for k in self._states if k[0] == topic and partition in (None, k[1])]
                # Also partitions not held now: they must not start paused when taken later.
                self._paused = {k for k in self._paused if not (k[0] == topic and partition in (None, k[1]))}
            states = [self._states[k] for k in keys if k in self._states]
        for state in states:
            if not self._is_paused(state.key):
                self._set_paused(state, False)
        if topic is None and self._membership is not None:
            self._membership.set_paused(False)
        log.info("resumed %s", "all partitions" if topic is None else _fmt_keys(keys))

    @property
    def paused(self) -> bool:
        return self._paused_all

    def reposition(
        self,
        topic: str,
        partition: int,
        offset: int,
        extra: Any = None,
        timeout: float = 30.0,
        reason: str = "reset",
    ) -> int | None:
        """Move an owned partition to ``offset`` and return the offset committed before.

        The move is carried out by the partition's next turn (see :mod:`jetkafka.channel.moves`):
        after the batch in hand, ahead of a release, also while paused or halted. It commits
        ``offset`` fenced (with ``extra`` operations in the same transaction), drops what was
        buffered, calls the processor's ``on_reposition`` and fetches on from ``offset``; a
        paused partition stays paused there.

        Raises :class:`CommitFenced` if the partition is not (or no longer) owned here, and
        :class:`TimeoutError` if its turn does not come within ``timeout`` (the batch in hand
        runs longer); then nothing was moved.
        """
        move = self.file_move(topic, partition, offset, extra, reason)
        if not move.wait(timeout) and move.cancel():
            raise TimeoutError(f"{topic}[{partition}]: batch in hand did not finish within {timeout:g} s")
        move.wait(None)  # started before the time was up: a commit, it ends soon
        return move.outcome()

    def file_move(self, topic: str, partition: int, offset: int, extra: Any = None, reason: str = "reset") -> Move:
        """File a reposition on an owned partition and return at once; the partition's next
        turn carries it out (see :meth:`reposition`). Wait for it with ``move.wait(timeout)``,
        then ``move.outcome()`` (the offset committed before, or the error it failed with).

        Raises :class:`CommitFenced` if the partition is not (or no longer) owned here.
        """
        assert self._queue is not None
        state = self._states.get((topic, partition))
        if state is None or state.lost_reason:
            raise CommitFenced(topic, partition, "reposition refused: partition not owned by this instance", "not_held")
        move = Move(offset, extra, reason)
        state.moves.append(move)
        if state.removed:  # given up while filing: its removal may have emptied moves before
            state.remove()
        self._queue.offer(state)
        return move

    def _is_paused(self, key: Key) -> bool:
        return self._paused_all or key in self._paused

    def _set_paused(self, state: PartitionState, paused: bool) -> None:
        assert self._fetcher is not None and self._queue is not None
        if state.paused == paused:
            return
        state.paused = paused
        if paused:
            self._fetcher.pause(state.key)
        else:
            self._fetcher.resume(state.key)
            self._queue.offer(state)

def _fmt_keys(keys: list[Key]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(keys)) or "no partitions"
