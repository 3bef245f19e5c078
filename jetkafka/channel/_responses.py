"""What a turn does to a partition's position and commits.

:class:`ResponseHandler` applies a processor's response (advance, seek, revert, wait) to the
partition's position and commits it: handed to the :class:`CommitPipeline`
(``channel.pipelined_commits``, the default) so the next batch starts at once, or written
synchronously. Every other write (a processor's own commit, a release, the commit after an
out-of-range, a filed move) first settles the partition's commit in flight. It also carries
out what moves a partition outside a response: an out-of-range fetch offset
(``channel.on_out_of_range``) and the repositions other threads filed
(:mod:`jetkafka.channel._moves`).

Threads: every method runs on the worker holding the partition's turn (the
:class:`BatchRunner`), the one thread that moves its position. Nothing ever rewinds to offset
0, and a commit is always fenced by the partition's lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jetkafka.channel._commit_pipeline import CommitPipeline
from jetkafka.channel._errors import OffsetOutOfRange
from jetkafka.channel._partition import PartitionState
from jetkafka.coordination._errors import CommitUncertain
from jetkafka.errors import CommitFenced, OffsetMoved
from jetkafka.events import PartitionSource
from jetkafka.processors._base import BatchEventProcessor, BatchResponse, ResponseKind
from jetkafka.processors._calls import call_hook

if TYPE_CHECKING:
    from jetkafka.channel._fetcher import Fetcher
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.config import ChannelConfig
    from jetkafka.coordination._membership import GroupMembership

log = logging.getLogger("jetkafka.channel")


class ResponseHandler:
    """Applies a turn's outcome to a partition; one per channel start, shared by its workers
    (it keeps no per-partition state: that is on the :class:`PartitionState`)."""

    def __init__(
        self,
        config: ChannelConfig,
        processor: BatchEventProcessor,
        membership: GroupMembership,
        fetcher: Fetcher,
        stats: ChannelStats,
        pipeline: CommitPipeline | None,
    ) -> None:
        self.config = config
        self.processor = processor
        self.membership = membership
        self.fetcher = fetcher
        self.stats = stats
        self.pipeline = pipeline

    def source(self, state: PartitionState, head: int, next_offset: int) -> PartitionSource:
        return PartitionSource(
            state.topic,
            state.partition,
            head,
            state.last_commit,
            next_offset,
            commit=lambda offset: self.commit_or_raise(state, offset),
        )

    def call(self, state: PartitionState, name: str, *args: Any) -> Any:
        """Call a non-batch callback; an exception there is logged and counted, never fatal."""
        return call_hook(self.processor, name, *args, failed=self.hook_failed(state))

    def hook_failed(self, state: PartitionState) -> Callable[[str, Exception], None]:
        """What a callback of ``state``'s partition that raised is reported to: logged and counted."""

        def failed(hook: str, exc: Exception) -> None:
            self.stats.error(state.key, f"{hook}_raised")
            log.error("%s[%d] offset %d: %s raised %s", state.topic, state.partition, state.position, hook,
                      type(exc).__name__, exc_info=exc)

        return failed

    # -- responses and commits ---------------------------------------------------------------

    def apply(
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
                return self.commit(state, target)
            if state.last_commit != target or state.commit_pending is not None:
                state.advanced = target
                self.pipeline.submit(state, target)
        return True

    def _reposition(self, state: PartitionState, offset: int) -> None:
        state.reposition(offset)
        self.fetcher.seek(state.key, offset)

    def commit(self, state: PartitionState, offset: int) -> bool:
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

    def settle(self, state: PartitionState) -> None:
        if self.pipeline is not None:
            self.pipeline.settle(state)

    def commit_or_raise(self, state: PartitionState, offset: int) -> None:
        self.settle(state)
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

    # -- out of range, filed moves ---------------------------------------------------------

    def out_of_range(self, state: PartitionState) -> None:
        low, high = self.fetcher.watermarks(state.topic, state.partition)
        offset = state.buffer.fetch_next
        error = OffsetOutOfRange(state.topic, state.partition, offset, low, high)
        self.stats.error(state.key, "offset_out_of_range")
        source = self.source(state, state.position, state.position)
        response = self.call(state, "on_exception", source, error)
        if response is not None:
            self.apply(state, response, state.position)
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
        self._moved(state, target, "out_of_range", None if offset >= low else self.commit)

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

    def move(self, state: PartitionState) -> None:
        """Carry out the oldest reposition filed on the partition (an offset reset)."""
        move = state.moves.popleft()
        if not move.uncertain and not move.start():
            return  # withdrawn by its waiter
        self.settle(state)  # a commit still travelling would land after this one
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
        except Exception as exc:  # noqa: BLE001 - the move fails with whatever refused it; its waiter gets the error
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
            self.call(state, "on_reposition", self.source(state, offset, offset), old_position, reason)
