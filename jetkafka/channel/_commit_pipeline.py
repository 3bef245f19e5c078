"""Offset commits that travel while the next batch is processed.

A worker that gets ``advance()`` hands the offset to the pipeline and goes on with the
partition's next batch; the commit is the same fenced ZooKeeper transaction as a synchronous
one (:meth:`OffsetStore.commit_async`). Waiting for ZooKeeper after every batch is what limits
a channel's throughput, not the processing: see docs/performance.md. A pipeline belongs to the
:class:`~jetkafka.channel._committer.PartitionCommitter`, which alone builds, calls and closes
it: the two are the only writers of a partition's commit state.

Guarantee: a partition's commits land in the order its worker made them, each only after the
batches before its offset were processed, and only while this instance still owns the
partition. At most one commit per partition is in flight. An advance is sent when the
partition's previous commit went out at least ``commit_interval_ms``
(``channel.commit_interval_ms``) ago; otherwise it waits, and a later one replaces it, since
only the newest offset needs writing. A waiting advance is sent when the interval is up,
whether or not more batches come.

One exception, the end of a backlog: an advance made when the partition has *drained*
(:meth:`PartitionState.drained`: nothing fetched waits for the processor, and the fetch reached
the log's end as the broker last reported it) is sent at once (after the answer to the commit
in flight, if any) when the partition is in a backlog: its last commit carried an advance made
while records were still waiting (a *busy* one), and either that commit went out at once, an
interval or more after the one before it, or the commit before it was busy too (the records
kept the partition busy for at least an interval). So a backlog commits once per interval and
its last offset at once; a partition that drains after every batch (a trickle), or in bursts
that fit between two commits, commits at most once per interval, as before; and, since an
early commit needs a busy commit before it that went out on the interval rule, a partition
never sends more than two commits within one interval. No advance waits longer than before: at
most the interval after the previous commit went out, or until that commit's answer if it
comes later. (A transactionally written log ends with a commit marker that is never delivered,
so such a partition never counts as drained and keeps to the interval.)
The delivery guarantee stays at-least-once: after a crash, the events a new owner re-reads are
those processed since the last commit that landed, as without pipelining, so at most
``commit_interval_ms`` plus one ZooKeeper round trip of processing more.

A commit the processor makes outside the partition's turns (:meth:`ChannelContext.commit`, one
transaction for several partitions, on any thread) supersedes the advances made before it:
:meth:`CommitPipeline.supersede` drops the one waiting for its interval and waits for the answer
to the one in flight, and the committer drops a pending one, so none of them lands after it
(see :meth:`PartitionCommitter.superseded` for why dropping, not sending first).

Failure modes: a commit refused by the fence marks the partition lost; its worker calls
``on_exception`` with :class:`PartitionLost` at the next turn. A commit without an answer
(ZooKeeper unreachable) becomes the partition's pending commit, which the worker retries
synchronously and reconciles when the lost reply had in fact landed. Before any synchronous
write for a partition (a processor's own commit, a release, an owner-node delete, a move) the
committer calls :meth:`CommitPipeline.settle`, so a commit in flight is answered first and a
waiting one becomes the pending commit.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from jetkafka.channel._partition import PartitionState
from jetkafka.coordination._errors import CommitAnswerLate, CommitUncertain
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import Lease
from jetkafka.errors import CommitFenced
from jetkafka.events import Key

log = logging.getLogger("jetkafka.channel")


class CommitPipeline:
    def __init__(
        self,
        store: OffsetStore,
        on_committed: Callable[[Key, int], None],
        on_refused: Callable[[Key, str], None],
        offer: Callable[[PartitionState], None],
        interval_s: float = 0.0,
    ) -> None:
        self._store = store
        self._on_committed = on_committed
        self._on_refused = on_refused
        self._offer = offer
        self._interval_s = interval_s
        self._answer = threading.Condition()
        self._in_flight: set[PartitionState] = set()
        self._waiting: dict[PartitionState, int] = {}  # the next offset to send, per partition
        # Whether the newest advance handed over (waiting, or the one sent last) found the
        # partition drained; whether the last commit sent carried a busy one (made while records
        # were still waiting); and whether the partition is in a backlog (module docstring),
        # which lets a drained advance go at once.
        self._drained: dict[PartitionState, bool] = {}
        self._sent_busy: dict[PartitionState, bool] = {}
        self._backlog: dict[PartitionState, bool] = {}
        self._sent_at: dict[PartitionState, float] = {}
        # Waiting advances of partitions with nothing in flight, sent when their interval is up.
        self._due: list[tuple[float, int, PartitionState]] = []
        self._seq = itertools.count()
        self._closed = False
        self._timer = threading.Thread(target=self._send_when_due, name="jetkafka-commit-timer", daemon=True)
        self._timer.start()

    def submit(self, state: PartitionState, offset: int, drained: bool) -> None:
        """Commit ``offset`` for ``state`` without waiting (by the worker holding its turn);
        ``drained``: the partition had drained when the advance was made (the module's
        docstring says what that changes)."""
        with self._answer:
            if state.commit_pending is not None:
                # A synchronous retry is due at the partition's next turn: let it write the newest.
                state.commit_pending = offset
                return
            self._drained[state] = drained
            if state in self._in_flight:
                self._waiting[state] = offset
                return
            if self._hold(state, offset):
                return
            self._sending(state, time.monotonic(), after_quiet=True)
        self._send(state, offset)

    def _sending(self, state: PartitionState, now: float, after_quiet: bool = False) -> None:
        """The newest advance of ``state`` goes out now (under ``_answer``); ``after_quiet``:
        at once as it was made, nothing in flight and the interval up (or no commit before)."""
        busy = not self._drained.get(state, False)
        self._backlog[state] = busy and (after_quiet or self._sent_busy.get(state, False))
        self._sent_busy[state] = busy
        self._in_flight.add(state)
        self._sent_at[state] = now

    def _hold(self, state: PartitionState, offset: int) -> bool:
        """Keep ``offset`` waiting if the partition's last commit went out less than the
        interval ago (under ``_answer``); the timer sends it then. Otherwise the caller sends
        it, and an older advance still waiting is dropped: it must not land after this one."""
        at = self._next_send_at(state)
        if at <= time.monotonic():
            self._waiting.pop(state, None)
            return False
        if state not in self._waiting:
            heapq.heappush(self._due, (at, next(self._seq), state))
            self._answer.notify_all()
        self._waiting[state] = offset
        return True

    def _next_send_at(self, state: PartitionState) -> float:
        """When the partition's newest advance may go out (under ``_answer``): the interval
        after its last commit; at once if it found the partition drained at the end of a
        backlog."""
        sent_at = self._sent_at.get(state)
        if sent_at is None:
            return 0.0
        if self._drained.get(state, False) and self._backlog.get(state, False):
            return sent_at
        return sent_at + self._interval_s

    def _send_when_due(self) -> None:
        while True:
            sends: list[tuple[PartitionState, int]] = []
            with self._answer:
                while not self._closed and (not self._due or self._due[0][0] > time.monotonic()):
                    self._answer.wait(self._due[0][0] - time.monotonic() if self._due else None)
                if self._closed:
                    return
                now = time.monotonic()
                while self._due and self._due[0][0] <= now:
                    _, _, state = heapq.heappop(self._due)
                    # Settled, sent or re-timed since: nothing to do for this entry.
                    if state in self._in_flight or state not in self._waiting:
                        continue
                    at = self._next_send_at(state)
                    if at > now:
                        heapq.heappush(self._due, (at, next(self._seq), state))
                        continue
                    self._sending(state, now)
                    sends.append((state, self._waiting.pop(state)))
            for state, offset in sends:
                self._send(state, offset)

    def set_interval(self, interval_s: float) -> None:
        """A new ``commit_interval_ms`` (hot deploy): waiting advances are re-timed to it."""
        with self._answer:
            self._interval_s = interval_s
            for state in self._waiting:
                if state not in self._in_flight:
                    heapq.heappush(self._due, (self._next_send_at(state), next(self._seq), state))
            self._answer.notify_all()

    def close(self) -> None:
        """Stop the timer; a waiting advance not settled by then is not sent (at-least-once)."""
        with self._answer:
            self._closed = True
            self._answer.notify_all()
        self._timer.join(timeout=5)

    def settle(self, state: PartitionState) -> None:
        """Wait for the answer to the partition's commit in flight (by the worker holding its
        turn, before any other write for it); a waiting offset becomes ``commit_pending``."""
        with self._answer:
            waiting = self._waiting.pop(state, None)  # not sent when the answer comes: kept here
            if not self._answer.wait_for(lambda: state not in self._in_flight, Lease.SETTLE_TIMEOUT_S):
                # The lease gives up on the answer as well; the next write reconciles.
                self._in_flight.discard(state)
            self._sent_at.pop(state, None)
            self._sent_busy.pop(state, None)
            self._backlog.pop(state, None)
            self._drained.pop(state, None)
            if waiting is not None:
                state.commit_pending = waiting

    def supersede(self, state: PartitionState) -> None:
        """A write made outside the partition's turns (:meth:`ChannelContext.commit`, on a
        processor's thread) is about to be sent: no advance made before it may land after it.
        The advance waiting for its interval is dropped (the new write replaces it, as a newer
        advance replaces a waiting one) and the answer to the commit in flight awaited (an
        answer that sends the waiting one or files a pending commit must come first: the
        committer drops that pending commit after this, :meth:`PartitionCommitter.superseded`)."""
        with self._answer:
            self._waiting.pop(state, None)
            if not self._answer.wait_for(lambda: state not in self._in_flight, Lease.SETTLE_TIMEOUT_S):
                self._in_flight.discard(state)  # the lease gives up on the answer as well
            self._waiting.pop(state, None)

    def _send(self, state: PartitionState, offset: int) -> None:
        self._store.commit_async(state.lease, offset, lambda error: self._answered(state, offset, error))

    def _answered(self, state: PartitionState, offset: int, error: Exception | None) -> None:
        """On the ZooKeeper client's completion thread."""
        if isinstance(error, CommitAnswerLate):
            # settle() gave up on it and later writes went out: retrying this older offset
            # would move the partition back.
            log.warning("%s[%d]: %s; ignored", state.topic, state.partition, error)
            return
        send: int | None = None
        with self._answer:
            if error is None:
                self._on_committed(state.key, offset)
            elif isinstance(error, CommitFenced):
                self._on_refused(state.key, error.cause)
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
            self._in_flight.discard(state)
            if error is None and waiting is not None and not self._hold(state, waiting):
                self._sending(state, time.monotonic())
                send = waiting
            elif isinstance(error, CommitUncertain):
                state.commit_pending = waiting if waiting is not None else offset
                state.not_before = time.monotonic() + 0.5
            self._answer.notify_all()
        if send is not None:
            self._send(state, send)
        elif error is not None:
            self._offer(state)
