"""The workers: the loop each worker thread runs, and what it does with a partition in one turn.

A worker thread (:func:`work_partitions`) takes a partition from the :class:`PartitionQueue`,
runs its turn with the :class:`BatchRunner`, keeps it for more turns while no other partition
waits, and gives it back. The queue hands a partition to one worker at a time, so everything
below runs on the one thread holding the partition's turn.

One turn handles, in this order of precedence: a loss (``on_exception`` with
:class:`PartitionLost`, nothing committed), a release (``on_stream_termination``, its response
applied, the owner node deleted), an out-of-range fetch offset, a pending commit, and then
either one batch or one idle callback. What a response does to the position is
:mod:`jetkafka.channel._responses`; every commit goes through the
:class:`~jetkafka.channel._committer.PartitionCommitter`.

A processor callback that raises goes to ``on_exception``; when that returns None the same
batch is re-delivered after an exponential back-off. Events are never skipped unless the
processor says so, and nothing ever rewinds to offset 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jetkafka._log_context import done_working, working_on
from jetkafka.channel._committer import PartitionCommitter
from jetkafka.channel._failures import FailurePolicy
from jetkafka.channel._partition import PartitionState
from jetkafka.channel._responses import ResponseHandler
from jetkafka.errors import PartitionLost
from jetkafka.events import EventBatch, PartitionSource, offset_of
from jetkafka.ordering._lanes import LaneRunner
from jetkafka.processors._base import BatchEventProcessor, BatchResponse, ResponseKind
from jetkafka.processors._calls import ask_on_exception, deliver_batch

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from jetkafka.channel._fetcher import Fetcher
    from jetkafka.channel._stats import ChannelStats
    from jetkafka.channel._work_queue import PartitionQueue
    from jetkafka.config import ChannelConfig
    from jetkafka.coordination._membership import GroupMembership

log = logging.getLogger("jetkafka.channel")

# Turns a worker runs in a row on one partition before it gives it back all the same, so no
# worker stays on one partition without passing through the queue.
KEPT_TURNS = 64


def work_partitions(queue: PartitionQueue, runner: BatchRunner, stop: threading.Event) -> None:
    """The loop of one worker thread, until ``stop`` is set or the queue is closed."""
    while not stop.is_set():
        state = queue.take(timeout=0.5)
        if state is None:
            if queue.closed:  # a worker of an earlier start, outlasting its teardown
                return
            continue
        if not isinstance(state, PartitionState):
            run_task(runner, state)
            continue
        try:
            working_on(state.key, state.position)
            runner.run_turn(state)
            for _ in range(KEPT_TURNS):
                if stop.is_set() or not queue.keep(state):
                    break
                working_on(state.key, state.position)
                runner.run_turn(state)
        except Exception:
            # Kafka or ZooKeeper calls inside a turn can fail; the partition is retried.
            log.exception("%s[%d]: turn failed at offset %d; retrying in 1 s", *state.key, state.position)
            state.not_before = time.monotonic() + 1.0
        finally:
            done_working()
            queue.give_back(state)


def run_task(runner: BatchRunner, task: Any) -> None:
    """Run one batch handed out under ``ordering: key | none`` (:class:`LaneTask`)."""
    try:
        working_on(task.key, task.position)
        runner.lanes.run(task)
    except Exception:
        # As a turn's: the batch is tried again in 1 s (its keys stay held meanwhile).
        log.exception("%s[%d]: batch at offset %d failed outside the processor; retrying in 1 s",
                      task.topic, task.partition, task.position)
        if not task.closed:
            task.not_before = time.monotonic() + 1.0
            runner.lanes.resubmit(task)
    finally:
        done_working()


class BatchRunner:
    """One turn of a partition, on the worker holding it; ``responses`` applies what it decided
    and ``committer`` commits."""

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
        committer: PartitionCommitter,
        queue: PartitionQueue | None = None,
    ) -> None:
        self.failures = failures
        self.processor = processor
        self.membership = membership
        self.fetcher = fetcher
        self.stats = stats
        self.committer = committer
        self.responses = ResponseHandler(config, processor, fetcher, stats, committer)
        self._remove = remove
        self._may_act = may_act
        self.lanes = LaneRunner(
            config,
            self.responses,
            committer,
            failures,
            stats,
            queue.submit if queue is not None else _no_queue,
            queue.offer if queue is not None else _no_queue,
            queue.wake if queue is not None else _no_queue,
            may_act,
        )

    @property
    def config(self) -> ChannelConfig:
        return self.responses.config

    @config.setter
    def config(self, config: ChannelConfig) -> None:
        """A new channel configuration (hot deploy, in place): the next turn runs on it, and a
        changed ``on_error`` the next attempt of a partition waiting out an error back-off,
        which comes at once (:meth:`FailurePolicy.reconfigure`)."""
        self.responses.config = config
        self.lanes.config = config
        self.committer.config = config
        self.failures.reconfigure(config)

    # -- one turn --------------------------------------------------------------------------

    def run_turn(self, state: PartitionState) -> None:
        if state.lanes_busy() and state.holds_back():
            # Its batches in flight end before a loss, release, move or pause is carried out
            # (one waiting out a back-off gives its records back at once); meanwhile what they
            # finished is committed (not after a loss: nothing more is).
            self.lanes.wake(state)
            if state.lost_reason is not None:
                assert state.scheduler is not None
                state.scheduler.take_news()
            elif not self._may_act():
                state.stalled_until = time.monotonic() + 0.2
            elif self.committer.retry_pending(state):
                self.lanes.commit(state)
            return
        if state.lost_reason is not None:
            self._lose(state)
        elif not self._may_act():
            # ZooKeeper suspended, or no answer from it for longer than the local lease allows:
            # start nothing that needs a commit, an owner-node delete, or a live session.
            state.stalled_until = time.monotonic() + 0.2
        elif state.moves:
            # Ahead of a release: the release then commits from the new position.
            self.responses.move(state)
        elif state.release_reason is not None:
            self._release(state)  # paused or not: a release must never wait for a resume
        elif state.paused or state.halted is not None:
            # Queued before it was paused (resume() queues it again), or (ordering key or none)
            # its last batches ended meanwhile: what they finished is committed.
            if state.scheduler is not None:
                self.lanes.commit(state)
        elif state.buffer.out_of_range:
            self.responses.out_of_range(state)
        elif not self.committer.retry_pending(state):
            pass  # lost: the next turn hands it over; committed (or nothing pending): go on below
        elif state.scheduler is not None:
            if not self.lanes.turn(state):
                self._idle(state)
        elif state.has_buffered():
            self._batch(state)
        else:
            self._idle(state)

    def _batch(self, state: PartitionState) -> None:
        batch = self.failures.next_batch(state)
        if batch is None:
            batch, resume = state.buffer.take_batch(self.config.batch_max_events, self.config.batch_max_bytes)
            if resume:
                self.fetcher.resume(state)
            if not batch:
                return
        after = offset_of(batch[-1]) + 1
        if state.inherited:
            # Finished by an earlier owner under ordering key or none: not delivered again.
            batch = [m for m in batch if offset_of(m) not in state.inherited]
            if not batch:
                state.position = after
                self.committer.advance(state, state.carry(after))
                return
        head, last = offset_of(batch[0]), offset_of(batch[-1])
        working_on(state.key, head)  # the batch's first offset, for the processor's log records
        source = self.responses.source(state, head, last + 1)
        started = time.perf_counter()
        # The lease is asked again inside the call, after everything above: the pending commit
        # retried before this is a ZooKeeper call a frozen process may wake inside, and a
        # freeze anywhere up to the processor's call must find the lease run out at the thaw.
        end = deliver_batch(
            self.processor, source, EventBatch(batch), group=self.config.group, may_start=self._may_act
        )
        if not end.started:
            if state.redeliver is None:  # a batch being re-delivered stays with the failure policy
                state.unread(batch)
            state.stalled_until = time.monotonic() + 0.2
            return
        if end.lost is not None:
            state.lost_reason = end.lost.reason
            return
        if end.failure is not None:
            self.stats.batch_failed(state.key)
            self._failed(state, source, batch, end.failure, end.span)
            return
        response = end.response
        assert response is not None
        self.stats.batch_done(state.key, len(batch), time.perf_counter() - started, response.kind.value)
        waiting = None
        if response.because is not None and response.wait_ms:
            target = response.offset if response.offset is not None else last + 1
            waiting = self.failures.waiting(target, response.wait_ms, response.because, state.failure)
        self.failures.succeeded(state, batch, waiting)
        state.last_activity = time.monotonic()
        state.idle_fired = False
        if self.responses.apply(state, response, after, batch):
            self.responses.call(state, "on_batch_processed", source)

    def _failed(
        self, state: PartitionState, source: PartitionSource, batch: list[Any], exc: Exception, span: Span | None = None
    ) -> None:
        state.error_attempts += 1
        response = ask_on_exception(
            self.processor, source, batch, exc, state.error_attempts, log=log, failed=self.responses.hook_failed(state),
            span=span,
        )
        if response is not None:
            # The processor decided (e.g. advance = skip the batch): follow it.
            self.failures.succeeded(state, batch)
            self.responses.apply(state, response, offset_of(batch[-1]) + 1)
            return
        given_up = self.failures.failed(state, batch, exc)
        if given_up is not None:
            self.responses.apply(state, BatchResponse.advance(), given_up.offset + 1)

    def _idle(self, state: PartitionState) -> None:
        if self.config.idle_ms <= 0 or state.idle_fired:
            return
        if time.monotonic() - state.last_activity < self.config.idle_ms / 1000:
            return
        if not self._may_act():
            # As before a batch: the pending commit retried in this turn may have been where
            # the process froze, and ``on_idle`` is the user's code too.
            state.stalled_until = time.monotonic() + 0.2
            return
        state.idle_fired = True
        source = self.responses.source(state, state.position, state.position)
        response = self.responses.call(state, "on_idle", source)
        if response is not None:
            self.responses.apply(state, response, state.position)

    # -- release, loss ---------------------------------------------------------------------

    def _release(self, state: PartitionState) -> None:
        source = self.responses.source(state, state.position, state.position)
        response = self.responses.call(state, "on_stream_termination", source)
        if state.scheduler is not None:
            self.lanes.commit(state)  # what its batches finished, with the map of finished offsets
        self.committer.settle(state)  # the owner-node delete below is fenced by the offset version
        if response is not None and response.kind is ResponseKind.ADVANCE:
            if response.offset is not None:
                target: int = response.offset
            elif state.scheduler is not None:
                target = state.scheduler.point()
            else:
                target = state.carry(state.position)
            self.committer.commit(state, target)
        else:
            self.committer.retry_pending(state)
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
        self.committer.drop_at_loss(state)
        source = self.responses.source(state, state.position, state.position)
        self.responses.call(state, "on_exception", source, PartitionLost(state.topic, state.partition, reason))
        self._remove(state)
        # If ZooKeeper still shows this lease (the loss was seen here first), give it up, so the
        # partition is taken again cleanly instead of staying owned and unprocessed.
        self.membership.finish_release(state.key, state.lease)


def _no_queue(_: Any) -> None:
    raise RuntimeError("ordering key or none needs the channel's work queue (BatchRunner(queue=...))")
