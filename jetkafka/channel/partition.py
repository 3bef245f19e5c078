"""One owned partition inside a channel: its buffer, its position and its turn.

The fetcher thread appends to the buffer; the worker that holds the partition's turn takes
batches from it. ``lock`` guards the buffer fields only; the processing fields (``position``,
``committed``, ``redeliver`` …) are touched by the worker holding the turn, and the queue
guarantees there is at most one such worker.
"""

from __future__ import annotations

import enum
import threading
import time
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from itertools import accumulate, islice
from typing import TYPE_CHECKING

from jetkafka.errors import CommitFenced

if TYPE_CHECKING:
    from confluent_kafka import Message

    from jetkafka.channel.budget import BufferBudget
    from jetkafka.channel.moves import Move
    from jetkafka.coordination.ownership import Lease


class Turn(enum.Enum):
    IDLE = "idle"  # nobody holds it and it is not queued
    QUEUED = "queued"  # waiting for a free worker
    IN_HAND = "in hand"  # one worker is running it


@dataclass(frozen=True)
class PartitionSnapshot:
    """A held partition at one moment, as :meth:`InboundChannel.partitions` reports it."""

    topic: str
    partition: int
    position: int  # next offset to hand to the processor
    committed: int | None  # last commit that landed in ZooKeeper (None: none yet)
    buffered: int  # events fetched and waiting for the processor
    paused: bool  # by pause() or `jetkafka pause`
    halted: str | None  # why processing stopped until a reposition (on_out_of_range: fail)


