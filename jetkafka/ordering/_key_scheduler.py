"""Which records of one partition may run now, and how far the partition may be committed.

Guarantee (``channel.ordering: key``): two records with the same key are never in flight
together, and a key's records are handed out in offset order; records without a key form one
key of their own. Under ``none`` every record is its own key. A record handed out stays *in
flight* until its batch ends (finished, or given up by the failure policy); a batch re-delivered
after a failure or a ``wait`` keeps its keys, so the key's later records wait behind it.

Bound: at most ``max_in_flight`` records are *open* at a time: taken from the buffer and not
yet below the commit point (waiting for their key, in a batch, or finished above an unfinished
record). A key that does not move on (a slow subscriber, a poison record under ``retry``) holds
back only its own records until that many others finished behind it; the map of finished
offsets, and so the offset node, never holds more.

Commit point (:meth:`KeyScheduler.point`): the lowest open offset that is not finished, with
the finished offsets above it (:class:`~jetkafka.ordering._commit_point.CommitPoint`).
Offsets an earlier owner finished (the map it committed, ``inherited``) count as finished when
they come and are never handed out again.

Threads: every method takes the scheduler's lock; the partition's turn takes and hands out,
any worker ends batches, and so do the event loop's thread and the thread ending a channel start
for the batches a closed work queue abandons. A batch ends once: a second :meth:`end` of a
tracked task is ignored.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jetkafka.events import offset_of
from jetkafka.ordering._commit_point import CommitPoint, Runs, runs_of

if TYPE_CHECKING:
    from confluent_kafka import Message

ORDERINGS = ("partition", "key", "none")


@dataclass(frozen=True)
class LaneFigures:
    """A partition's records under ``ordering: key | none`` at one moment."""

    ordering: str  # "key" or "none"
    in_flight: int  # records handed to the processor and not finished
    open: int  # records taken and not yet below the commit point (at most max_in_flight)
    finished_above: int  # offsets finished above the commit point: the map committed with it
    oldest_unfinished_s: float  # seconds since the record at the commit point was taken (0: none open)


