"""Micro-batches being assembled: the open batch, replays, and the batch Spark is running.

The workers of the channel add events (one partition per worker at a time); the driver thread
takes whole micro-batches. Everything here is guarded by one condition variable, which also
carries the backpressure: a worker adding to a full open batch waits until the driver takes it.

State of one partition (``_Part``), from its first batch after being taken until it is released
or lost:

- *replaying*: ZooKeeper holds a pending range ``[from, to)`` starting at the committed offset
  (its previous owner died between writing and committing). Events up to ``to`` fill a replay
  slice; when it is complete the slice becomes a ready replay micro-batch with the recorded
  batch id, which the driver runs before any newer batch.
- *streaming*: events go to the open micro-batch.

A partition is registered under its current *hold* (``ChannelContext.hold``), with a new
``generation`` number each time: at its first batch under a hold, and again at its first batch
after a reposition (an offset reset or the out-of-range policy moved it). The driver drops a
slice whose generation is no longer the registered one (the partition was released, lost or
repositioned meanwhile), and commits every slice under the hold it was gathered in, so work of
an earlier hold can never be committed under a later one (the partition's next owner replays
it instead), nor work gathered from an earlier position over a later one.

Threads: the worker holding a partition's turn registers, feeds and forgets it; the driver
thread takes micro-batches and may forget a partition whose chain of slices it had to break
(its next batch then re-reads from the committed offset). A processor's collector lives from
one ``on_start`` to the next ``on_stop``: a resubscribe (hot deploy) gets a fresh one.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from jetkafka.events import Key
from jetkafka.spark._arrow import EVENT_SCHEMA, to_table
from jetkafka.spark._ledger import PendingRange

if TYPE_CHECKING:
    from jetkafka.coordination._ownership import Lease

log = logging.getLogger("jetkafka.spark")


@dataclass
class Slice:
    """One partition's events in a micro-batch: offsets ``[start, end)``."""

    topic: str
    partition: int
    start: int
    end: int
    generation: int
    hold: Lease  # the partition hold it was gathered under; commits are fenced by it
    chunks: list[pa.RecordBatch] = field(default_factory=list)
    events: int = 0
    nbytes: int = 0
    pending_version: int | None = None  # of this slice's pending node, once recorded
    # The hold's offset-node version the slice's commit expects: right after its record (or, for
    # a replay, at registration). Any other write under the hold since (a reposition) voids it.
    recorded_version: int | None = None

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)

    def add(self, chunk: pa.RecordBatch, end: int) -> None:
        self.chunks.append(chunk)
        self.events += chunk.num_rows
        self.nbytes += chunk.nbytes
        self.end = end

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] {self.start}..{self.end - 1}"


class MicroBatch:
    """Slices of several partitions, run through ``fn`` together under one batch id."""

    def __init__(self, batch_id: int | None = None) -> None:
        self.batch_id = batch_id
        self.replay = batch_id is not None  # a replay's id was recorded by an earlier owner
        self.slices: dict[Key, Slice] = {}
        self.opened_at = 0.0  # monotonic time of its first event (0 for a replay)
        self.closed_at = time.monotonic()  # when it stopped taking events (set again at its close)
        self.events = 0
        self.nbytes = 0

    def add(self, key: Key, generation: int, hold: Lease, start: int, chunk: pa.RecordBatch, end: int) -> None:
        s = self.slices.get(key)
        if s is None:
            if not self.slices:
                self.opened_at = time.monotonic()
            s = self.slices[key] = Slice(key[0], key[1], start, start, generation, hold)
        s.add(chunk, end)
        self.events += chunk.num_rows
        self.nbytes += chunk.nbytes

    def put(self, s: Slice) -> None:
        self.slices[s.key] = s
        self.events += s.events
        self.nbytes += s.nbytes

    def drop(self, key: Key) -> Slice | None:
        s = self.slices.pop(key, None)
        if s is not None:
            self.events -= s.events
            self.nbytes -= s.nbytes
        return s

    def table(self) -> pa.Table:
        return to_table([c for _, s in sorted(self.slices.items()) for c in s.chunks])

    def ranges(self) -> str:
        return ", ".join(str(s) for _, s in sorted(self.slices.items())) or "no partitions"

    def __repr__(self) -> str:
        kind = "replay " if self.replay else ""
        return f"MicroBatch({kind}{self.batch_id}: {self.ranges()})"


@dataclass
class _Part:
    generation: int
    hold: Lease
    next_offset: int  # redelivered events below it were taken already
    replay: Slice | None = None
    replay_id: int = -1
    replay_end: int = -1
    stale_version: int | None = None  # a leftover pending node that the next record overwrites


@dataclass(frozen=True)
class Bounds:
    """When the open micro-batch closes, and how far it may grow meanwhile.

    With the driver free, the open micro-batch closes at ``max_events`` events, ``max_bytes``
    bytes or ``max_interval_ms`` after its first event. While the driver still runs the
    previous one, the open one goes on taking events up to ``backlog_max_events`` (and
    ``max_bytes``): under a backlog the driver's fixed cost per micro-batch is spread over
    more events, and a group that caught up still gets small micro-batches, closed by the
    interval.
    """

    max_events: int
    max_bytes: int
    max_interval_ms: int
    backlog_max_events: int = 0  # 0: max_events (micro-batches of a fixed size)

    @property
    def ceiling_events(self) -> int:
        return max(self.max_events, self.backlog_max_events)


