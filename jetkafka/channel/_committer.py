"""The one writer of a partition's commit state: what a turn commits, and how.

:class:`PartitionCommitter`, with the :class:`CommitPipeline` it owns, is the only code that
writes a :class:`PartitionState`'s commit fields, ``commit_pending`` (an advance ZooKeeper could not take yet, retried by the next turn)
and ``advanced`` (the newest advance handed to the pipeline, which ``last_commit`` counts from
when it is sent). The landed offset is the lease's ``committed``, written by
:class:`~jetkafka.coordination._offsets.OffsetStore` under the lease's lock. Every commit of a
partition goes through here: an ``advance()`` (pipelined or synchronous), a processor's own
``source.commit``, the pending commit retried, the commit of a release, the commit after an
out-of-range offset and that of a filed move, and the pending commit dropped at a loss. Every
commit is fenced by the partition's lease, and nothing ever rewinds to offset 0.

Threads and locks, per field:

* ``commit_pending``: by the worker holding the partition's turn (every method of
  :class:`PartitionCommitter`), and by its :class:`CommitPipeline` under the pipeline's
  ``_answer`` lock: ``submit`` and ``settle`` on that worker, the answer callback on the
  ZooKeeper client's thread, which sets it only for a commit that got no answer. A commit
  outside the turns only clears it (:meth:`PartitionCommitter.superseded`, on a processor's
  thread), under the committer's ``_retries`` lock, under which the worker also reads it to
  retry it.
* ``advanced``: by the worker holding the turn, with no lock (only that worker reads it, through
  ``last_commit``), and by a processor's thread after its own commit outside the turns
  (:meth:`PartitionCommitter.superseded` before and :meth:`PartitionCommitter.committed_outside_turns`
  after its own commit outside the turns, which only reset it).

Pipelined commits travel in the committer's :class:`CommitPipeline`
(:mod:`jetkafka.channel._commit_pipeline`: its ordering guarantee and failure modes), which
only the committer builds, uses and closes. Before any synchronous write for a partition (a
processor's own commit, a release, an owner-node delete, a move) the committer settles it
(:meth:`PartitionCommitter.settle`), so a commit in flight is answered first and a waiting one
becomes the pending commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from jetkafka.channel._commit_pipeline import CommitPipeline
from jetkafka.channel._partition import PartitionState
from jetkafka.coordination._errors import CommitUncertain
from jetkafka.coordination._ownership import Lease
from jetkafka.errors import CommitFenced, OffsetMoved
from jetkafka.events import Key
from jetkafka.ordering._commit_point import CommitPoint, finished_of

if TYPE_CHECKING:
    from jetkafka.channel._fetcher import Fetcher
    from jetkafka.channel._moves import Move
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.config import ChannelConfig
    from jetkafka.coordination._membership import GroupMembership

log = logging.getLogger("jetkafka.channel")


class PartitionCommitter:
    """The commits of a channel start's partitions, and (with its pipeline) the only writer of
    their commit state.

    One per channel start, shared by its workers; it keeps no per-partition state of its own
    (that is on the :class:`PartitionState`) apart from its :class:`CommitPipeline`, which it
    starts with ``channel.pipelined_commits`` on and closes at the end of the start; the
    pipeline reports a landed commit to ``on_committed`` and offers a partition whose commit
    failed to the work queue (``offer``). Every method runs on the worker holding the
    partition's turn, except :meth:`superseded` and :meth:`committed_outside_turns` (a
    processor's thread) and :meth:`set_interval` / :meth:`close` (the channel's hot deploy and
    teardown). Which lock each field is written under is said in the module's docstring.
    """

    def __init__(
        self,
        config: ChannelConfig,
        membership: GroupMembership,
        fetcher: Fetcher,
        stats: ChannelStats,
        on_committed: Callable[[Key, int], None],
        offer: Callable[[PartitionState], None],
    ) -> None:
        self.config = config  # replaced in place by a hot deploy
        self.membership = membership
        self.fetcher = fetcher
        self.stats = stats
        self._pipeline = (
            CommitPipeline(
                membership.offsets, on_committed, stats.commit_refused, offer, config.commit_interval_ms / 1000
            )
            if config.pipelined_commits
            else None
        )
        # Partitions whose pending commit a worker is retrying now (see superseded).
        self._retries = threading.Condition()
        self._retrying: set[PartitionState] = set()

    def set_interval(self, interval_s: float) -> None:
        """A new ``commit_interval_ms`` (hot deploy): see :meth:`CommitPipeline.set_interval`."""
        if self._pipeline is not None:
            self._pipeline.set_interval(interval_s)

    def close(self) -> None:
        """The channel start ends: see :meth:`CommitPipeline.close`."""
        if self._pipeline is not None:
            self._pipeline.close()

    # -- a turn's commits ------------------------------------------------------------------

    def advance(self, state: PartitionState, offset: int) -> bool:
        """A processor's ``advance()`` to ``offset``: handed to the pipeline (with whether the
        partition has drained, which may send it before the interval is up: see
        :mod:`jetkafka.channel._commit_pipeline`), or committed now without one. False if the
        partition was lost."""
        if self._pipeline is None:
            return self.commit(state, offset)
        # A commit point always goes: its map may have moved where its offset did not.
        if state.last_commit != offset or isinstance(offset, CommitPoint) or state.commit_pending is not None:
            state.advanced = offset
            self._pipeline.submit(state, offset, state.drained())
        return True

    def commit(self, state: PartitionState, offset: int) -> bool:
        """Commit ``offset`` now; False if the partition was lost (refused by the fence). One
        without an answer becomes the pending commit, retried by the next turn."""
        try:
            self.commit_or_raise(state, offset)
        except CommitFenced as exc:
            state.lost_reason = exc.reason
            return False
        except CommitUncertain as exc:
            state.commit_pending = offset
            state.not_before = time.monotonic() + 0.5
            log.warning(
                "%s[%d]: commit of offset %d postponed, ZooKeeper unreachable (%s)",
                state.topic,
                state.partition,
                offset,
                exc,
            )
            return True
        return True

    def retry_pending(self, state: PartitionState) -> bool:
        """Commit the pending commit, if there is one (a turn's, or a release's without an
        ``advance()`` of its own); False if the partition was lost."""
        with self._retries:
            offset = state.commit_pending
            if offset is None:
                return True
            self._retrying.add(state)  # a commit outside the turns waits for this one to end
        try:
            return self.commit(state, offset)
        finally:
            with self._retries:
                self._retrying.discard(state)
                self._retries.notify_all()

    def settle(self, state: PartitionState) -> None:
        """Before any other write for the partition: see :meth:`CommitPipeline.settle`."""
        if self._pipeline is not None:
            self._pipeline.settle(state)

    def commit_or_raise(self, state: PartitionState, offset: int) -> None:
        """Commit ``offset`` now (a processor's ``source.commit`` too); raises
        :class:`CommitFenced` or :class:`CommitUncertain` as the lease's commit does."""
        self.settle(state)
        if state.committed == offset and finished_of(state.committed) == finished_of(offset) and state.commit_pending is None:
            return
        try:
            self.membership.commit(state.lease, offset)
        except CommitFenced as exc:
            self.stats.commit_refused(state.key, exc.cause)
            log.error(
                "%s[%d]: commit of offset %d refused: partition no longer owned by this instance",
                state.topic,
                state.partition,
                offset,
            )
            raise
        state.commit_pending = None
        state.advanced = None  # this commit is the newest now
        self.stats.committed(state.key, offset)
        if self.config.commit_to_kafka:
            self.fetcher.mirror_commit(state.key, offset)

    def drop_at_loss(self, state: PartitionState) -> None:
        """The partition was lost: settle its commit in flight and drop the pending one."""
        self.settle(state)
        if state.commit_pending is not None:
            # An advance that never reached ZooKeeper (unanswered, then the lease was gone): the
            # next owner re-reads from the last commit. Counted, so a zombie shows in the metrics.
            self.stats.commit_refused(state.key, "dropped")
            log.warning(
                "%s[%d]: commit of offset %d dropped: the partition was lost before ZooKeeper took it",
                state.topic,
                state.partition,
                state.commit_pending,
            )
            state.commit_pending = None

    # -- repositions -----------------------------------------------------------------------

    def repositioned(self, state: PartitionState) -> None:
        """The position moved away from the advances made so far (a revert, a seek, a move):
        the processor's last commit is the landed one again."""
        state.advanced = None

    def commit_past_end(self, state: PartitionState, high: int) -> tuple[int, int] | None:
        """Commit where reading goes on after the log lost its tail: what the processor is done
        with (its last commit, landed or on its way), or the log's new end ``high`` if lower.
        Returns that offset and the one it was computed from; None if the partition was lost.

        The commit is conditional on the landed commit it was computed from: a processor that
        commits from its own thread meanwhile (the Spark driver, while the broker was asked for
        the watermarks) is read again, so its commit is never lowered below what it covers
        unless the log's end is lower.
        """
        for _ in range(5):
            self.settle(state)
            seen = state.committed
            done_to = state.last_commit if state.last_commit is not None else state.position
            target = min(done_to, high)
            if seen == target and state.commit_pending is None:
                return target, done_to
            try:
                self.membership.offsets.commit_many({state.key: (state.lease, target)}, expected={state.key: seen})
            except OffsetMoved:
                continue
            except CommitFenced as exc:
                self.stats.commit_refused(state.key, exc.cause)
                state.lost_reason = exc.reason
                return None
            except CommitUncertain as exc:
                state.commit_pending = target
                state.not_before = time.monotonic() + 0.5
                log.warning("%s[%d]: commit of offset %d postponed, ZooKeeper unreachable (%s)",
                            state.topic, state.partition, target, exc)
                return target, done_to
            state.commit_pending = None
            state.advanced = None
            self.stats.committed(state.key, target)
            if self.config.commit_to_kafka:
                self.fetcher.mirror_commit(state.key, target)
            return target, done_to
        raise RuntimeError(f"{state.topic}[{state.partition}]: its committed offset kept moving; out of range again")

    def commit_move(self, state: PartitionState, move: Move) -> tuple[bool, int | None]:
        """Commit a filed move's offset, after the commit in flight: whether it landed, and
        the offset committed before it. Not landed, the move failed (its waiter is answered)
        or, without an answer from ZooKeeper, is filed again at the head to be tried first."""
        self.settle(state)  # a commit still travelling would land after this one
        old = state.committed
        try:
            self.membership.offsets.commit_many({state.key: (state.lease, move.offset)}, move.extra)
        except CommitFenced as exc:
            self.stats.commit_refused(state.key, exc.cause)
            state.lost_reason = exc.reason
            move.fail(exc)
            return False, old
        except CommitUncertain as exc:
            # Landed with its answer lost, or not at all: going on from the old position could
            # write over a reset that took effect. The next turns try again first.
            move.uncertain = True
            state.moves.appendleft(move)
            state.stalled_until = time.monotonic() + 0.5
            log.warning("%s[%d]: reposition to offset %d not confirmed (%s); trying again before any batch",
                        state.topic, state.partition, move.offset, exc)
            return False, old
        except Exception as exc:  # noqa: BLE001 - the move fails with whatever refused it; its waiter gets the error
            # A retry whose first attempt had landed: the offset node was adopted at the target
            # and the transaction's own checks (a reset's marker) now refuse it again.
            if not (move.uncertain and state.committed == move.offset):
                move.fail(exc)
                return False, old
        state.commit_pending = None
        self.stats.committed(state.key, move.offset)
        if self.config.commit_to_kafka:
            self.fetcher.mirror_commit(state.key, move.offset)
        return True, old

    # -- outside the turns -----------------------------------------------------------------

    def superseded(self, states: Iterable[PartitionState]) -> None:
        """A processor's own commit of these partitions, made outside their turns
        (:meth:`ChannelContext.commit`, on its thread), is about to be sent: every advance of
        theirs made before it and not landed yet is superseded by it, and never lands after it.

        The commit in flight is answered first (the multi-partition commit waits for it as
        well); the advance waiting for its interval and the pending commit (one ZooKeeper did
        not answer) are dropped, not sent first: sending them would cost a round trip each and,
        without an answer, leave a pending commit again. A worker retrying its pending commit
        right now is waited for, and one about to retry finds nothing to retry: the two read
        and clear it under one lock, so the retry lands before this commit or not at all.

        Dropped, such an advance is not written even if the commit outside then fails, and no
        longer counts as sent: the next advance to its offset is sent again; until then, what
        it covered is read again by the next owner (at least once). An advance made while the
        commit outside is on its way is not ordered with it.
        """
        states = list(states)
        for state in states:
            if self._pipeline is not None:
                self._pipeline.supersede(state)
        with self._retries:
            self._retries.wait_for(lambda: not self._retrying.intersection(states), Lease.SETTLE_TIMEOUT_S)
            for state in states:
                if state.commit_pending is not None:
                    log.info(
                        "%s[%d]: pending commit of offset %d superseded by the processor's own commit",
                        state.topic,
                        state.partition,
                        state.commit_pending,
                    )
                    state.commit_pending = None
                # What was dropped is no longer the newest commit: if the commit outside
                # does not land, the next advance to that offset must be sent again, and a
                # revert() go back to what landed.
                state.advanced = None

    @staticmethod
    def committed_outside_turns(state: PartitionState) -> None:
        """After a processor's own commit that covers the partition, made outside its turns
        (:meth:`ChannelContext.commit`, on the processor's thread): that commit is the newest
        now. Static: it needs nothing of a channel start, and may come between two."""
        state.advanced = None  # revert() goes back to this commit, not an older advance
