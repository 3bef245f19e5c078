"""What a worker does with a partition during its turn.

One turn handles, in this order of precedence: a loss (``on_exception`` with
:class:`PartitionLost`, nothing committed), a release (``on_stream_termination``, its response
applied, the owner node deleted), an out-of-range fetch offset, a pending commit, and then
either one batch or one idle callback.

A processor callback that raises goes to ``on_exception``; when that returns None the same
batch is re-delivered after an exponential back-off. Events are never skipped unless the
processor says so, and nothing ever rewinds to offset 0.

``advance()`` hands its offset to the :class:`CommitPipeline` (``channel.pipelined_commits``,
the default) and the next batch starts at once; every other write (a processor's own commit, a
release, the commit after an out-of-range) first settles the partition's commit in flight.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jetkafka.channel.commit_pipeline import CommitPipeline
from jetkafka.channel.errors import OffsetOutOfRange
from jetkafka.channel.failures import FailurePolicy
from jetkafka.channel.partition import PartitionState
from jetkafka.coordination.errors import CommitUncertain
from jetkafka.errors import CommitFenced, OffsetMoved, PartitionLost
from jetkafka.events import EventBatch, PartitionSource
from jetkafka.processors.base import BatchEventProcessor, BatchResponse, ResponseKind
from jetkafka.processors.calls import call_hook, deliver_batch

if TYPE_CHECKING:
    from jetkafka.channel.fetcher import Fetcher
    from jetkafka.channel.stats import ChannelStats
    from jetkafka.config import ChannelConfig
    from jetkafka.coordination.membership import GroupMembership

log = logging.getLogger("jetkafka.channel")


class BatchRunner:
    def __init__(
        self,
        config: ChannelConfig,
        processor: BatchEventProcessor,
        membership: GroupMembership,
        fetcher: Fetcher,
        stats: ChannelStats,
        remove: Callable[[PartitionState], None],
        may_act: Callable[[], bool],
        failures: FailurePolicy,
        pipeline: CommitPipeline | None,
    ) -> None:
        self.failures = failures
        self.pipeline = pipeline
        self.config = config
        self.processor = processor
        self.membership = membership
        self.fetcher = fetcher
        self.stats = stats
        self._remove = remove
        self._may_act = may_act

    # -- one turn --------------------------------------------------------------------------

    def run_turn(self, state: PartitionState) -> None:
        if state.lost_reason is not None:
            self._lose(state)
        elif not self._may_act():
            # ZooKeeper suspended, or no answer from it for longer than the local lease allows:
            # start nothing that needs a commit, an owner-node delete, or a live session.
            state.stalled_until = time.monotonic() + 0.2
        elif state.moves:
            self._move(state)  # ahead of a release: the release then commits from the new position
        elif state.release_reason is not None:
            self._release(state)  # paused or not: a release must never wait for a resume
        elif state.paused:
            pass  # queued before it was paused; resume() queues it again
        elif state.out_of_range:
            self._out_of_range(state)
        elif state.commit_pending is not None and not self._commit(state, state.commit_pending):
            pass
        elif state.has_buffered():
            self._batch(state)
        else:
            self._idle(state)

    def _source(self, state: PartitionState, head: int, next_offset: int) -> PartitionSource:
        return PartitionSource(
            state.topic,
            state.partition,
            head,
            state.last_commit,
            next_offset,
            commit=lambda offset: self._commit_or_raise(state, offset),
        )

    def _batch(self, state: PartitionState) -> None:
        batch = self.failures.next_batch(state)
        if batch is None:
            batch, resume = state.take_batch(self.config.batch_max_events, self.config.batch_max_bytes)
            if resume:
                self.fetcher.resume(state.key)
            if not batch:
                return
        head, last = batch[0].offset(), batch[-1].offset()
        source = self._source(state, head, last + 1)
        started = time.perf_counter()
        end = deliver_batch(self.processor, source, EventBatch(batch))
        if end.lost is not None:
            state.lost_reason = end.lost.reason
            return
        if end.failure is not None:
            self.stats.batch_failed(state.key)
            self._failed(state, source, batch, end.failure)
            return
        response = end.response
        assert response is not None
        self.stats.batch_done(state.key, len(batch), time.perf_counter() - started, response.kind.value)
        self.failures.succeeded(state, batch)
        state.last_activity = time.monotonic()
        state.idle_fired = False
        if self._apply(state, response, last + 1, batch):
            self._call(state, "on_batch_processed", source)

    def _failed(self, state: PartitionState, source: PartitionSource, batch: list[Any], exc: Exception) -> None:
        state.error_attempts += 1
        log.error(
            "%s[%d]: processor failed on offsets %d..%d (attempt %d): %s: %s",
            state.topic,
            state.partition,
            batch[0].offset(),
            batch[-1].offset(),
            state.error_attempts,
            type(exc).__name__,
            exc,
            exc_info=exc if state.error_attempts == 1 else None,
        )
        response = self._call(state, "on_exception", source, exc)
        if response is not None:
            # The processor decided (e.g. advance = skip the batch): follow it.
            self.failures.succeeded(state, batch)
            self._apply(state, response, batch[-1].offset() + 1)
            return
        given_up = self.failures.failed(state, batch, exc)
        if given_up is not None:
            self._apply(state, BatchResponse.advance(), given_up.offset + 1)

    def _idle(self, state: PartitionState) -> None:
        if self.config.idle_ms <= 0 or state.idle_fired:
            return
        if time.monotonic() - state.last_activity < self.config.idle_ms / 1000:
            return
        state.idle_fired = True
        source = self._source(state, state.position, state.position)
        response = self._call(state, "on_idle", source)
        if response is not None:
            self._apply(state, response, state.position)

    # -- responses and commits ---------------------------------------------------------------

    def _apply(
        self, state: PartitionState, response: BatchResponse, after: int, batch: list[Any] | None = None
    ) -> bool:
        """Apply ``response`` to a batch whose next offset is ``after``; False if the partition was lost."""
        if response.wait_ms:
            state.not_before = time.monotonic() + response.wait_ms / 1000
        kind = response.kind
        if kind is ResponseKind.REVERT:
            target = response.offset if response.offset is not None else state.last_commit
            if target is None:
                target = state.position
            log.info("%s[%d]: revert to offset %d", state.topic, state.partition, target)
            self._reposition(state, target)
            return True
        target = response.offset if response.offset is not None else after
        if response.offset is None or response.offset == after:
            state.position = target
        elif batch and state.redeliver is None and batch[0].offset() <= target < after:
            # A seek back into the batch just processed: no need to fetch it again.
            state.unread([m for m in batch if m.offset() >= target])
        else:
            self._reposition(state, target)
        if kind is ResponseKind.ADVANCE:
            if self.pipeline is None:
                return self._commit(state, target)
            if state.last_commit != target or state.commit_pending is not None:
                state.advanced = target
                self.pipeline.submit(state, target)
        return True

    def _reposition(self, state: PartitionState, offset: int) -> None:
        state.reposition(offset)
        self.fetcher.seek(state.key, offset)

    def _commit(self, state: PartitionState, offset: int) -> bool:
        try:
            self._commit_or_raise(state, offset)
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

    def _settle(self, state: PartitionState) -> None:
        if self.pipeline is not None:
            self.pipeline.settle(state)

    def _commit_or_raise(self, state: PartitionState, offset: int) -> None:
        self._settle(state)
        if state.committed == offset and state.commit_pending is None:
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

    # -- out of range, release, loss -----------------------------------------------------------

    def _out_of_range(self, state: PartitionState) -> None:
        low, high = self.fetcher.watermarks(state.topic, state.partition)
        offset = state.fetch_next
        error = OffsetOutOfRange(state.topic, state.partition, offset, low, high)
        self.stats.error(state.key, "offset_out_of_range")
        source = self._source(state, state.position, state.position)
        response = self._call(state, "on_exception", source, error)
        if response is not None:
            self._apply(state, response, state.position)
            if response.kind is not ResponseKind.ADVANCE or response.offset is not None:
                return
        policy = self.config.on_out_of_range
        if policy == "fail":
            state.halted = str(error)
            self.fetcher.pause(state.key)
            log.critical(
                "%s; partition halted (channel.on_out_of_range: fail): reset its offset with "
                "`jetkafka offsets reset` to continue",
                error,
            )
            return
        # What the processor is done with: its last commit, landed or on its way. Fetched and
        # delivered records past it were never committed, so the move must not commit over them.
        done_to = state.last_commit if state.last_commit is not None else state.position
        if offset >= low:
            # Not below the log's start, so above its end when the fetch failed: the log lost its
            # tail (an unclean leader election, a restored broker). Records written since get the
            # offsets from the end on, so reading goes on at the end, or at the last commit if
            # that is lower (records after it are still there, uncommitted); the policy's
            # "earliest" would re-deliver the whole partition.
            landed = self._commit_past_end(state, high)
            if landed is None:
                return  # lost meanwhile: the next turn hands it over
            target, done_to = landed
            self.stats.events_lost(state.key, "truncated", done_to - target)
            log.error(
                "%s[%d]: offset %d is past the end of the log (%d): %d records this group had processed are gone "
                "from the broker (log truncated); continuing at offset %d%s",
                state.topic,
                state.partition,
                offset,
                high,
                done_to - target,
                target,
                " (the last commit: what was read after it is still there, uncommitted)" if target < high else "",
            )
        else:
            # Below the log's start: records deleted (retention) before the group was done with
            # them; what was fetched after the last commit is dropped with the buffer too.
            target = low if policy == "earliest" else high
            self.stats.events_lost(state.key, "retention", low - min(done_to, offset))
            if target > low:
                self.stats.events_lost(state.key, "skipped", target - low)
            log.error(
                "%s[%d]: %s; %d records after the last commit (%d) were deleted before the group was done with "
                "them; continuing at %s offset %d (channel.on_out_of_range)%s",
                state.topic,
                state.partition,
                error,
                low - min(done_to, offset),
                done_to,
                policy,
                target,
                f", skipping {target - low} more" if target > low else "",
            )
        self._moved(state, target, "out_of_range", None if offset >= low else self._commit)

    def _commit_past_end(self, state: PartitionState, high: int) -> tuple[int, int] | None:
        """Commit where reading goes on after the log lost its tail: what the processor is done
        with (its last commit, landed or on its way), or the log's new end ``high`` if lower.
        Returns that offset and the one it was computed from; None if the partition was lost.

        The commit is conditional on the landed commit it was computed from: a processor that
        commits from its own thread meanwhile (the Spark driver, while the broker was asked for
        the watermarks) is read again, so its commit is never lowered below what it covers
        unless the log's end is lower.
        """
        for _ in range(5):
            self._settle(state)
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

    def _move(self, state: PartitionState) -> None:
        """Carry out the oldest reposition filed on the partition (an offset reset)."""
        move = state.moves.popleft()
        if not move.uncertain and not move.start():
            return  # withdrawn by its waiter
        self._settle(state)  # a commit still travelling would land after this one
        old = state.committed
        try:
            self.membership.offsets.commit_many({state.key: (state.lease, move.offset)}, move.extra)
        except CommitFenced as exc:
            self.stats.commit_refused(state.key, exc.cause)
            state.lost_reason = exc.reason
            move.fail(exc)
            return
        except CommitUncertain as exc:
            # Landed with its answer lost, or not at all: going on from the old position could
            # write over a reset that took effect. The next turns try again first.
            move.uncertain = True
            state.moves.appendleft(move)
            state.stalled_until = time.monotonic() + 0.5
            log.warning("%s[%d]: reposition to offset %d not confirmed (%s); trying again before any batch",
                        state.topic, state.partition, move.offset, exc)
            return
        except Exception as exc:
            # A retry whose first attempt had landed: the offset node was adopted at the target
            # and the transaction's own checks (a reset's marker) now refuse it again.
            if not (move.uncertain and state.committed == move.offset):
                move.fail(exc)
                return
        state.commit_pending = None
        self.stats.committed(state.key, move.offset)
        if self.config.commit_to_kafka:
            self.fetcher.mirror_commit(state.key, move.offset)
        log.info(
            "%s[%d]: repositioned from committed offset %s to %d (%s)",
            state.topic,
            state.partition,
            old,
            move.offset,
            move.reason,
        )
        self._moved(state, move.offset, move.reason, None)
        move.finish(old)

    def _moved(
        self, state: PartitionState, offset: int, reason: str, commit: Callable[[PartitionState, int], bool] | None
    ) -> None:
        """Move the partition's position to ``offset`` (committing it with ``commit``, unless
        done already) and tell the processor, whose batches from the old position are void."""
        old_position = state.position
        self._reposition(state, offset)
        if commit is not None:
            commit(state, offset)
        if state.lost_reason is None:
            self._call(state, "on_reposition", self._source(state, offset, offset), old_position, reason)

    def _release(self, state: PartitionState) -> None:
        source = self._source(state, state.position, state.position)
        response = self._call(state, "on_stream_termination", source)
        self._settle(state)  # the owner-node delete below is fenced by the offset version
        if response is not None and response.kind is ResponseKind.ADVANCE:
            self._commit(state, response.offset if response.offset is not None else state.position)
        elif state.commit_pending is not None:
            self._commit(state, state.commit_pending)
        if state.lost_reason is not None:
            self._lose(state)
            return
        log.info(
            "%s[%d]: released (%s) at offset %d, committed %s",
            state.topic,
            state.partition,
            state.release_reason,
            state.position,
            state.committed,
        )
        self._remove(state)
        self.membership.finish_release(state.key, state.lease)

    def _lose(self, state: PartitionState) -> None:
        reason = state.lost_reason or "lost"
        log.error(
            "%s[%d]: partition lost (%s) at offset %d; uncommitted work will be re-read by the next owner "
            "from offset %s",
            state.topic,
            state.partition,
            reason,
            state.position,
            state.committed,
        )
        self.stats.error(state.key, "partition_lost")
        self._settle(state)
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
        source = self._source(state, state.position, state.position)
        self._call(state, "on_exception", source, PartitionLost(state.topic, state.partition, reason))
        self._remove(state)
        # If ZooKeeper still shows this hold (the loss was seen here first), give it up, so the
        # partition is taken again cleanly instead of staying owned and unprocessed.
        self.membership.finish_release(state.key, state.lease)

    def _call(self, state: PartitionState, name: str, *args: Any) -> Any:
        """Call a non-batch callback; an exception there is logged and counted, never fatal."""

        def failed(hook: str, exc: Exception) -> None:
            self.stats.error(state.key, f"{hook}_raised")
            log.error("%s[%d] offset %d: %s raised %s", state.topic, state.partition, state.position, hook,
                      type(exc).__name__, exc_info=exc)

        return call_hook(self.processor, name, *args, failed=failed)
