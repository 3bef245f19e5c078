"""The offset mirror's bookkeeping: which landed commits go to Kafka's group offsets, and when.

With ``channel.commit_to_kafka`` every commit that landed in ZooKeeper is copied to the group
offsets of ``kafka.group.id``, so Kafka's lag tools can watch a jetkafka group. ZooKeeper stays
authoritative; the copy only follows it. :class:`OffsetMirror` decides what is sent and keeps
how far the copy trails; it makes no Kafka call (the fetcher thread sends, see
``jetkafka.channel._mirror_sender``), so it is tested without a broker.

What it guarantees:

- The copy follows the landed commits *in landing order*: an offer lower than the one before
  (a reset that moved the partition back) is sent as it is, never max()-ed away, so Kafka ends
  at exactly ZooKeeper's offset.
- At most one OffsetCommit per partition per ``interval_s`` while commits come faster: offers
  made meanwhile merge into the newest, sent when the interval is up (:meth:`due`). A partition
  offered for the first time, or after a quiet interval, goes at once. :meth:`flush` takes a
  partition's offer regardless of the interval: before the partition is unassigned, so its last
  commit is on its way before another instance may take it.
- One request in flight per partition (:meth:`due` waits for the answer of the one before):
  librdkafka sends a request again after a connection dropped, and at a broker restart an older
  copy was seen landing after a newer one, moving Kafka's copy back.
- A send that failed is sent again (its offset, unless a newer one is sent or waiting), no
  sooner than :data:`RETRY_S` later, for as long as the partition is held; a released
  partition's failed send is dropped, since a retry could land after the next owner's commit
  and move Kafka's copy back.

Figures (:meth:`snapshot`), per partition: ``trail_seconds``, the age of the oldest offer not
yet confirmed by the broker (0 when caught up), and ``behind_offsets``, the newest offer minus
the newest confirmed offset (0 when caught up; negative while a reset that moved the partition
back is not copied yet; None before the broker confirmed any). Counters: OffsetCommit requests
and partition offsets sent, failed requests by reason.

Threads: :meth:`offer` from any thread (the workers, a processor's thread, add-ons); the rest
from the fetcher thread, whose librdkafka commit callback reports results. One lock guards all.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from jetkafka.events import Key

# A failed send is tried again after at least this long (or the interval, if longer): a broker
# that refuses every commit is asked once a second per partition, not once per interval.
RETRY_S = 1.0
# How often an offer of a partition not held (waiting for its unassign) is looked at again.
NOT_HELD_RECHECK_S = 0.1


@dataclass
class _Sent:
    offset: int
    since: float  # when the oldest offer this send covers was made


@dataclass
class _PartitionMirror:
    newest: int | None = None  # the newest offer, in landing order
    pending: int | None = None  # an offer not sent yet (the newest, or a failed send to retry)
    pending_since: float = 0.0  # when the oldest offer the pending one covers was made
    last_sent: float = -math.inf
    retry_at: float = -math.inf  # no send before this (after a failure)
    in_flight: deque[_Sent] = field(default_factory=deque)
    confirmed: int | None = None  # the newest offset the broker confirmed, in sending order
    released: bool = False  # unassigned: dropped once nothing is in flight

    def due_at(self, interval_s: float) -> float:
        return max(self.last_sent + interval_s, self.retry_at)

    def oldest_unconfirmed(self) -> float | None:
        if self.in_flight:
            return self.in_flight[0].since
        return self.pending_since if self.pending is not None else None


@dataclass(frozen=True)
class MirroredPartition:
    """One partition's copy in Kafka as of a snapshot."""

    trail_seconds: float  # age of the oldest landed commit not confirmed in Kafka; 0 caught up
    behind_offsets: int | None  # newest landed minus newest confirmed; None: none confirmed yet
    newest: int | None  # the newest landed commit offered
    confirmed: int | None  # the newest offset Kafka confirmed