class Collector:
    """The assembly line between the channel's workers and the driver thread."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.cond = threading.Condition()
        self.open = MicroBatch()
        self.ready: list[MicroBatch] = []  # complete replays, oldest first
        self.running: MicroBatch | None = None
        self.stopping = False
        self._flush = False
        self._parts: dict[Key, _Part] = {}
        self._generations = itertools.count(1)

    # -- the workers' side ---------------------------------------------------------------------

    def registered_hold(self, key: Key) -> Lease | None:
        with self.cond:
            part = self._parts.get(key)
            return None if part is None else part.hold

    def register(self, key: Key, hold: Lease, pending: PendingRange | None) -> None:
        """First batch of a partition under a new hold: replay its pending range, if any."""
        committed = hold.committed
        assert committed is not None
        with self.cond:
            part = _Part(next(self._generations), hold, committed)
            if pending is not None and pending.batch_id >= 0 and pending.start == committed < pending.end:
                part.replay = Slice(key[0], key[1], committed, committed, part.generation, hold)
                part.replay.pending_version = pending.version
                # Registration runs in the partition's turn, with nothing of this hold written by
                # the driver yet: the version read now is the one the replay's commit must find.
                part.replay.recorded_version = hold.offset_version
                part.replay_id, part.replay_end = pending.batch_id, pending.end
                log.warning(
                    "%s[%d]: replaying micro-batch %d, offsets %d..%d, left uncommitted by %s",
                    key[0], key[1], pending.batch_id, pending.start, pending.end - 1, pending.consumer or "?",
                )
            elif pending is not None:
                part.stale_version = pending.version
                log.warning(
                    "%s[%d]: ignoring a pending micro-batch range %d..%d (batch %d) that does not start at the "
                    "committed offset %d; it will be overwritten",
                    key[0], key[1], pending.start, pending.end - 1, pending.batch_id, committed,
                )
            self._parts[key] = part

    def next_offset(self, key: Key) -> int | None:
        """Where the partition's next new event starts; None when it is not registered (any more)."""
        with self.cond:
            part = self._parts.get(key)
            return None if part is None else part.next_offset

    def replay_end(self, key: Key) -> int | None:
        """End of the partition's unfinished replay range, or None when it is streaming."""
        with self.cond:
            part = self._parts.get(key)
            return part.replay_end if part is not None and part.replay is not None else None

    def is_full(self) -> bool:
        """Whether :meth:`wait_for_room` would wait now (the open micro-batch is at its bound:
        ``max_events`` with the driver free, the backlog ceiling while it runs a micro-batch)."""
        with self.cond:
            return self._full(self.open) and not self.stopping

    def wait_for_room(self) -> None:
        """Block while the open batch is full and the driver is busy: the backpressure point."""
        with self.cond:
            while self._full(self.open) and not self.stopping:
                self.cond.wait(0.5)

    def add_replay(self, key: Key, chunk: pa.RecordBatch | None, last: int, complete: bool) -> None:
        with self.cond:
            part = self._parts.get(key)
            if part is None or part.replay is None:
                return
            if chunk is not None:
                part.replay.add(chunk, last + 1)
                part.next_offset = last + 1
            if complete:
                self._complete_replay(key, part)

    def add_open(self, key: Key, chunk: pa.RecordBatch, last: int) -> pa.RecordBatch | None:
        """Add what fits of ``chunk`` (events ending at offset ``last``) to the open micro-batch;
        returns the rest, for the caller to add after :meth:`wait_for_room`, or None.

        A micro-batch never holds more than its bound (``max_events`` while the driver is free,
        ``backlog_max_events`` while it runs one): a chunk that does not fit is cut, and the
        micro-batch closes with exactly that many events. ``max_bytes`` is checked per chunk: a
        full micro-batch takes nothing more, so it exceeds ``max_bytes`` by less than one chunk
        (a worker batch, ``batch_max_bytes``).
        """
        with self.cond:
            part = self._parts.get(key)
            if part is None:
                return None
            rest: pa.RecordBatch | None = None
            if not self.stopping:
                if self._full(self.open):
                    return chunk
                room = self._event_bound() - self.open.events
                if chunk.num_rows > room:
                    chunk, rest = chunk.slice(0, room), chunk.slice(room)
                    last = chunk.column(EVENT_SCHEMA.get_field_index("offset"))[room - 1].as_py()
            # A slice starts where the previous one ended, not at its first event: offsets of a
            # log may have gaps (compaction, transaction markers) and commits must chain.
            self.open.add(key, part.generation, part.hold, part.next_offset, chunk, last + 1)
            part.next_offset = last + 1
            self.cond.notify_all()
            return rest

    def complete_replay(self, key: Key) -> None:
        """Run an unfinished replay with the events received so far (the rest is gone from the log)."""
        with self.cond:
            part = self._parts.get(key)
            if part is not None and part.replay is not None:
                log.warning(
                    "%s[%d]: replay of micro-batch %d ends early at offset %d (range ends at %d): the broker "
                    "sent nothing more",
                    key[0], key[1], part.replay_id, part.next_offset, part.replay_end,
                )
                self._complete_replay(key, part)

    def _complete_replay(self, key: Key, part: _Part) -> None:
        s = part.replay
        assert s is not None
        # The commit must land on the recorded end even if the log has a gap before it.
        s.end = part.replay_end
        part.next_offset = max(part.next_offset, part.replay_end)
        part.replay = None
        for batch in self.ready:
            if batch.batch_id == part.replay_id:
                batch.put(s)
                break
        else:
            batch = MicroBatch(part.replay_id)
            batch.put(s)
            self.ready.append(batch)
        self.cond.notify_all()

    def forget(self, key: Key) -> None:
        """The partition was released, lost or repositioned: drop what is not yet in Spark's
        hands. A slice in the running batch is left to the driver, which drops it (its
        generation is gone) before anything more is written for it."""
        with self.cond:
            self._parts.pop(key, None)
            self.open.drop(key)
            for batch in self.ready:
                batch.drop(key)
            self.ready = [b for b in self.ready if b.slices]
            self.cond.notify_all()

    def settle(self, key: Key, timeout: float) -> bool:
        """Let the batches holding ``key`` finish (asking for the open one to close now).

        Returns False if they did not within ``timeout``; their slices of ``key`` are then left
        to the partition's next owner.
        """
        deadline = time.monotonic() + timeout
        with self.cond:
            part = self._parts.get(key)
            generation = part.generation if part is not None else -1
            if key in self.open.slices:
                self._flush = True
                self.cond.notify_all()
            while not self.stopping:
                busy = (
                    key in self.open.slices
                    or any(key in b.slices for b in self.ready)
                    or (self.running is not None and self._holds(self.running, key, generation))
                )
                left = deadline - time.monotonic()
                if not busy:
                    return True
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.5))
            return False

    # -- the driver's side ---------------------------------------------------------------------

    def take(self) -> MicroBatch | None:
        """The next micro-batch to run (replays first), waiting for one to close; None when stopping."""
        with self.cond:
            while not self.stopping:
                if self.ready:
                    batch = self.ready.pop(0)
                    batch.closed_at = time.monotonic()
                    self.running = batch
                    self.cond.notify_all()  # the open batch may grow now: workers waiting for room
                    return batch
                open_ = self.open
                if open_.events:
                    age_ms = (time.monotonic() - open_.opened_at) * 1000
                    if self._flush or self._full(open_) or age_ms >= self.bounds.max_interval_ms:
                        self._flush = False
                        self.open = MicroBatch()
                        open_.closed_at = time.monotonic()
                        self.running = open_
                        self.cond.notify_all()  # workers waiting for room
                        return open_
                    self.cond.wait(max(0.01, (self.bounds.max_interval_ms - age_ms) / 1000))
                else:
                    self._flush = False
                    self.cond.wait(0.5)
            return None

    def finished(self, batch: MicroBatch) -> None:
        with self.cond:
            if self.running is batch:
                self.running = None
            self.cond.notify_all()

    def is_current(self, s: Slice) -> bool:
        """Whether ``s`` belongs to the partition's registration in force (not released, lost
        or repositioned since it was gathered)."""
        with self.cond:
            part = self._parts.get(s.key)
            return part is not None and part.generation == s.generation and part.hold is s.hold

    def stale_versions(self, keys: Sequence[Key]) -> dict[Key, int | None]:
        with self.cond:
            return {k: (self._parts[k].stale_version if k in self._parts else None) for k in keys}

    def set_stale(self, key: Key, version: int | None) -> None:
        with self.cond:
            part = self._parts.get(key)
            if part is not None:
                part.stale_version = version

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    def sizes(self) -> tuple[int, int]:
        """Events and bytes held: open batch, ready and unfinished replays, and the running batch."""
        with self.cond:
            batches = [self.open, *self.ready] + ([self.running] if self.running is not None else [])
            events = sum(b.events for b in batches)
            nbytes = sum(b.nbytes for b in batches)
            for part in self._parts.values():
                if part.replay is not None:
                    events += part.replay.events
                    nbytes += part.replay.nbytes
            return events, nbytes

    def _event_bound(self) -> int:
        # Only the open batch grows, and only while the driver is busy: once it is free, a batch
        # beyond max_events is full, and the driver takes it at once. Not while a released
        # partition waits for it to close (settle): that wait is bounded by settle_timeout_s.
        grows = self.running is not None and not self._flush
        return self.bounds.ceiling_events if grows else self.bounds.max_events

    def _full(self, batch: MicroBatch) -> bool:
        return batch.events >= self._event_bound() or batch.nbytes >= self.bounds.max_bytes

    @staticmethod
    def _holds(batch: MicroBatch, key: Key, generation: int) -> bool:
        s = batch.slices.get(key)
        return s is not None and s.generation == generation
