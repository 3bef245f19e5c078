"""Offset commits that travel while the next batch is processed.

A worker that gets ``advance()`` hands the offset to the pipeline and goes on with the
partition's next batch; the commit is the same fenced ZooKeeper transaction as a synchronous
one (:meth:`OffsetStore.commit_async`). Waiting for ZooKeeper after every batch is what limits
a channel's throughput, not the processing: see docs/performance.md.

Guarantee: a partition's commits land in the order its worker made them, each only after the
batches before its offset were processed, and only while this instance still owns the
partition. At most one commit per partition is in flight; an advance made meanwhile waits, and
a later one replaces it, since only the newest offset needs writing. The delivery guarantee
stays at-least-once: the events a new owner re-reads are those processed since the last commit
that landed, as without pipelining (at most the batches processed during one ZooKeeper round
trip more).

Failure modes: a commit refused by the fence marks the partition lost; its worker calls
``on_exception`` with :class:`PartitionLost` at the next turn. A commit without an answer
(ZooKeeper unreachable) becomes the partition's pending commit, which the worker retries
synchronously and reconciles when the lost reply had in fact landed. Before any synchronous
write for a partition (a processor's own commit, a release, an owner-node delete) the worker
calls :meth:`CommitPipeline.settle`, so a commit in flight is answered first and a waiting one
becomes the pending commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from jetkafka.channel.partition import PartitionState
from jetkafka.coordination.offsets import CommitUncertain, OffsetStore
from jetkafka.coordination.ownership import Lease
from jetkafka.errors import CommitFenced

log = logging.getLogger("jetkafka.channel")

Key = tuple[str, int]


class CommitPipeline:
    def __init__(
        self,
        store: OffsetStore,
        on_committed: Callable[[Key, int], None],
        on_refused: Callable[[Key], None],
        offer: Callable[[PartitionState], None],
    ) -> None:
        self._store = store
        self._on_committed = on_committed
        self._on_refused = on_refused
        self._offer = offer
        self._answer = threading.Condition()
        self._in_flight: set[PartitionState] = set()
        self._waiting: dict[PartitionState, int] = {}  # the next offset to send, per partition

    def submit(self, state: PartitionState, offset: int) -> None:
        """Commit ``offset`` for ``state`` without waiting (by the worker holding its turn)."""
        with self._answer:
            if state.commit_pending is not None:
                # A synchronous retry is due at the partition's next turn: let it write the newest.
                state.commit_pending = offset
                return
            if state in self._in_flight:
                self._waiting[state] = offset
                return
            self._in_flight.add(state)
        self._send(state, offset)

    def settle(self, state: PartitionState) -> None:
        """Wait for the answer to the partition's commit in flight (by the worker holding its
        turn, before any other write for it); a waiting offset becomes ``commit_pending``."""
        with self._answer:
            waiting = self._waiting.pop(state, None)  # not sent when the answer comes: kept here
            if not self._answer.wait_for(lambda: state not in self._in_flight, Lease.SETTLE_TIMEOUT_S):
                # The lease gives up on the answer as well; the next write reconciles.
                self._in_flight.discard(state)
            if waiting is not None:
                state.commit_pending = waiting

    def _send(self, state: PartitionState, offset: int) -> None:
        self._store.commit_async(state.lease, offset, lambda error: self._answered(state, offset, error))

    def _answered(self, state: PartitionState, offset: int, error: Exception | None) -> None:
        """On the ZooKeeper client's completion thread."""
        send: int | None = None
        with self._answer:
            if error is None:
                self._on_committed(state.key, offset)
            elif isinstance(error, CommitFenced):
                self._on_refused(state.key)
                log.error(
                    "%s[%d]: commit of offset %d refused: partition no longer owned by this instance",
                    state.topic,
                    state.partition,
                    offset,
                )
                state.lost_reason = state.lost_reason or error.reason
            else:
                log.warning(
                    "%s[%d]: commit of offset %d not confirmed (%s); retrying it",
                    state.topic,
                    state.partition,
                    offset,
                    error,
                )
            waiting = self._waiting.pop(state, None)
            if error is None and waiting is not None:
                send = waiting
            else:
                self._in_flight.discard(state)
                if isinstance(error, CommitUncertain):
                    state.commit_pending = waiting if waiting is not None else offset
                    state.not_before = time.monotonic() + 0.5
                self._answer.notify_all()
        if send is not None:
            self._send(state, send)
        elif error is not None:
            self._offer(state)