@dataclass(frozen=True)
class MirrorSnapshot:
    """The mirror's figures at one moment (a copy)."""

    partitions: dict[Key, MirroredPartition]
    commits_sent: int  # OffsetCommit requests
    partitions_sent: int  # partition offsets in them
    failures: dict[str, int]  # failed requests, by reason (a KafkaError name)


class OffsetMirror:
    """What to copy to Kafka's group offsets, when, and how far the copy trails (see the module)."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._partitions: dict[Key, _PartitionMirror] = {}
        self._earliest_due = math.inf  # no partition is due before this
        self._commits_sent = 0
        self._partitions_sent = 0
        self._failures: Counter[str] = Counter()
        # reason -> held partitions whose last answer was that failure: a reason is logged when
        # it first appears, and again only after it ended: each of its partitions succeeded
        # once (a reason left with none, e.g. all released, ends with any success).
        self._failing: dict[str, set[Key]] = {}
        self._failed_since_ok = 0

    @property
    def interval_s(self) -> float:
        return self._interval_s

    def set_interval(self, interval_s: float) -> None:
        """A new ``commit_interval_ms`` (hot deploy), from the next send on."""
        with self._lock:
            self._interval_s = interval_s
            self._earliest_due = -math.inf  # recomputed by the next due()

    # -- any thread ------------------------------------------------------------------------

    def offer(self, key: Key, offset: int) -> None:
        """A commit of ``offset`` landed in ZooKeeper (the newest of the partition)."""
        now = self._clock()
        with self._lock:
            part = self._partitions.get(key)
            if part is None:
                part = self._partitions[key] = _PartitionMirror()
            part.released = False
            if part.pending is None:
                part.pending_since = now
            part.pending = part.newest = offset
            self._earliest_due = min(self._earliest_due, part.due_at(self._interval_s))

    # -- the fetcher thread ----------------------------------------------------------------

    def due(self, now: float, holds: Callable[[Key], bool] | None = None) -> dict[Key, int]:
        """The offsets to send now, counted as sent at ``now``: each partition's pending offer
        whose last send is at least the interval ago (and whose retry time has come), of the
        partitions the instance ``holds`` (others wait: for their unassign, which sends or
        drops them)."""
        with self._lock:
            if now < self._earliest_due:
                return {}
            interval = self._interval_s
            out: dict[Key, int] = {}
            earliest = math.inf
            for key, part in self._partitions.items():
                if part.pending is None or part.released:
                    continue
                if holds is not None and not holds(key):
                    # Waits for its unassign (or a new lease, see adopt); looked at again later,
                    # never in a loop (an interval of 0).
                    earliest = min(earliest, now + max(interval, NOT_HELD_RECHECK_S))
                    continue
                if part.in_flight:
                    # One request in flight per partition: librdkafka may send a request again
                    # after a connection drops, and then land it after a newer one (seen at a
                    # broker restart). Its answer makes the partition due again.
                    continue
                at = part.due_at(interval)
                if at <= now:
                    out[key] = self._take(part, now)
                else:
                    earliest = min(earliest, at)
            self._earliest_due = earliest
            return out

    def flush(self, key: Key, now: float | None = None) -> int | None:
        """The partition's pending offset, if any, counted as sent now whatever the interval:
        before the partition is unassigned, or at the fetcher's stop."""
        with self._lock:
            part = self._partitions.get(key)
            if part is None or part.pending is None:
                return None
            return self._take(part, self._clock() if now is None else now)

    def flush_all(self, holds: Callable[[Key], bool], now: float | None = None) -> dict[Key, int]:
        """The pending offset of every partition the instance ``holds``, counted as sent now
        (the channel stops or resubscribes)."""
        with self._lock:
            when = self._clock() if now is None else now
            return {
                key: self._take(part, when)
                for key, part in self._partitions.items()
                if part.pending is not None and not part.released and not part.in_flight and holds(key)
            }

    def pending(self, holds: Callable[[Key], bool] | None = None) -> dict[Key, int]:
        """The offsets offered and not sent yet (of the partitions the instance ``holds``)."""
        with self._lock:
            return {
                key: p.pending
                for key, p in self._partitions.items()
                if p.pending is not None and (holds is None or holds(key))
            }

    def adopt(self, key: Key, committed: int | None) -> None:
        """A new lease of ``key`` starts here: an offer an earlier lease left unsent is
        replaced by ``committed`` (ZooKeeper's offset at the take-over; dropped if None)."""
        now = self._clock()
        with self._lock:
            part = self._partitions.get(key)
            if part is None and committed is None:
                return
            if part is None:
                part = self._partitions[key] = _PartitionMirror()
            part.released = False
            if committed is None:
                part.pending = None
            elif part.newest != committed or part.pending is not None:
                part.pending = part.newest = committed
                part.pending_since = now
                self._earliest_due = min(self._earliest_due, part.due_at(self._interval_s))

    def next_due(self) -> float | None:
        """When the next pending offer becomes due (it may be earlier than that, never later:
        a time already past when one is due), or None with nothing pending. Cheap: the fetcher
        asks every turn of its loop."""
        with self._lock:
            earliest = self._earliest_due
        return None if earliest == math.inf else earliest

    def requests_sent(self, partitions: int) -> None:
        """One OffsetCommit request carrying ``partitions`` offsets went out."""
        with self._lock:
            self._commits_sent += 1
            self._partitions_sent += partitions

    def confirmed(self, offsets: Mapping[Key, int]) -> int:
        """The broker took these offsets. When this ends a run of failures (every reason that
        failed has since succeeded: what the caller logs once), the failed requests of that
        run; else 0."""
        with self._lock:
            for key, offset in offsets.items():
                part = self._partitions.get(key)
                if part is None or self._answered(part, offset) is None:
                    continue  # forgotten since, or answered already
                part.confirmed = offset
                if part.pending is not None:  # waited for this answer (one request in flight)
                    self._earliest_due = min(self._earliest_due, part.due_at(self._interval_s))
                self._drop_if_done(key, part)
                for keys in self._failing.values():
                    keys.discard(key)
            if offsets:
                # A reason none of whose partitions still fails (or that had none held) is over.
                self._failing = {reason: keys for reason, keys in self._failing.items() if keys}
            ended = self._failed_since_ok if not self._failing else 0
            if ended:
                self._failed_since_ok = 0
            return ended

    def failed(self, offsets: Mapping[Key, int], reason: str, given_up: dict[Key, int] | None = None) -> bool:
        """The broker (or librdkafka) refused these offsets of one request for ``reason``;
        each is sent again later, unless a newer one is on its way or waiting, or the
        partition was released (added to ``given_up``: a retry could land after its next
        owner's copy). True when ``reason`` is new (not failing already): what the caller
        logs."""
        now = self._clock()
        with self._lock:
            self._failures[reason] += 1
            self._failed_since_ok += 1
            new = reason not in self._failing
            self._failing.setdefault(reason, set())
            for key, offset in offsets.items():
                part = self._partitions.get(key)
                since = None if part is None else self._answered(part, offset)
                if part is None or since is None:
                    continue  # forgotten since, or answered already
                if part.released:
                    if given_up is not None:
                        given_up[key] = offset
                    self._drop_if_done(key, part)
                    continue
                self._failing.setdefault(reason, set()).add(key)
                if part.in_flight:  # a newer send covers it: the trail counts from this one
                    part.in_flight[0].since = min(part.in_flight[0].since, since)
                elif part.pending is not None:
                    part.pending_since = min(part.pending_since, since)
                else:
                    part.pending, part.pending_since = offset, since
                part.retry_at = now + max(RETRY_S, self._interval_s)
                self._earliest_due = min(self._earliest_due, part.due_at(self._interval_s))
            return new

    def forget(self, key: Key) -> None:
        """The partition was unassigned here (and :meth:`flush`-ed just before): drop it once
        nothing of it is in flight, and retry none of its failed sends. An offer made since
        the flush (a new lease of the partition) keeps it: that offer is sent as usual."""
        with self._lock:
            part = self._partitions.get(key)
            if part is not None and part.pending is None:
                part.released = True
                self._drop_if_done(key, part)

    def drop(self, key: Key) -> None:
        """The partition was lost, or may be: its offset not sent yet is never sent (nor
        retried), and it is forgotten once nothing of it is in flight."""
        with self._lock:
            part = self._partitions.get(key)
            if part is not None:
                part.pending = None
                part.released = True
                self._drop_if_done(key, part)

    def forget_all(self, holds: Callable[[Key], bool]) -> None:
        """The fetcher stopped: what was not answered by then never will be. An offer not sent
        of a partition the instance still ``holds`` (a resubscribe hands it over later) waits
        for the next start's fetcher; the others are dropped. The counters stay."""
        with self._lock:
            kept = {}
            for key, part in self._partitions.items():
                part.in_flight.clear()
                if part.pending is not None and not part.released and holds(key):
                    part.retry_at = part.last_sent = -math.inf  # the next start sends it at once
                    kept[key] = part
            self._partitions = kept
            self._failing.clear()
            self._failed_since_ok = 0
            self._earliest_due = -math.inf if kept else math.inf

    def in_flight(self) -> dict[Key, int]:
        """The newest offset of each partition sent and not answered yet."""
        with self._lock:
            return {key: p.in_flight[-1].offset for key, p in self._partitions.items() if p.in_flight}

    # -- any thread ------------------------------------------------------------------------

    def snapshot(self, keys: Iterable[Key] | None = None) -> MirrorSnapshot:
        """The figures now, of ``keys`` (default: every partition known)."""
        now = self._clock()
        with self._lock:
            wanted = list(self._partitions) if keys is None else list(keys)
            partitions = {}
            for key in wanted:
                part = self._partitions.get(key)
                if part is None:
                    partitions[key] = MirroredPartition(0.0, None, None, None)
                    continue
                oldest = part.oldest_unconfirmed()
                trail = 0.0 if oldest is None else max(0.0, now - oldest)
                if part.confirmed is None:
                    behind = None
                else:
                    behind = 0 if oldest is None or part.newest is None else part.newest - part.confirmed
                partitions[key] = MirroredPartition(trail, behind, part.newest, part.confirmed)
            return MirrorSnapshot(partitions, self._commits_sent, self._partitions_sent, dict(self._failures))

    # -- under the lock --------------------------------------------------------------------

    @staticmethod
    def _take(part: _PartitionMirror, now: float) -> int:
        offset = part.pending
        assert offset is not None
        part.in_flight.append(_Sent(offset, part.pending_since))
        part.pending = None
        part.last_sent = now
        return offset

    @staticmethod
    def _answered(part: _PartitionMirror, offset: int) -> float | None:
        """Take the send of ``offset`` (the oldest such) off the in-flight list, with any older
        one left unanswered (librdkafka answers in order: none is expected); returns when the
        oldest offer they covered was made, or None if no send of ``offset`` is in flight."""
        if all(sent.offset != offset for sent in part.in_flight):
            return None
        since = math.inf
        while part.in_flight:
            sent = part.in_flight.popleft()
            since = min(since, sent.since)
            if sent.offset == offset:
                break
        return since

    def _drop_if_done(self, key: Key, part: _PartitionMirror) -> None:
        if part.released and not part.in_flight:
            del self._partitions[key]
            for keys in self._failing.values():
                keys.discard(key)  # its reason ends with the next success of any partition


__all__ = ["RETRY_S", "MirrorSnapshot", "MirroredPartition", "OffsetMirror"]
