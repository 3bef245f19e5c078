"""What a turn does to a partition's position and commits.

:class:`ResponseHandler` applies a processor's response (advance, seek, revert, wait) to the
partition's position, and hands what it commits to the :class:`PartitionCommitter`
(:mod:`jetkafka.channel._committer`), the one writer of the partition's commit state: an
``advance()`` travels in its pipeline (``channel.pipelined_commits``, the default) so the next
batch starts at once, or is written synchronously. It also carries out what moves a partition
outside a response: an out-of-range fetch offset (``channel.on_out_of_range``) and the
repositions other threads filed (:mod:`jetkafka.channel._moves`).

Threads: every method runs on the worker holding the partition's turn (the
:class:`BatchRunner`), the one thread that moves its position. Nothing ever rewinds to offset
0, and a commit is always fenced by the partition's lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jetkafka.channel._committer import PartitionCommitter
from jetkafka.channel._errors import OffsetOutOfRange
from jetkafka.channel._partition import PartitionState
from jetkafka.events import PartitionSource
from jetkafka.processors._base import BatchEventProcessor, BatchResponse, ResponseKind
from jetkafka.processors._calls import call_hook

if TYPE_CHECKING:
    from jetkafka.channel._fetcher import Fetcher
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.config import ChannelConfig

log = logging.getLogger("jetkafka.channel")


class ResponseHandler:
    """Applies a turn's outcome to a partition; one per channel start, shared by its workers
    (it keeps no per-partition state: that is on the :class:`PartitionState`)."""

    def __init__(
        self,
        config: ChannelConfig,
        processor: BatchEventProcessor,
        fetcher: Fetcher,
        stats: ChannelStats,
        committer: PartitionCommitter,
    ) -> None:
        self.config = config
        self.processor = processor
        self.fetcher = fetcher
        self.stats = stats
        self.committer = committer

    def source(self, state: PartitionState, head: int, next_offset: int) -> PartitionSource:
        return PartitionSource(
            state.topic,
            state.partition,
            head,
            state.last_commit,
            next_offset,
            commit=lambda offset: self.committer.commit_or_raise(state, offset),
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
            return self.committer.advance(state, state.carry(target))
        return True

    def _reposition(self, state: PartitionState, offset: int) -> None:
        state.reposition(offset)
        self.committer.repositioned(state)
        self.fetcher.seek(state, offset)

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
            self.fetcher.pause(state)
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
            landed = self.committer.commit_past_end(state, high)
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
        self._moved(state, target, "out_of_range", None if offset >= low else self.committer.commit)

    def move(self, state: PartitionState) -> None:
        """Carry out the oldest reposition filed on the partition (an offset reset)."""
        move = state.moves.popleft()
        if not move.uncertain and not move.start():
            return  # withdrawn by its waiter
        landed, old = self.committer.commit_move(state, move)
        if not landed:
            return
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
