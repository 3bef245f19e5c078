"""The queue of partitions waiting for a worker.

Guarantee: a partition is in at most one worker's hands at a time. A partition is queued only
from IDLE, taken only from QUEUED, and returned to IDLE by the worker that took it, all under
one lock; so events of one partition are processed by one thread at a time, in offset order.
That holds across leases too: a partition lost and taken again has a new state while the old
one may still be queued (its loss to handle) or in a worker's hands (finishing a batch); the
new state waits, unqueued, until the old one is neither.

A partition is queued when it has work: buffered events, a batch to re-deliver, a release, a
loss or a reposition to handle, or an idle callback due. ``wait(ms)`` responses and error
back-offs hold it out of the queue until their time has come (releases, losses and
repositions do not wait, not even for a pause).

A worker whose partition still has work when its turn ends keeps it for the next turn as long
as no other partition waits for a worker (:meth:`PartitionQueue.keep`): a backlog then costs
no hand-off between threads per batch, and no partition waits behind another's backlog for
longer than the batch in hand.

Under ``channel.ordering: key | none`` the queue also holds *tasks*: batches of one partition
handed out by its turn (:class:`~jetkafka.ordering._lanes.LaneTask`), which any worker runs,
several of one partition at once. A task is in the queue (ready, or waiting for its back-off in
the timers) or in one worker's hands, never both. Partitions' turns go first: they commit, and
hand out more work.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from typing import Protocol

from jetkafka.channel._partition import PartitionState, Turn


class Task(Protocol):
    """A batch a worker runs apart from its partition's turn (:class:`LaneTask`)."""

    not_before: float
    timer_at: float | None

    def abandon(self) -> None:
        """The queue closed with the task queued or waiting in the timers, or the task came back
        to it after the close (an asynchronous batch's end): it is out of flight, not run again
        (its start is over)."""