class PartitionState:
    # A partition is paused in librdkafka only this far beyond its own share of the budget, and
    # only once the channel's budget is spent: a pause throws away what librdkafka fetched ahead
    # for it, which is wasted while the fetcher has room for it anyway.
    PAUSE_FACTOR = 4

    def __init__(
        self, lease: Lease, start_offset: int, buffer_max_events: int, buffer_max_bytes: int, budget: BufferBudget
    ) -> None:
        self.topic = lease.topic
        self.partition = lease.partition
        self.key = lease.key
        self.lease = lease
        self.buffer_max_events = buffer_max_events
        self.buffer_max_bytes = buffer_max_bytes
        self.budget = budget

        self.lock = threading.Lock()
        # Fetched runs (consecutive messages and their bytes), oldest first; the worker already
        # took the first ``_head`` events of ``_runs[0]``. Runs are kept as the fetcher made
        # them, so buffering and taking cost a few list operations per run, not per event; a run
        # taken in part keeps its taken messages alive until it is used up (one fetch at most).
        self._runs: deque[tuple[list[Message], int]] = deque()
        self._head = 0
        self.buffered = 0  # events in the buffer
        self.buffered_bytes = 0
        self.fetch_next = start_offset  # next offset the fetcher may append
        self.seek_pending = False  # drop appends until the fetcher re-positions
        self.fetch_paused = False  # librdkafka fetching paused because the buffer is full
        self.paused = False  # paused by the user: no fetching, no processing
        self.out_of_range = False  # the broker reported the fetch offset out of range

        self.position = start_offset  # next offset to hand to the processor
        self.commit_pending: int | None = None  # an advance ZooKeeper could not take yet
        self.advanced: int | None = None  # newest advance handed to the commit pipeline
        self.redeliver: list[Message] | None = None
        self.isolating = False  # re-delivering ``redeliver`` one record at a time
        self.error_attempts = 0
        self.halted: str | None = None  # why processing stopped until an operator repositions
        # Repositions filed by other threads (offset resets), carried out by the next turn.
        self.moves: deque[Move] = deque()

        self.turn = Turn.IDLE
        self.not_before = 0.0  # a wait() response or an error back-off
        self.stalled_until = 0.0  # ZooKeeper out of reach: nothing that needs it before this
        self.timer_at: float | None = None
        self.last_activity = time.monotonic()
        self.idle_fired = False
        self.release_reason: str | None = None
        self.lost_reason: str | None = None
        self.removed = False

    # -- fetcher side ----------------------------------------------------------------------

    def append(self, run: list[Message]) -> bool:
        """Append consecutive messages of this partition; returns True if fetching should pause.

        The list itself is kept (not copied): the fetcher hands it over and does not touch it again.
        """
        with self.lock:
            if self.seek_pending or self.removed:
                return False
            if run[0].offset() < self.fetch_next:
                # Re-delivered after a pause/resume of the fetch: keep offsets strictly rising.
                run = [m for m in run if m.offset() >= self.fetch_next]
                if not run:
                    return False
            size = sum(map(len, run))
            self._runs.append((run, size))
            self.buffered += len(run)
            self.buffered_bytes += size
            self.budget.added(len(run), size)
            self.fetch_next = run[-1].offset() + 1
            k = self.PAUSE_FACTOR
            full = self.buffered >= k * self.buffer_max_events or self.buffered_bytes >= k * self.buffer_max_bytes
            if full and not self.fetch_paused and self.budget.spent():
                self.fetch_paused = True
                return True
            return False

    # -- worker side -----------------------------------------------------------------------

    def take_batch(self, max_events: int, max_bytes: int) -> tuple[list[Message], bool]:
        """Up to ``max_events`` / ``max_bytes`` (at least one event); and whether to resume fetching."""
        with self.lock:
            batch, released = self._take(max_events, max_bytes)
            self.buffered -= len(batch)
            self.buffered_bytes -= released
            self.budget.removed(len(batch), released)
            resume = False
            if self.fetch_paused and (
                self.buffered <= self.buffer_max_events and self.buffered_bytes <= self.buffer_max_bytes
            ):
                self.fetch_paused = False
                resume = True
            return batch, resume

    def _take(self, max_events: int, max_bytes: int) -> tuple[list[Message], int]:
        """Remove the next batch from the buffer (``lock`` held); and the bytes that frees.

        Runs are joined list to list, so the work per event stays in C: this runs for every
        event the channel processes. Bytes are counted per run and freed when a run is used up
        (``buffered_bytes`` may count up to one run taken in part); a run's size bounds any part
        of it, so sizes of single events are added up only for a run that may not fit.
        """
        runs = self._runs
        batch: list[Message] = []
        room = max_bytes
        released = 0
        while runs and len(batch) < max_events:
            run, run_bytes = runs[0]
            head = self._head
            n = min(len(run) - head, max_events - len(batch))
            if run_bytes > room:
                fits = bisect_right(list(accumulate(map(len, islice(run, head, head + n)))), room)
                n = fits if fits or batch else 1  # a batch holds at least one event
                if not n:
                    break
            piece = run if head == 0 and n == len(run) else run[head : head + n]
            batch = piece if not batch else batch + piece
            room -= run_bytes
            if head + n < len(run):
                self._head = head + n
                break
            runs.popleft()
            self._head = 0
            released += run_bytes
        return batch, released

    def _clear(self) -> None:
        """Drop the whole buffer (``lock`` held)."""
        self.budget.removed(self.buffered, self.buffered_bytes)
        self._runs.clear()
        self._head = 0
        self.buffered = 0
        self.buffered_bytes = 0

    def buffered_messages(self) -> list[Message]:
        """A copy of the buffered events, oldest first."""
        with self.lock:
            out: list[Message] = []
            head = self._head
            for run, _ in self._runs:
                out += run[head:]
                head = 0
            return out

    def unread(self, messages: list[Message]) -> None:
        """Put the tail of a batch back at the front of the buffer (a seek inside the batch)."""
        with self.lock:
            released = 0
            if self._head:
                run, run_bytes = self._runs[0]
                rest = run[self._head :]
                rest_bytes = sum(map(len, rest))
                self._runs[0] = (rest, rest_bytes)
                self._head = 0
                released = run_bytes - rest_bytes
            size = sum(map(len, messages))
            self._runs.appendleft((messages, size))
            self.buffered += len(messages)
            self.buffered_bytes += size - released
            self.budget.added(len(messages), size)
            self.budget.removed(0, released)
        self.position = messages[0].offset()

    def remove(self) -> None:
        """The partition left the channel: nothing more is buffered or appended, and moves
        still waiting fail as fenced (the next owner applies resets at take-over)."""
        with self.lock:
            self.removed = True
            self._clear()
        while self.moves:
            move = self.moves.popleft()
            # An uncertain move is started already and no longer withdrawable: its waiter is
            # answered here too, or it would wait forever.
            if move.uncertain or move.start():
                move.fail(CommitFenced(self.topic, self.partition, "reposition refused: partition given up first", "not_held"))

    def reposition(self, offset: int) -> None:
        """Drop the buffer and expect the fetcher to restart at ``offset``."""
        with self.lock:
            self._clear()
            self.fetch_next = offset
            self.seek_pending = True
            self.fetch_paused = False
            self.out_of_range = False
        self.position = offset
        self.advanced = None
        self.redeliver = None
        self.isolating = False
        self.error_attempts = 0
        self.halted = None

    @property
    def committed(self) -> int | None:
        """The last committed offset, whoever committed it (worker, processor, channel context)."""
        return self.lease.committed

    @property
    def last_commit(self) -> int | None:
        """The newest commit as the processor sees it: a pipelined advance counts once sent
        (it lands, or the partition is reported lost)."""
        return self.advanced if self.advanced is not None else self.lease.committed

    def snapshot(self) -> PartitionSnapshot:
        return PartitionSnapshot(
            self.topic,
            self.partition,
            self.position,
            self.lease.committed,
            self.buffered,
            self.paused,
            self.halted,
        )

    def has_buffered(self) -> bool:
        return self.buffered > 0 or self.redeliver is not None

    def __repr__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.position}"