class KeyScheduler:
    def __init__(self, mode: str, max_in_flight: int, start: int, inherited: Runs = ()) -> None:
        if mode not in ("key", "none"):
            raise ValueError(f"KeyScheduler runs ordering key or none, not {mode!r}")
        self.mode = mode
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._open: deque[tuple[int, float]] = deque()  # (offset, taken at, monotonic) in offset order
        self._finished: set[int] = {o for a, b in inherited for o in range(a, b)}
        self._next = start  # the offset after the last one taken
        self._pending: dict[Hashable, deque[Message]] = {}
        self._free: deque[Hashable] = deque()  # keys with pending records and no batch in flight
        self._busy: set[Hashable] = set()
        self._waiting = 0  # records pending
        self.in_flight = 0  # batches handed out and not ended
        self.records_in_flight = 0
        self.generation = 0  # bumped by reset(): batches of an older generation finish nothing
        self._news = False  # something ended since the last point()
        self._tasks: set[object] = set()  # the batches in flight (their tasks), for what they show
        self.skipped_finished = 0  # records an earlier owner had finished, not handed out again

    # -- taking ---------------------------------------------------------------------------------

    def room(self) -> int:
        """How many more records may be taken from the buffer now."""
        with self._lock:
            return max(0, self.max_in_flight - len(self._open))

    def take(self, messages: Iterable[Message]) -> None:
        now = time.monotonic()
        with self._lock:
            for message in messages:
                offset = offset_of(message)
                self._next = offset + 1
                self._open.append((offset, now))
                if offset in self._finished:
                    self.skipped_finished += 1
                    self._news = True
                    continue
                key: Hashable = message.key() if self.mode == "key" else offset
                queue = self._pending.get(key)
                if queue is None:
                    self._pending[key] = deque((message,))
                    if key not in self._busy:
                        self._free.append(key)
                else:
                    queue.append(message)
                self._waiting += 1

    def dispatchable(self, parallelism: int) -> bool:
        """Whether :meth:`hand_out` would hand out something with ``parallelism`` batches at most."""
        with self._lock:
            return bool(self._free) and self.in_flight < parallelism

    def hand_out(self, parallelism: int, max_events: int) -> list[tuple[list[Message], frozenset[Hashable]]]:
        """Batches for the free keys, at most ``parallelism`` in flight in all: each batch holds
        whole runs of its keys' records in offset order, at most ``max_events`` records, and as
        many keys as spreads the free keys over every slot, busy ones included (sized by the free
        slots alone, the last slot of a busy partition would take every free key at once and
        run them one after the other while the slots that free up next find nothing to do)."""
        with self._lock:
            slots = parallelism - self.in_flight
            if slots <= 0 or not self._free:
                return []
            cap = math.ceil(len(self._free) / parallelism)  # keys per batch, at most
            # Records per batch, at most: small enough that the waiting records spread over
            # every slot; a key's long run in one batch would hold a thread for all of it while
            # other keys wait for one. With fewer waiting keys than slots no other key can use
            # a slot, so the records spread over two batches per key: a key's run is ordered
            # anyway, and cut into many small batches it pays a hand-out round trip per batch;
            # in one batch, the key would find nothing ready when it ends and wait for the
            # slowest key to move the commit point (the bound on open records) before it goes on.
            lanes = min(parallelism, 2 * len(self._pending))
            size = min(max_events, max(1, math.ceil(self._waiting / max(1, lanes))))
            count = min(slots, len(self._free))
            out = []
            for i in range(count):
                per_batch = min(cap, math.ceil(len(self._free) / (count - i)))
                batch: list[Message] = []
                keys: set[Hashable] = set()
                while self._free and len(keys) < per_batch and len(batch) < size:
                    key = self._free.popleft()
                    queue = self._pending[key]
                    while queue and len(batch) < size:
                        batch.append(queue.popleft())
                    if not queue:
                        del self._pending[key]
                    keys.add(key)
                    self._busy.add(key)
                if not batch:
                    break
                # Several keys in one batch: their records in offset order, each key's in its own.
                if len(keys) > 1:
                    batch.sort(key=offset_of)
                self._waiting -= len(batch)
                self.in_flight += 1
                self.records_in_flight += len(batch)
                out.append((batch, frozenset(keys)))
            return out

    # -- ending ---------------------------------------------------------------------------------

    def finish(self, offsets: Iterable[int], generation: int) -> None:
        """Records of a batch in flight finished (processed, skipped or dead-lettered)."""
        with self._lock:
            if generation != self.generation:
                return
            done = list(offsets)
            self._finished.update(done)
            self.records_in_flight -= len(done)
            self._news = True

    def track(self, task: object) -> None:
        """Remember a handed-out batch's task until :meth:`end` (what :meth:`tracked` lists)."""
        with self._lock:
            self._tasks.add(task)

    def tracked(self) -> list[object]:
        with self._lock:
            return list(self._tasks)

    def end(self, task: object, keys: Iterable[Hashable], unfinished: list[Message], generation: int) -> None:
        """A batch is out of flight: its keys are free again; ``unfinished`` records (a batch put
        back before it ran, or cut short) go back ahead of their keys' later records."""
        with self._lock:
            if task is not None:
                if task not in self._tasks:
                    return  # ended already: a second end would free keys another batch holds
                self._tasks.discard(task)
            self.in_flight -= 1
            self._news = True
            current = generation == self.generation
            if current:
                self.records_in_flight -= len(unfinished)
                for message in reversed(unfinished):
                    key: Hashable = message.key() if self.mode == "key" else offset_of(message)
                    queue = self._pending.get(key)
                    if queue is None:
                        self._pending[key] = queue = deque()
                    queue.appendleft(message)
                    self._waiting += 1
            # A key stays busy across a reset until its batch of the older generation ends (two
            # batches of one key are never in flight together); records of it taken since then
            # wait for that, and are free now.
            for key in keys:
                self._busy.discard(key)
                if key in self._pending:
                    self._free.append(key)

    def reset(self, offset: int) -> None:
        """Everything taken is void (a move, the out-of-range policy): start again at ``offset``.
        Batches still in flight finish nothing when they end; their keys stay busy until then."""
        with self._lock:
            self.generation += 1
            self._open.clear()
            self._finished.clear()
            self._pending.clear()
            self._free.clear()
            self._waiting = 0
            self.records_in_flight = 0
            self._next = offset
            self._news = True

    # -- the commit point -------------------------------------------------------------------------

    def take_news(self) -> bool:
        """Whether a batch ended or records finished since the last call (and clear it)."""
        with self._lock:
            news, self._news = self._news, False
            return news

    @property
    def has_news(self) -> bool:
        return self._news

    def point(self) -> CommitPoint:
        with self._lock:
            open_ = self._open
            finished = self._finished
            while open_ and open_[0][0] in finished:
                finished.discard(open_.popleft()[0])
            low = open_[0][0] if open_ else self._next
            # Offsets known finished right at the low end (an earlier owner's, not fetched yet).
            while not open_ and low in finished:
                finished.discard(low)
                low += 1
                self._next = low
            if len(finished) > 2 * len(open_) + 64:
                self._finished = {o for o in finished if o > low}
            generation = self.generation
            return CommitPoint(low, lambda: self._runs_above(low, generation))

    def _runs_above(self, low: int, generation: int) -> Runs:
        """The finished offsets above ``low`` now, as runs (none after a reset)."""
        with self._lock:
            if generation != self.generation:
                return ()
            return runs_of(o for o in self._finished if o > low)

    def open_records(self) -> int:
        with self._lock:
            return len(self._open)

    def oldest_open_age(self) -> float:
        """Seconds since the record at the commit point was taken (0 with nothing open)."""
        with self._lock:
            for offset, taken in self._open:
                if offset not in self._finished:
                    return time.monotonic() - taken
            return 0.0

    def figures(self) -> LaneFigures:
        """The partition's lanes now, for the metrics and ``jetkafka status`` (one pass over
        the finished offsets, at most ``max_in_flight`` of them)."""
        now = time.monotonic()
        with self._lock:
            low = self._open[0][0] if self._open else self._next
            oldest = 0.0
            for offset, taken in self._open:
                if offset not in self._finished:
                    oldest = now - taken
                    break
            return LaneFigures(
                self.mode,
                self.records_in_flight,
                len(self._open),
                sum(1 for o in self._finished if o > low),
                oldest,
            )

    def waiting(self) -> int:
        with self._lock:
            return self._waiting
