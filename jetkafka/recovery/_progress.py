"""Recovering one partition's ranges, batch by batch: delivery, responses and stored progress.

A :class:`Cursor` says where recovery of one owned partition stands: the stored ranges (as last
read or written), the next offset to hand out, and the first offset handed out but not yet
stored as done. :class:`RecoveryRunner` hands a batch to the recovery processor as
``EventBatch(..., recovery=True)`` and applies its response like the live path does: advance
stores progress, revert re-reads from the stored progress, get_next moves on without storing,
``seek`` and ``wait`` modify each. "Storing" means removing ``[first offset not stored,
target)`` from the partition's ranges in ZooKeeper, fenced by its lease
(:meth:`RecoveryLedger.update`); a function of the latest node, so it composes with an
operator's cancel and with retention trims.

Guarantees: with advance per batch, every offset of a range reaches the processor once, first
and last included, and progress is stored after each batch (a crash re-processes at most the
batch in hand). Failure modes: a processor that raises gets the same batch again after the
channel's error back-off (``channel.error_backoff_ms`` doubling up to ``error_backoff_max_ms``)
unless ``on_exception`` answers; ``channel.on_error`` skip and dead-letter do not apply to
recovery. A store refused by the fence drops the partition (its new owner continues from the
stored ranges); a store ZooKeeper could not take is kept and retried first. Offsets the broker
no longer holds are trimmed from the ranges, counted as lost and logged as errors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import INVALID_SPAN, Span

from jetkafka._backoff import backoff_ms
from jetkafka._tracing._spans import inside
from jetkafka.coordination._errors import CommitUncertain
from jetkafka.coordination._ownership import Lease
from jetkafka.errors import CommitFenced
from jetkafka.events import EventBatch, Key, PartitionSource
from jetkafka.processors._base import BatchEventProcessor, BatchResponse, ResponseKind
from jetkafka.processors._calls import ask_on_exception, call_hook, deliver_batch
from jetkafka.recovery import _ranges as rng
from jetkafka.recovery._ledger import RecoveryLedger, RecoveryRecord, Snapshot

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from jetkafka.channel._running import RunningChannel

log = logging.getLogger("jetkafka.recovery")


@dataclass
class Cursor:
    """Where recovery of one owned partition stands (touched by the worker thread only)."""

    key: Key
    lease: Lease
    snap: Snapshot  # the stored ranges, as last read or written
    position: int  # next offset to hand to the processor
    done_from: int  # first offset handed out but not yet stored as done (== position: none)
    unstored: int = 0  # events handed out since the last store
    not_before: float = 0.0
    attempts: int = 0
    redeliver: list[Any] | None = None
    pending: tuple[int, int, int] | None = None  # a store ZooKeeper could not take: from, to, events
    idle_called: bool = False
    span: Span = INVALID_SPAN  # the ``recover <topic>`` span, parent of the batches' spans

    def current(self) -> rng.Range | None:
        """The part of the stored ranges still to read: from ``position`` to its range's end."""
        for start, end in self.snap.record.ranges:
            if end > self.position:
                return (max(start, self.position), end)
        return None


