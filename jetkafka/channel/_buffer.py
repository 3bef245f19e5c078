"""An owned partition's buffer: what the fetcher fetched and the worker has not taken yet.

:class:`PartitionBuffer` is the one owner of the buffered runs and of the fetch-side fields
(``fetch_next``, ``log_end``, ``seek_pending``, ``fetch_paused``, ``out_of_range``, ``closed``).
Every one of them is written only under ``lock``, by its methods:

* the fetcher thread appends (:meth:`append`, with the log's end as the broker last reported
  it), marks the fetch offset out of range (:meth:`mark_out_of_range`), ends the wait for a
  seek (:meth:`fetching_from`) and gives back what the buffer borrowed beyond its share
  (:meth:`shed`, decided by :mod:`jetkafka.channel._shares`);
* the log-end watch raises ``log_end`` (:meth:`note_log_end`);
* the worker holding the partition's turn takes batches (:meth:`take_batch`), puts a batch's
  tail back (:meth:`unread`) and restarts the buffer at a new offset (:meth:`restart_at`);
* the worker that ends the partition's lease closes it (:meth:`close`); nothing is appended
  after that;
* the controller thread sets :meth:`await_seek` on a new buffer before it is shared.

Reads without the lock (``buffered``, ``out_of_range``, ``closed`` by the work queue and the
worker; :meth:`drained` by the worker; ``over_share``, ``log_end``, ``fetch_next`` by the
fetcher's share check) see a value that is at worst one step old; a late one only queues or
skips a turn that the next offer corrects, times a commit by the interval rather than at once,
or defers a share decision to the next check. ``lock`` is a leaf: nothing else is locked under
it but the budget's own lock.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections import deque
from itertools import accumulate, islice
from typing import TYPE_CHECKING

from jetkafka.events import offset_of

if TYPE_CHECKING:
    from confluent_kafka import Message

    from jetkafka.channel._budget import BufferBudget

Runs = deque[tuple[list["Message"], int]]


class PartitionBuffer:
    def __init__(self, start_offset: int, buffer_max_events: int, buffer_max_bytes: int, budget: BufferBudget) -> None:
        self.buffer_max_events = buffer_max_events
        self.buffer_max_bytes = buffer_max_bytes
        self.budget = budget
        self.lock = threading.Lock()
        # Fetched runs (consecutive messages and their bytes), oldest first; the worker already
        # took the first ``_head`` events of ``_runs[0]``. Runs are kept as the fetcher made
        # them, so buffering and taking cost a few list operations per run, not per event; a run
        # taken in part keeps its taken messages alive until it is used up (one fetch at most).
        self._runs: Runs = deque()
        self._head = 0
        self.buffered = 0  # events in the buffer
        self.buffered_bytes = 0
        self.fetch_next = start_offset  # next offset the fetcher may append
        # The partition's log end (high watermark) as the broker reported it by the latest
        # append or log-end look-up; None while unknown. Past ``fetch_next``: more records wait.
        self.log_end: int | None = None
        self.seek_pending = False  # drop appends until the fetcher re-positions
        # librdkafka fetching paused for the share: the buffer went beyond it while others
        # wanted room, or gave back what it borrowed; fetching resumes at half the share.
        self.fetch_paused = False
        self.held_since: float | None = None  # when fetching paused for the share (monotonic)
        self.out_of_range = False  # the broker reported the fetch offset out of range
        self.closed = False  # the partition left the channel: nothing is appended any more
        self.events_shed = 0  # events given back to other partitions (fetched again later)
        self.appends = 0  # runs appended: what the share check compares to see a fetch arrive
        self._over = False  # beyond its share, as last told to the budget
        # The budget's count of ended waits downstream when this buffer was last within its
        # share: a wait in progress then or begun since excuses it (jetkafka.channel._budget).
        self._waits_seen = budget.downstream_waits_ended

    # -- the fetcher ---------------------------------------------------------------------------

    def append(self, run: list[Message], log_end: int | None = None, hold_to_share: bool = False) -> bool:
        """Append consecutive messages of this partition; returns True if fetching should pause.

        ``log_end`` is the partition's high watermark as the fetching consumer knows it now
        (None: not known), kept for :meth:`drained`. ``hold_to_share``: other partitions want
        room (:mod:`jetkafka.channel._shares`), so a buffer now beyond its share stops
        fetching, unless a wait downstream excuses it (:meth:`excused`).

        The list itself is kept (not copied): the fetcher hands it over and does not touch it again.
        """
        with self.lock:
            if log_end is not None:
                self.log_end = log_end
            if self.seek_pending or self.closed:
                return False
            if offset_of(run[0]) < self.fetch_next:
                # Re-delivered after a pause/resume of the fetch: keep offsets strictly rising.
                run = [m for m in run if offset_of(m) >= self.fetch_next]
                if not run:
                    return False
            size = sum(map(len, run))
            self._runs.append((run, size))
            self.buffered += len(run)
            self.buffered_bytes += size
            self.budget.added(len(run), size)
            self.fetch_next = offset_of(run[-1]) + 1
            self.appends += 1
            self._track_share()
            if not hold_to_share or not self._over or self.fetch_paused or self.excused():
                return False
            self._hold()
            return True

    def _hold(self) -> None:
        """Stop fetching for the share (``lock`` held)."""
        self.fetch_paused = True
        self.held_since = time.monotonic()

    def _track_share(self) -> None:
        """Tell the budget when the buffer crosses its share, and remember the waits
        downstream while within it (``lock`` held)."""
        over = self.buffered > self.buffer_max_events or self.buffered_bytes > self.buffer_max_bytes
        if not over:
            self._waits_seen = self.budget.downstream_waits_ended
        if over != self._over:
            self._over = over
            self.budget.share_crossed(over)

    @property
    def over_share(self) -> bool:
        """Beyond its own share of the budget (a value at worst one step old)."""
        return self._over

    def below_half_share(self) -> bool:
        """Less than half its share is buffered: room it would use if records wait for it."""
        return self.buffered < self.buffer_max_events / 2 and self.buffered_bytes < self.buffer_max_bytes / 2

    def excused(self) -> bool:
        """A wait downstream was in progress when the buffer was last within its share, or
        began since: every partition waits for the same sink then, not for this one."""
        return self.budget.downstream_waits > self._waits_seen

    def hold_at_share(self) -> bool:
        """Stop fetching while beyond the share (others want room); True if it was fetching."""
        with self.lock:
            if self.closed or not self._over or self.fetch_paused:
                return False
            self._hold()
            return True

    def held_for(self) -> float:
        """Seconds since fetching stopped for the share; 0 while it fetches."""
        held_since = self.held_since
        return 0.0 if held_since is None or not self.fetch_paused else time.monotonic() - held_since

    def note_log_end(self, log_end: int) -> None:
        """By the log-end watch: the broker's high watermark, looked up while the budget is spent."""
        with self.lock:
            if self.log_end is None or log_end > self.log_end:
                self.log_end = log_end

    def shed(self) -> int:
        """Give back what is buffered beyond the share: keep the oldest events up to it (at
        least one, so that a later take resumes the fetch), drop the rest, pause fetching, and
        fetch the dropped offsets again once half the share is left (:meth:`resume_offset`).
        Returns how many events were dropped."""
        with self.lock:
            if self.closed or not self._over:
                return 0
            kept, events = _oldest(self._runs, self._head, self.buffer_max_events, self.buffer_max_bytes)
            dropped = self.buffered - events
            if dropped <= 0:
                return 0
            kept_bytes = sum(size for _, size in kept)
            freed = self.buffered_bytes - kept_bytes
            self._runs = kept
            self.buffered = events
            self.buffered_bytes = kept_bytes
            self.budget.removed(dropped, freed)
            self.fetch_next = offset_of(kept[-1][0][-1]) + 1
            self.seek_pending = True  # what the fetch still delivers from beyond is dropped
            if not self.fetch_paused:
                self._hold()
            self.events_shed += dropped
            self._track_share()
            return dropped

    def resume_offset(self) -> int | None:
        """Where the fetch must restart when it resumes, if it must be re-positioned (the
        buffer gave back its tail, or waits for a seek); None: it resumes where it stopped."""
        with self.lock:
            return self.fetch_next if self.seek_pending else None

    # -- the worker holding the turn -----------------------------------------------------------

    def drained(self) -> bool:
        """Nothing fetched waits here, and the fetch has reached the log's end as the broker
        last reported it (or that end is not known): records may still be produced, but none
        is known to be waiting. Read without the lock (a value at worst one append old)."""
        if self.buffered:
            return False
        log_end = self.log_end
        return log_end is None or self.fetch_next >= log_end

    def take_batch(self, max_events: int, max_bytes: int) -> tuple[list[Message], bool]:
        """Up to ``max_events`` / ``max_bytes`` (at least one event); and whether to resume fetching."""
        with self.lock:
            batch, released = self._take(max_events, max_bytes)
            self.buffered -= len(batch)
            self.buffered_bytes -= released
            self.budget.removed(len(batch), released)
            self._track_share()
            resume = False
            # At half the share, not at the share: resumed at its share, a buffer would go
            # beyond it with the next run and pause again, each pause throwing away what
            # librdkafka fetched ahead.
            if self.fetch_paused and (
                self.buffered <= self.buffer_max_events // 2 and self.buffered_bytes <= self.buffer_max_bytes // 2
            ):
                self.fetch_paused = False
                self.held_since = None
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
        self._track_share()

    def messages(self) -> list[Message]:
        """A copy of the buffered events, oldest first."""
        with self.lock:
            out: list[Message] = []
            head = self._head
            for run, _ in self._runs:
                out += run[head:]
                head = 0
            return out

    def next_timestamp_ms(self) -> int | None:
        """Any thread: the Kafka timestamp (ms since the epoch) of the oldest buffered event,
        the next one the worker will take; None when the buffer is empty or the record has no
        timestamp. Read for the lag in seconds (:mod:`jetkafka.ops._lag_time`)."""
        with self.lock:
            if not self._runs:
                return None
            run, _ = self._runs[0]
            kind, timestamp = run[self._head].timestamp()
            # TIMESTAMP_NOT_AVAILABLE is 0; CreateTime (1) and LogAppendTime (2) both count.
            return int(timestamp) if kind and timestamp >= 0 else None

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
            self._track_share()

    def await_seek(self) -> None:
        """Drop appends until the fetcher re-positions at ``fetch_next`` (:meth:`fetching_from`)."""
        with self.lock:
            self.seek_pending = True

    def fetching_from(self, offset: int) -> None:
        """By the fetcher: it now fetches from ``offset``."""
        with self.lock:
            # Only the command for the position this buffer waits for ends the wait, not
            # one queued for an earlier state of the partition.
            if self.fetch_next == offset:
                self.seek_pending = False

    def mark_out_of_range(self) -> bool:
        """By the fetcher: the broker reported ``fetch_next`` out of range; returns whether the
        mark was taken. Not while the buffer waits for a seek: the error is then about a
        position it no longer fetches from (the new one is reported on its own if it is out of
        range too), and under ``on_out_of_range: fail`` it would halt a healthy partition."""
        with self.lock:
            if self.seek_pending or self.closed:
                return False
            self.out_of_range = True
            return True

    def restart_at(self, offset: int) -> None:
        """Drop the buffer and expect the fetcher to restart at ``offset``."""
        with self.lock:
            self._clear()
            self.fetch_next = offset
            self.seek_pending = True
            self.fetch_paused = False
            self.held_since = None
            self.out_of_range = False

    def close(self) -> None:
        """Drop the buffer for good: the partition left the channel."""
        with self.lock:
            self.closed = True
            self._clear()


def _oldest(runs: Runs, head: int, max_events: int, max_bytes: int) -> tuple[Runs, int]:
    """The oldest runs (the first from ``head``) holding at most ``max_events`` and
    ``max_bytes``, the last one cut if need be, and at least one event; and their events."""
    kept: Runs = deque()
    events = 0
    room = max_bytes
    for run, run_bytes in runs:
        live = len(run) - head
        if events + live <= max_events and run_bytes <= room:
            kept.append((run, run_bytes))
            events += live
            room -= run_bytes
            head = 0
            continue
        sizes = list(accumulate(map(len, islice(run, head, None))))
        n = min(max_events - events, bisect_right(sizes, room))
        if not kept and n == 0:
            n = 1
        if n:
            # The first run keeps its taken head: ``_head`` still points into it.
            piece = run[: head + n]
            kept.append((piece, sum(map(len, piece))))
            events += n
        break
    return kept, events
