"""One leased partition inside a channel: its buffer, its position, its commits and its turn.

The fetcher thread appends to the buffer (:mod:`jetkafka.channel._buffer`, under the buffer's
lock); the worker that holds the partition's turn takes batches from it and alone moves the
processing position; the queue guarantees there is at most one such worker. Which thread may
touch each other field is said on :class:`PartitionState`.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jetkafka.channel._buffer import PartitionBuffer
from jetkafka.errors import CommitFenced
from jetkafka.events import offset_of
from jetkafka.ordering._commit_point import CommitPoint, finished_of, runs_of
from jetkafka.ordering._key_scheduler import KeyScheduler, LaneFigures

if TYPE_CHECKING:
    from confluent_kafka import Message

    from jetkafka.channel._budget import BufferBudget
    from jetkafka.channel._moves import Move
    from jetkafka.coordination._ownership import Lease


class Turn(enum.Enum):
    IDLE = "idle"  # nobody holds it and it is not queued
    QUEUED = "queued"  # waiting for a free worker
    IN_HAND = "in hand"  # one worker is running it


@dataclass(frozen=True)
class PartitionFailure:
    """Why a held partition does not move on, as operators are shown it (``jetkafka status``,
    ``/status.json``, ``/readyz``, the ``jetkafka_partition_failing_seconds`` gauge)."""

    state: str  # "retrying", "isolating" (skip / dead-letter, record by record) or "halted"
    since: float  # epoch seconds: the first failure of this run of failures, or the halt
    attempts: int  # failed attempts of the batch or record tried now
    error: str  # the last error, "Type: message", shortened to one line
    offsets: tuple[int, int] | None  # first and last offset of what failed
    next_attempt: float | None  # epoch seconds; None: at once, or (halted) once an operator moves it


@dataclass(frozen=True)
class PartitionSnapshot:
    """A leased partition at one moment, as :meth:`InboundChannel.partitions` reports it."""

    topic: str
    partition: int
    position: int  # next offset to hand to the processor
    committed: int | None  # last commit that landed in ZooKeeper (None: none yet)
    buffered: int  # events fetched and waiting for the processor
    paused: bool  # by pause() or `jetkafka pause`
    halted: str | None  # why processing stopped until a reposition (on_out_of_range: fail)
    # Kafka timestamp (ms) of the next buffered event; None: nothing buffered, or no timestamp.
    next_timestamp_ms: int | None = None
    failure: PartitionFailure | None = None  # None: it moves on (or waits for records)
    # Under channel.ordering key or none: its records in flight, open, finished above the
    # commit point, and the age of the oldest unfinished one; None under partition order.
    lanes: LaneFigures | None = None


class PartitionState:
    """One lease of a partition in a channel (a partition leased again gets a new state).

    Its fields are grouped by owner; each group is written only as said here:

    * ``buffer`` (:class:`PartitionBuffer`): the fetched events and the fetch-side flags,
      under the buffer's own lock (fetcher appends, the worker holding the turn takes).
    * The processing position (``position``, ``redeliver``, ``isolating``, ``error_attempts``,
      ``failure``, ``halted`` with ``halted_since``, ``last_activity``, ``idle_fired``): only the
      worker holding the turn (the queue guarantees there is at most one), no lock; other
      threads read ``failure`` (an immutable value) through :meth:`snapshot`.
    * The commit state (``commit_pending``, ``advanced``; the landed offset is the lease's
      ``committed``): only the :class:`~jetkafka.channel._committer.PartitionCommitter`,
      whose docstring says on which threads and under which locks (the worker holding the
      turn; its pipeline's answer callback on the ZooKeeper client's thread, under the
      pipeline's lock; a processor's thread after its own commit outside the turns).
    * The turn (``turn``, ``timer_at``): only the :class:`PartitionQueue`, under its lock.
      ``not_before`` and ``stalled_until`` (when the next turn may come) are set by the worker
      holding the turn, and ``not_before`` also by the pipeline's answer callback and by the
      :class:`~jetkafka.channel._failures.FailurePolicy` when ``on_error`` changes (it ends
      the error back-off it scheduled, under its lock).
    * Requests from other threads, read by the next turn: ``paused`` (only
      :class:`ChannelControls`), ``moves`` (filed by controls, consumed by the turn),
      ``release_reason`` (:class:`PartitionLeases`, controller thread), ``lost_reason``
      (:class:`PartitionLeases` on the controller thread, or on a processor's thread when its
      own commit was refused; the pipeline's answer callback; or the turn itself). Once set,
      ``lost_reason`` is never cleared.
    """

    def __init__(
        self,
        lease: Lease,
        start_offset: int,
        buffer_max_events: int,
        buffer_max_bytes: int,
        budget: BufferBudget,
        scheduler: KeyScheduler | None = None,
        parallelism: int = 1,
    ) -> None:
        self.topic = lease.topic
        self.partition = lease.partition
        self.key = lease.key
        self.lease = lease
        self.buffer = PartitionBuffer(start_offset, buffer_max_events, buffer_max_bytes, budget)

        # The processing position: the worker holding the turn.
        self.position = start_offset  # next offset to hand to the processor
        self.redeliver: list[Message] | None = None
        self.isolating = False  # re-delivering ``redeliver`` one record at a time
        self.error_attempts = 0
        self.failure: PartitionFailure | None = None  # set by the failure policy
        self._halted: str | None = None
        self.halted_since: float | None = None  # epoch seconds
        self.last_activity = time.monotonic()
        self.idle_fired = False

        # The commit state: written only by the PartitionCommitter.
        self.commit_pending: int | None = None  # an advance ZooKeeper could not take yet
        self.advanced: int | None = None  # newest advance handed to the commit pipeline

        # The turn: the work queue.
        self.turn = Turn.IDLE
        self.timer_at: float | None = None
        self.not_before = 0.0  # a wait() response or an error back-off
        self.stalled_until = 0.0  # ZooKeeper out of reach: nothing that needs it before this

        # Requests from other threads, carried out by the next turn.
        self.paused = False  # paused by the user: no fetching, no processing
        # Repositions filed by other threads (offset resets), carried out by the next turn.
        self.moves: deque[Move] = deque()
        self.release_reason: str | None = None
        self.lost_reason: str | None = None

        # channel.ordering: key | none: the partition's records in flight (None: partition
        # order, one batch at a time), and how many batches may run at once.
        self.scheduler = scheduler
        self.parallelism = parallelism
        # Offsets an earlier owner finished above its commit (ordering key or none), skipped
        # when they come under partition order; the worker holding the turn only.
        self.inherited: set[int] = set() if scheduler is not None else {
            o for a, b in finished_of(getattr(lease, "committed", None)) for o in range(a, b) if o >= start_offset
        }

    @property
    def halted(self) -> str | None:
        """Why processing stopped until an operator repositions (``on_out_of_range: fail``)."""
        return self._halted

    @halted.setter
    def halted(self, reason: str | None) -> None:
        if reason is None or self._halted is None:
            self.halted_since = None if reason is None else time.time()
        self._halted = reason

    @property
    def removed(self) -> bool:
        """The lease ended and the partition left the channel (:meth:`remove`)."""
        return self.buffer.closed

    def unread(self, messages: list[Message]) -> None:
        """By the worker holding the turn: put the tail of a batch back (a seek inside the batch)."""
        self.buffer.unread(messages)
        self.position = offset_of(messages[0])

    def remove(self) -> None:
        """The partition left the channel: nothing more is buffered or appended, and moves
        still waiting fail as fenced (the next owner applies resets at take-over)."""
        self.buffer.close()
        while self.moves:
            move = self.moves.popleft()
            # An uncertain move is started already and no longer withdrawable: its waiter is
            # answered here too, or it would wait forever.
            if move.uncertain or move.start():
                move.fail(
                    CommitFenced(self.topic, self.partition, "reposition refused: partition given up first", "not_held")
                )

    def reposition(self, offset: int) -> None:
        """By the worker holding the turn: drop the buffer, expect the fetcher to restart at
        ``offset``, and go on from there (the committer forgets the advances made before:
        :meth:`PartitionCommitter.repositioned`)."""
        self.buffer.restart_at(offset)
        self.position = offset
        self.inherited = set()
        if self.scheduler is not None:
            self.scheduler.reset(offset)
        self.redeliver = None
        self.isolating = False
        self.error_attempts = 0
        self.failure = None
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
            self.buffer.buffered,
            self.paused,
            self.halted,
            self.buffer.next_timestamp_ms(),
            self._failure_now(),
            None if self.scheduler is None else self.scheduler.figures(),
        )

    def _failure_now(self) -> PartitionFailure | None:
        halted, since = self._halted, self.halted_since
        if halted is not None:
            return PartitionFailure("halted", since if since is not None else time.time(), 0, halted, None, None)
        if self.scheduler is not None:
            # Its batches fail one by one: the partition shows the one failing the longest.
            failing = [f for f in (getattr(t, "failure", None) for t in self.scheduler.tracked()) if f is not None]
            return min(failing, key=lambda f: f.since) if failing else None
        return self.failure

    def has_buffered(self) -> bool:
        return self.buffer.buffered > 0 or self.redeliver is not None

    def has_work(self) -> bool:
        """Whether a turn would do something with the records: under partition order, any
        buffered; with a scheduler, records to take while there is room, batches to hand out,
        or batches that ended since the last turn (a commit to make)."""
        scheduler = self.scheduler
        if scheduler is None:
            return self.has_buffered()
        return (
            scheduler.has_news
            or (self.buffer.buffered > 0 and scheduler.room() > 0)
            or scheduler.dispatchable(self.parallelism)
        )

    def holds_back(self) -> bool:
        """Whether no new batch may start: lost, released, a reposition filed or due, halted,
        or paused. With a scheduler, these wait until its batches in flight ended."""
        return (
            self.lost_reason is not None
            or self.release_reason is not None
            or bool(self.moves)
            or self.paused
            or self._halted is not None
            or self.buffer.out_of_range
        )

    def lanes_busy(self) -> bool:
        """Batches of this partition are in flight (ordering key or none)."""
        return self.scheduler is not None and self.scheduler.in_flight > 0

    def carry(self, offset: int) -> int:
        """Under partition order: ``offset`` to commit, with the offsets an earlier owner
        finished above it still to come (so a hand-over before they come keeps them)."""
        if not self.inherited:
            return offset
        self.inherited = {o for o in self.inherited if o >= offset}
        # Finished offsets right at the position are committed past: a commit point's own
        # offset is unfinished by definition (its map cannot name it), so committing the
        # position itself would have the next owner process them again. They stay in
        # ``inherited`` until read, to be skipped.
        low = offset
        while low in self.inherited:
            low += 1
        above = runs_of(o for o in self.inherited if o > low)
        return CommitPoint(low, above) if above else low

    def drained(self) -> bool:
        """By the worker holding the turn: nothing fetched waits for the processor (nothing
        buffered or to re-deliver) and the fetch reached the log's end as last reported
        (:meth:`PartitionBuffer.drained`). What times an advance's commit
        (:meth:`PartitionCommitter.advance`)."""
        return self.redeliver is None and self.buffer.drained()

    def __repr__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.position}"