class RecoveryRunner:
    """Applies batches and responses to cursors; called by the recovery thread only."""

    def __init__(
        self,
        channel: RunningChannel,
        ledger: RecoveryLedger,
        processor: BatchEventProcessor,
        drop: Callable[[Key], None],
    ) -> None:
        self.channel = channel
        self.ledger = ledger
        self.processor = processor
        self._drop = drop

    def source(self, cursor: Cursor, head: int, next_offset: int) -> PartitionSource:
        stored = cursor.snap.record.ranges
        return PartitionSource(
            cursor.key[0],
            cursor.key[1],
            head,
            stored[0][0] if stored else cursor.position,  # the first offset not stored as done
            next_offset,
            commit=lambda offset: self._commit_from_processor(cursor, offset),
        )

    def deliver(self, cursor: Cursor, batch: list[Any]) -> None:
        head, last = batch[0].offset(), batch[-1].offset()
        source = self.source(cursor, head, last + 1)
        # Counted before the call: a processor may store progress itself (source.commit).
        cursor.unstored += len(batch)
        with inside(cursor.span):
            # The lease asked last, right before the call: a process frozen since the round's
            # check (in the reader's take, or the rate's wait) finds it run out at the thaw.
            end = deliver_batch(
                self.processor,
                source,
                EventBatch(batch, recovery=True),
                group=self.channel.config.channel.group,
                may_start=self.channel.may_act,
            )
        if not end.started:
            cursor.unstored = max(0, cursor.unstored - len(batch))
            cursor.redeliver = batch  # the next round hands it over again, the rate already paid
            cursor.not_before = time.monotonic() + 0.1
            return
        if end.lost is not None:
            self._drop(cursor.key)
            return
        if end.failure is not None:
            cursor.unstored = max(0, cursor.unstored - len(batch))
            self._failed(cursor, source, batch, end.failure, end.span)
            return
        response = end.response
        assert response is not None
        cursor.attempts = 0
        if self.apply(cursor, response, last + 1) and response.kind is ResponseKind.ADVANCE:
            self._call(cursor, "on_batch_processed", source)

    def _failed(
        self, cursor: Cursor, source: PartitionSource, batch: list[Any], exc: Exception, span: Span | None = None
    ) -> None:
        cursor.attempts += 1
        response = ask_on_exception(
            self.processor, source, batch, exc, cursor.attempts, log=log, failed=self._hook_failed(cursor),
            what="recovery offsets", span=span,
        )
        if response is not None:
            # The processor decided (e.g. advance = skip the batch): follow it.
            cursor.attempts = 0
            cursor.unstored += len(batch)
            self.apply(cursor, response, batch[-1].offset() + 1)
            return
        cfg = self.channel.config.channel
        wait_s = backoff_ms(cursor.attempts, cfg.error_backoff_ms, cfg.error_backoff_max_ms) / 1000
        cursor.redeliver = batch
        cursor.not_before = time.monotonic() + wait_s

    def apply(self, cursor: Cursor, response: BatchResponse, after: int) -> bool:
        """Apply a response to the batch ending before ``after``; False if the partition was dropped."""
        if response.wait_ms:
            cursor.not_before = time.monotonic() + response.wait_ms / 1000
        if response.kind is ResponseKind.REVERT:
            target = response.offset if response.offset is not None else cursor.done_from
            log.info("%s[%d]: recovery reverts to offset %d", *cursor.key, target)
            cursor.position = target
            cursor.done_from = min(cursor.done_from, target)
            cursor.unstored = 0
            return True
        target = response.offset if response.offset is not None else after
        cursor.position = target
        cursor.done_from = min(cursor.done_from, target)
        if response.kind is ResponseKind.ADVANCE:
            return self.store(cursor, cursor.done_from, target, cursor.unstored)
        return True

    def _commit_from_processor(self, cursor: Cursor, offset: int) -> None:
        """``source.commit(offset)`` on a recovery batch: everything before ``offset`` is done."""
        if not self.store(cursor, cursor.done_from, offset, cursor.unstored):
            raise CommitFenced(*cursor.key, "recovery progress refused: partition no longer owned", "not_held")

    # -- storing progress -------------------------------------------------------------------------

    def store(self, cursor: Cursor, start: int, end: int, events: int) -> bool:
        """Remove ``[start, end)`` from the stored ranges, fenced; False if the partition was dropped."""

        def change(record: RecoveryRecord) -> RecoveryRecord:
            return replace(record, ranges=rng.subtract(record.ranges, (start, end)), recovered=record.recovered + events)

        try:
            snap = self.ledger.update(cursor.key, change, cursor.lease, cursor.snap)
        except CommitFenced as exc:
            log.error("%s[%d]: %s; its new owner continues from the stored ranges", *cursor.key, exc)
            self._drop(cursor.key)
            return False
        except CommitUncertain as exc:
            cursor.pending = (start, end, events)
            cursor.not_before = time.monotonic() + 0.5
            log.warning("%s[%d]: recovery progress postponed, ZooKeeper unreachable (%s)", *cursor.key, exc)
            return True
        cursor.pending = None
        cursor.snap = snap
        if events:
            self.channel.stats.recovered(cursor.key, events)
        cursor.unstored = 0
        cursor.done_from = max(cursor.done_from, end)
        cursor.position = max(cursor.position, cursor.done_from)
        self.after_store(cursor)
        return True

    def after_store(self, cursor: Cursor) -> None:
        self.gauge(cursor)
        record = cursor.snap.record
        if not record.ranges:
            if record.by:
                log.info(
                    "%s[%d]: recovery complete (%d events recovered, %d lost to retention, %d capped)",
                    *cursor.key,
                    record.recovered,
                    record.lost,
                    record.capped,
                )
            else:  # the node was gone when we wrote: cancelled
                log.warning("%s[%d]: recovery ranges were cancelled; recovery of it stops", *cursor.key)
            self._drop(cursor.key)
            return
        if cursor.done_from == cursor.position and not _inside(record.ranges, cursor.position):
            # Nothing unstored: continue at the next stored range.
            nxt = next((s for s, e in record.ranges if e > cursor.position), record.ranges[0][0])
            cursor.position = cursor.done_from = nxt
        cursor.idle_called = False

    def skip_tail(self, cursor: Cursor) -> None:
        """Every record below the range's end was read: its last offsets hold no record (compaction)."""
        current = cursor.current()
        if current is None:
            return
        nothing_unstored = cursor.done_from == cursor.position
        cursor.position = current[1]
        if nothing_unstored:
            self.store(cursor, cursor.done_from, cursor.position, 0)

    def all_read(self, cursor: Cursor) -> None:
        """Every range was read but the processor has not advanced the last batches: ask it once."""
        cursor.idle_called = True
        source = self.source(cursor, cursor.position, cursor.position)
        response = self._call(cursor, "on_idle", source)
        if response is not None:
            self.apply(cursor, response, cursor.position)

    def terminate(self, cursor: Cursor) -> None:
        source = self.source(cursor, cursor.position, cursor.position)
        response = self._call(cursor, "on_stream_termination", source)
        if response is not None and response.kind is ResponseKind.ADVANCE:
            end = response.offset if response.offset is not None else cursor.position
            self.store(cursor, cursor.done_from, end, cursor.unstored)

    def trim(self, cursor: Cursor, watermarks: tuple[int, int]) -> None:
        """Drop what the broker no longer holds (below ``low``, at or past ``high``) from the ranges.

        The dropped offsets are counted as lost (node, metric) and logged as an error.
        """
        low, high = watermarks
        lost = 0

        def change(record: RecoveryRecord) -> RecoveryRecord:
            nonlocal lost
            kept, below = rng.trim_below(record.ranges, low)
            kept, beyond = rng.trim_from(kept, high)
            lost = below + beyond
            return replace(record, ranges=kept, lost=record.lost + lost)

        snap = cursor.snap
        try:
            cursor.snap = self.ledger.update(cursor.key, change, cursor.lease, cursor.snap)
        except CommitFenced as exc:
            log.error("%s[%d]: %s", *cursor.key, exc)
            self._drop(cursor.key)
            return
        if lost:
            log.error(
                "%s[%d]: %d events to recover are no longer on the broker (it holds offsets %d..%d); "
                "they are LOST; recovery goes on with %s",
                *cursor.key,
                lost,
                low,
                high - 1,
                rng.describe(cursor.snap.record.ranges),
            )
            self.channel.stats.recovery_lost(cursor.key, "retention", lost)
            cursor.redeliver = None
            cursor.done_from = max(cursor.done_from, low)
            cursor.position = max(cursor.position, low)
        if cursor.snap is not snap:
            self.after_store(cursor)

    # -- helpers --------------------------------------------------------------------------------

    def gauge(self, cursor: Cursor) -> None:
        self.channel.stats.recovery_remaining(cursor.key, cursor.snap.record.remaining)

    def _call(self, cursor: Cursor, name: str, *args: Any) -> Any:
        return call_hook(self.processor, name, *args, failed=self._hook_failed(cursor))

    @staticmethod
    def _hook_failed(cursor: Cursor) -> Callable[[str, Exception], None]:
        def failed(hook: str, exc: Exception) -> None:
            log.error("%s[%d]: recovery %s raised %s", cursor.key[0], cursor.key[1], hook, type(exc).__name__,
                      exc_info=exc)

        return failed


def _inside(ranges: rng.Ranges, offset: int) -> bool:
    return any(start <= offset < end for start, end in ranges)