class PartitionQueue:
    def __init__(self, idle_ms: int) -> None:
        self._idle_s = idle_ms / 1000
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # workers waiting for a partition
        # Callers of wait_idle wait apart from the workers: a turn ending wakes only them, and
        # a partition queued wakes a worker, never one of them.
        self._turn_ended = threading.Condition(lock)
        self._ready: deque[PartitionState] = deque()
        self._timers: list[tuple[float, int, PartitionState | Task]] = []
        self._tasks: deque[Task] = deque()
        self._seq = itertools.count()
        self._closed = False
        # The state of each partition that is queued or in a worker's hands, and the other
        # states of the same partition waiting for it to be neither, oldest first.
        self._active: dict[tuple[str, int], PartitionState] = {}
        self._waiting: dict[tuple[str, int], list[PartitionState]] = {}

    @property
    def closed(self) -> bool:
        return self._closed

    def _due(self, state: PartitionState, now: float) -> float | None:
        """0 if ``state`` has work now, a future time if it will, None if it waits for data."""
        if state.removed:
            return None
        lanes = state.scheduler
        if lanes is not None and state.holds_back() and (lanes.in_flight or lanes.has_news):
            # Its batches in flight end first; each end offers it again (a commit to make, also
            # while paused or halted), and a batch waiting out a back-off is woken by the turn to
            # give its records back.
            if not lanes.has_news and not self._parked(state):
                return None
            return 0.0 if now >= state.stalled_until else state.stalled_until
        if state.lost_reason is not None:
            return 0.0
        if state.release_reason is not None or state.moves:
            # Neither a pause nor a back-off holds these up; only ZooKeeper being out of reach.
            return 0.0 if now >= state.stalled_until else state.stalled_until
        if state.paused or state.halted is not None:
            return None  # resume() / a reposition offer it again
        wait_until = max(state.not_before, state.stalled_until)
        if now < wait_until:
            return wait_until
        if state.has_work() or state.commit_pending is not None or state.buffer.out_of_range:
            return 0.0
        if self._idle_s > 0 and not state.idle_fired:
            at = state.last_activity + self._idle_s
            return 0.0 if at <= now else at
        return None

    def _offer_locked(self, state: PartitionState, now: float) -> None:
        if state.turn is not Turn.IDLE:
            return
        active = self._active.get(state.key)
        if active is not None and active is not state:
            waiting = self._waiting.setdefault(state.key, [])
            if state not in waiting:
                waiting.append(state)  # offered again once the active state goes idle
            return
        due = self._due(state, now)
        if due == 0.0:
            state.turn = Turn.QUEUED
            self._active[state.key] = state
            self._ready.append(state)
            self._cond.notify()
        elif due is not None and (state.timer_at is None or due < state.timer_at):
            # One pending timer per partition: an earlier one re-evaluates when it fires.
            state.timer_at = due
            heapq.heappush(self._timers, (due, next(self._seq), state))
            self._cond.notify()  # a sleeping worker may need to wake earlier

    def offer(self, state: PartitionState | Task) -> None:
        """Queue ``state`` if it is idle and has work (fetcher, rebalancer, controls); a task
        (woken from its back-off by the failure policy) runs at once if it still waits in the
        timers, and is left alone if it does not: it is queued or in a worker's hands already,
        or it ended (submitting it again would run one batch twice)."""
        if not isinstance(state, PartitionState):
            self.wake([state])
            return
        with self._cond:
            self._offer_locked(state, time.monotonic())

    def submit(self, task: Task) -> None:
        """Queue a task for any worker, at once or when its ``not_before`` comes; on a closed
        queue (a batch ending after its start ended) the task is abandoned."""
        with self._cond:
            closed = self._closed
            if not closed:
                self._submit_locked(task)
        if closed:
            task.abandon()

    def _submit_locked(self, task: Task) -> None:
        if task.not_before > time.monotonic():
            task.timer_at = task.not_before
            heapq.heappush(self._timers, (task.not_before, next(self._seq), task))
        else:
            task.timer_at = None
            self._tasks.append(task)
        self._cond.notify()

    def _parked(self, state: PartitionState) -> bool:
        """Whether a batch of ``state`` waits in the timers (a back-off, a wait)."""
        assert state.scheduler is not None
        return any(getattr(task, "timer_at", None) is not None for task in state.scheduler.tracked())

    def wake(self, tasks: list[Task]) -> None:
        """Run these tasks' next attempt at once if they wait in the timers (their partition is
        released, lost, moved or paused: they give their records back instead of waiting)."""
        with self._cond:
            if self._closed:
                return  # its tasks are abandoned
            for task in tasks:
                if task.timer_at is not None:
                    task.timer_at = None  # its heap entry is skipped when it comes
                    self._tasks.append(task)
                    self._cond.notify()

    def take(self, timeout: float) -> PartitionState | Task | None:
        """The next partition with work, now in the caller's hands; None on timeout or close."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                self._offer_due_locked(now)
                if self._ready:
                    state = self._ready.popleft()
                    state.turn = Turn.IN_HAND
                    return state
                if self._tasks:
                    return self._tasks.popleft()
                wake = deadline
                if self._timers:
                    wake = min(wake, self._timers[0][0])
                if now >= deadline:
                    return None
                self._cond.wait(max(0.0, wake - now))
            return None

    def keep(self, state: PartitionState) -> bool:
        """Whether the worker holding ``state`` should run its next turn at once instead of
        giving it back: it has work now and no other partition is waiting for a worker (one
        whose wait or back-off just ran out counts as waiting)."""
        with self._cond:
            now = time.monotonic()
            self._offer_due_locked(now)
            return not self._ready and not self._tasks and not self._closed and self._due(state, now) == 0.0

    def _offer_due_locked(self, now: float) -> None:
        """Queue the partitions whose timer has come."""
        while self._timers and self._timers[0][0] <= now:
            at, _, item = heapq.heappop(self._timers)
            if not isinstance(item, PartitionState):
                if item.timer_at == at:  # else woken early (submitted again) or rescheduled
                    item.timer_at = None
                    self._tasks.append(item)
                continue
            if item.timer_at == at:
                item.timer_at = None
            self._offer_locked(item, now)

    def give_back(self, state: PartitionState) -> None:
        """The worker is done with its turn; the partition is queued again if it has work."""
        with self._cond:
            state.turn = Turn.IDLE
            now = time.monotonic()
            self._offer_locked(state, now)  # wakes one worker if queued again
            # Not queued again, and none of its batches in flight (ordering key or none): the
            # partition is free. Until then a newer state of it waits, as behind a turn in hand.
            if state.turn is Turn.IDLE and not state.lanes_busy():
                if self._active.get(state.key) is state:
                    del self._active[state.key]
                for waiting in self._waiting.pop(state.key, []):
                    if waiting is not state:
                        self._offer_locked(waiting, now)  # the first queued, the others wait again
            self._turn_ended.notify_all()

    def wait_idle(self, state: PartitionState, timeout: float) -> bool:
        """Block until ``state`` is not in a worker's hands; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while state.turn is Turn.IN_HAND:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._turn_ended.wait(left)
            return True

    def set_idle_ms(self, idle_ms: int) -> None:
        with self._cond:
            self._idle_s = idle_ms / 1000
            self._cond.notify_all()

    def close(self) -> None:
        """No more turns nor tasks; the tasks still queued are abandoned, so that their
        partitions do not count as busy in the start that ended (a later start of the channel
        takes a partition given up at shutdown only once nothing of it is in flight)."""
        with self._cond:
            self._closed = True
            # A task's stale heap entries (woken early, rescheduled) are not the task waiting.
            left = list(self._tasks) + [
                item for at, _, item in self._timers if not isinstance(item, PartitionState) and item.timer_at == at
            ]
            for task in left:
                task.timer_at = None
            self._tasks.clear()
            self._timers = [entry for entry in self._timers if isinstance(entry[2], PartitionState)]
            heapq.heapify(self._timers)
            self._cond.notify_all()
            self._turn_ended.notify_all()
        for task in left:
            task.abandon()
