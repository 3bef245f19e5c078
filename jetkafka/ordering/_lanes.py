"""Running one partition's records concurrently: ``channel.ordering: key | none``.

The partition's turn (one worker at a time, as under ``partition``) stays where everything
that moves the partition happens: it commits the commit point the ended batches allow
(:meth:`KeyScheduler.point`, through the partition's committer, so every commit is fenced and
carries its map of finished offsets), takes records from the buffer while fewer than
``max_in_flight_per_partition`` are open, and hands batches of free keys out as
:class:`LaneTask` s to the same work queue, where any worker runs them (an asynchronous
processor's coroutine runs on the processors' event loop instead, and its end comes back to a
worker). A task never commits: it reports what finished to the scheduler and offers the
partition, whose next turn commits.

A loss, a release, a reposition (reset, out of range), a halt or a pause first waits for the
partition's tasks to end (a task not started yet puts its records back at once; one in the
processor's code finishes its call): so a key's records never run on two owners of one
process at once, and the release commits everything that finished. Only then does the turn
carry it out as under ``partition``.

A task's failures follow ``channel.on_error`` as a partition's do (:class:`FailurePolicy`
treats a task as it treats a partition): the batch is retried after a back-off, or isolated
record by record and the failing record skipped or dead-lettered; only the task's keys wait,
the other keys of the partition go on (up to the open-records bound).

Responses: ``advance()`` and ``get_next()`` finish the batch; ``seek(offset)`` inside the
batch (with either) finishes the records before ``offset`` and re-delivers the rest, after
``wait(ms)`` if given (how the CloudEvents dispatcher retries one record after Retry-After);
``revert()`` re-delivers the batch. A response whose offset lies outside the batch is refused
as a failure of the batch (:class:`~jetkafka.ordering._errors.ResponseRefused`): no
partition-wide position exists to move. ``source.commit(offset)`` marks the batch's records
before ``offset`` finished and asks for a commit; it does not wait for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from jetkafka.events import EventBatch, PartitionSource, offset_of
from jetkafka.ordering._errors import ResponseRefused
from jetkafka.processors._async import AsyncBatchEventProcessor
from jetkafka.processors._base import BatchResponse, ResponseKind
from jetkafka.processors._calls import BatchEnd, ask_on_exception, deliver_batch, start_batch

if TYPE_CHECKING:
    from confluent_kafka import Message

    from jetkafka.channel._committer import PartitionCommitter
    from jetkafka.channel._failures import FailurePolicy
    from jetkafka.channel._partition import PartitionFailure, PartitionState
    from jetkafka.channel._responses import ResponseHandler
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.config import ChannelConfig

log = logging.getLogger("jetkafka.channel")


class LaneTask:
    """One batch of a partition in flight, from its hand-out to its end.

    The fields the failure policy reads and writes (``redeliver``, ``isolating``,
    ``error_attempts``, ``failure``, ``not_before``) are a partition's under ``partition``; here
    they are the batch's, written by the worker running the task (one at a time: a task is in
    the queue, in one worker's hands or awaited on the event loop, never two of these), and
    ``not_before`` also by a hot deploy's thread (ending a back-off). ``closed`` is set once,
    by whoever ends the task: its worker, or the thread that finds the work queue closed.
    """

    def __init__(self, state: PartitionState, batch: list[Message], keys: frozenset[Hashable], generation: int) -> None:
        self.state = state
        self.batch = batch
        self.keys = keys
        self.generation = generation
        self.topic, self.partition, self.key = state.topic, state.partition, state.key
        self.redeliver: list[Any] | None = None
        self.isolating = False
        self.error_attempts = 0
        self.failure: PartitionFailure | None = None
        self.not_before = 0.0
        self.timer_at: float | None = None
        self.outcome: tuple[list[Message], BatchEnd, float] | None = None  # an async end, to apply
        self.closed = False  # out of flight: nothing runs it again
        self._finished: set[int] = set()

    @property
    def position(self) -> int:
        todo = self.redeliver if self.redeliver is not None else self.batch
        return offset_of(todo[0]) if todo else offset_of(self.batch[-1]) + 1

    @property
    def removed(self) -> bool:
        scheduler = self.state.scheduler
        return self.state.removed or scheduler is None or scheduler.generation != self.generation

    def unfinished(self) -> list[Message]:
        todo = self.redeliver if self.redeliver is not None else self.batch
        return [m for m in todo if offset_of(m) not in self._finished]

    def finish(self, messages: list[Message]) -> None:
        new = [offset_of(m) for m in messages if offset_of(m) not in self._finished]
        if new and self.state.scheduler is not None:
            self._finished.update(new)
            self.state.scheduler.finish(new, self.generation)

    def abandon(self) -> None:
        """Out of flight without running again: its start ended (the work queue closed) with
        the task queued, or its end came after that. Its unfinished records go back to their
        keys, never to be handed out by that start, and are not committed: whoever takes the
        partition next reads them again."""
        if self.closed:
            return
        self.closed = True
        if self.state.scheduler is not None:
            self.state.scheduler.end(self, self.keys, self.unfinished(), self.generation)

    def __repr__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.position} ({len(self.batch)} records, {len(self.keys)} keys)"


class LaneRunner:
    """The turns and tasks of a channel start's partitions under ``key`` or ``none``; one per
    start, shared by its workers, keeping no per-partition state (that is the partition's
    :class:`KeyScheduler`)."""

    def __init__(
        self,
        config: ChannelConfig,
        responses: ResponseHandler,
        committer: PartitionCommitter,
        failures: FailurePolicy,
        stats: ChannelStats,
        submit: Callable[[LaneTask], None],
        offer: Callable[[PartitionState], None],
        wake: Callable[[list[Any]], None],
        may_act: Callable[[], bool],
    ) -> None:
        self.config = config
        self.responses = responses
        self.committer = committer
        self.failures = failures
        self.stats = stats
        self._submit = submit
        self._offer = offer
        self._wake = wake
        self._may_act = may_act

    @property
    def _async(self) -> bool:
        return isinstance(self.responses.processor, AsyncBatchEventProcessor)

    # -- the partition's turn -------------------------------------------------------------------

    def commit(self, state: PartitionState) -> None:
        """Commit the point the ended batches allow, if anything ended since the last call and
        the point moved (on the worker holding the turn)."""
        scheduler = state.scheduler
        assert scheduler is not None
        if not scheduler.take_news():
            return
        # Something ended: the point or its map moved (comparing the maps would build them at
        # every batch; the pipeline writes the newest point once per interval).
        point = scheduler.point()
        state.position = int(point)
        self.committer.advance(state, point)

    def wake(self, state: PartitionState) -> None:
        """The partition holds back: its batches waiting out a back-off run at once (and give
        their records back) instead of keeping a release or a pause waiting."""
        if state.scheduler is not None:
            self._wake(state.scheduler.tracked())

    def turn(self, state: PartitionState) -> bool:
        """Commit, take records, hand batches out; False when the partition has nothing open
        and nothing buffered (the caller's idle check)."""
        scheduler = state.scheduler
        assert scheduler is not None
        self.commit(state)
        if state.lost_reason is not None:
            return True
        room = scheduler.room()
        while room > 0 and state.buffer.buffered > 0:
            taken, resume = state.buffer.take_batch(room, self.config.batch_max_bytes)
            if resume:
                self.responses.fetcher.resume(state)
            if not taken:
                break
            scheduler.take(taken)
            room -= len(taken)
        parallelism = state.parallelism
        for batch, keys in scheduler.hand_out(parallelism, self.config.batch_max_events):
            task = LaneTask(state, batch, keys, scheduler.generation)
            scheduler.track(task)
            self._submit(task)
        if scheduler.has_news:  # records an earlier owner finished, skipped just now
            self.commit(state)
        return scheduler.open_records() > 0 or state.buffer.buffered > 0

    # -- a task, on any worker ------------------------------------------------------------------

    def resubmit(self, task: LaneTask) -> None:
        self._submit(task)

    def run(self, task: LaneTask) -> None:
        state = task.state
        if task.closed:  # a stale wake-up: the task ended already
            return
        if task.outcome is not None:
            batch, end, started = task.outcome
            task.outcome = None
            self._ended(task, batch, end, started)
            return
        if task.removed or state.lost_reason is not None:
            self._close(task, put_back=False)
            return
        if state.holds_back():
            self._close(task, put_back=True)
            return
        batch = self.failures.next_batch(task) or task.unfinished()
        if not batch:
            self._close(task, put_back=False)
            return
        head, last = offset_of(batch[0]), offset_of(batch[-1])
        source = PartitionSource(
            state.topic, state.partition, head, state.last_commit, last + 1,
            commit=lambda offset: self._commit_inside(task, batch, offset),
        )
        started = time.perf_counter()
        if self._async:
            def done(end: BatchEnd) -> None:
                task.outcome = (batch, end, started)
                self._submit(task)

            start_batch(self.responses.processor, source, EventBatch(batch), done,
                        group=self.config.group, may_start=self._may_act)
            return
        end = deliver_batch(self.responses.processor, source, EventBatch(batch), group=self.config.group,
                            may_start=self._may_act)
        self._ended(task, batch, end, started)

    def _commit_inside(self, task: LaneTask, batch: list[Message], offset: int) -> None:
        task.finish([m for m in batch if offset_of(m) < offset])
        self._offer(task.state)

    def _ended(self, task: LaneTask, batch: list[Message], end: BatchEnd, started: float) -> None:
        state = task.state
        if not end.started:
            task.not_before = time.monotonic() + 0.2
            self._submit(task)
            return
        if end.lost is not None:
            state.lost_reason = state.lost_reason or end.lost.reason
            self._close(task, put_back=False)
            return
        response = end.response
        failure = end.failure
        if response is not None:
            refused = self._refused(task, batch, response)
            if refused is not None:
                response, failure = None, refused
        if failure is not None:
            self.stats.batch_failed(state.key)
            response = self._failed(task, batch, failure, end)
            if response is None:
                self._next(task)
                return
        assert response is not None
        self._apply(task, batch, response, started)

    def _refused(self, task: LaneTask, batch: list[Message], response: BatchResponse) -> ResponseRefused | None:
        offset = response.offset
        if offset is None:
            return None
        head, after = offset_of(batch[0]), offset_of(batch[-1]) + 1
        if response.kind is ResponseKind.REVERT and offset <= head:
            return None
        if response.kind is not ResponseKind.REVERT and head <= offset <= after:
            return None
        return ResponseRefused(task.topic, task.partition, response, head, after, self.config.ordering)

    def _failed(
        self, task: LaneTask, batch: list[Message], exc: Exception, end: BatchEnd
    ) -> BatchResponse | None:
        state = task.state
        task.error_attempts += 1
        source = PartitionSource(state.topic, state.partition, offset_of(batch[0]), state.last_commit,
                                 offset_of(batch[-1]) + 1)
        response = ask_on_exception(
            self.responses.processor, source, batch, exc, task.error_attempts, log=log,
            failed=self.responses.hook_failed(state), span=end.span,
        )
        if response is not None and self._refused(task, batch, response) is None:
            return response
        given_up = self.failures.failed(task, batch, exc)
        if given_up is not None:
            task.finish([m for m in batch if offset_of(m) == given_up.offset])
        return None

    def _apply(self, task: LaneTask, batch: list[Message], response: BatchResponse, started: float) -> None:
        state = task.state
        if response.kind is ResponseKind.REVERT:
            cut = offset_of(batch[0])
        else:
            cut = response.offset if response.offset is not None else offset_of(batch[-1]) + 1
        done = [m for m in batch if offset_of(m) < cut]
        rest = [m for m in batch if offset_of(m) >= cut]
        self.stats.batch_done(state.key, len(done), time.perf_counter() - started, response.kind.value)
        waiting = None
        if response.because is not None and response.wait_ms and rest:
            waiting = self.failures.waiting(cut, response.wait_ms, response.because, task.failure)
        first_run = task.redeliver is None
        self.failures.succeeded(task, done, waiting)
        if rest:
            if first_run:
                task.redeliver = rest
            task.failure = waiting
        task.finish(done)
        if response.wait_ms:
            task.not_before = time.monotonic() + response.wait_ms / 1000
        state.last_activity = time.monotonic()
        state.idle_fired = False
        if response.kind is ResponseKind.ADVANCE and done:
            source = PartitionSource(state.topic, state.partition, offset_of(batch[0]), state.last_commit, cut)
            self.responses.call(state, "on_batch_processed", source)
        self._next(task)

    def _next(self, task: LaneTask) -> None:
        """The task goes on (records left to re-deliver, after its back-off) or ends."""
        if task.redeliver is not None and task.unfinished():
            self._submit(task)
        else:
            self._close(task, put_back=False)

    def _close(self, task: LaneTask, put_back: bool) -> None:
        """The task is out of flight; its unfinished records go back to their keys when
        ``put_back`` (a pause, a release: handed out again later, or given up with the lease)."""
        state = task.state
        task.closed = True
        self.failures.forget(task)
        scheduler = state.scheduler
        if scheduler is not None:
            scheduler.end(task, task.keys, task.unfinished() if put_back else [], task.generation)
        self._offer(state)
