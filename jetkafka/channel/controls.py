"""Operator controls of a running channel: pause, resume, reposition.

A pause keeps the partitions owned and the ZooKeeper session open: the batch in hand
finishes, then nothing more is fetched or processed until resume, which continues at the
exact offset where processing stopped. A reposition moves an owned partition to a new offset
under its own lease, so the fencing token stays valid and no other instance is involved.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jetkafka.errors import CommitFenced

if TYPE_CHECKING:
    from jetkafka.channel.commit_pipeline import CommitPipeline
    from jetkafka.channel.fetcher import Fetcher
    from jetkafka.channel.partition import PartitionState
    from jetkafka.channel.work_queue import PartitionQueue
    from jetkafka.coordination.membership import GroupMembership
    from jetkafka.coordination.ownership import Lease

log = logging.getLogger("jetkafka.channel")

Key = tuple[str, int]


class ChannelControls:
    """Mixed into :class:`InboundChannel`; uses its partition states, fetcher and queue."""

    _states: dict[Key, PartitionState]
    _states_cond: threading.Condition
    _paused_all: bool
    _paused: set[Key]
    _queue: PartitionQueue | None
    _fetcher: Fetcher | None
    _membership: GroupMembership | None
    _commit_many: Callable[..., None]
    _pipeline: CommitPipeline | None

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
    ) -> int | None:
        """Move an owned partition to ``offset``: pause it, let its batch in hand finish,
        commit ``offset`` fenced (with ``extra`` operations in the same transaction), drop
        what was buffered, and resume there. Returns the offset committed before.

        Raises :class:`CommitFenced` if the partition is not (or no longer) owned here, and
        :class:`TimeoutError` if the batch in hand does not finish within ``timeout``.
        """
        assert self._queue is not None and self._fetcher is not None
        key = (topic, partition)
        state = self._states.get(key)
        if state is None or state.lost_reason:
            raise CommitFenced(topic, partition, "reposition refused: partition not owned by this instance")
        was_paused = self._is_paused(key)
        self.pause(topic, partition)
        try:
            if not self._queue.wait_idle(state, timeout):
                raise TimeoutError(f"{topic}[{partition}]: batch in hand did not finish within {timeout:g} s")
            if self._pipeline is not None:
                self._pipeline.settle(state)  # a commit still travelling would land after this one
            old = state.committed
            self._commit_many({key: (state.lease, offset)}, extra)
            state.commit_pending = None
            state.reposition(offset)
            self._fetcher.seek(key, offset)
            log.info("%s[%d]: repositioned from committed offset %s to %d", topic, partition, old, offset)
            return old
        finally:
            if not was_paused:
                self.resume(topic, partition)

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
