"""The recovery worker: one thread per channel recovering the ranges of the partitions it owns.

Every second (and at once after a take-over recorded a gap) the worker matches the partitions
the channel owns against the recovery nodes (:mod:`jetkafka.recovery._ledger`) and gives each
such partition a cursor (:mod:`jetkafka.recovery._progress`). It reads their ranges, front range
first, through its own consumer (:mod:`jetkafka.recovery._reader`); partitions take turns, one
batch each, and a token bucket (:mod:`jetkafka.recovery._rate`) keeps the channel at
``recovery.max_rate`` events per second.

Guarantees:

* A partition is recovered only while the channel holds it (checked before every batch; every
  store is fenced by the partition's lease), and by this one thread, so recovery batches of a
  partition reach the recovery processor one at a time, in offset order.
* A release (rebalance, shutdown) waits in :meth:`RecoveryWorker.partition_removed` until the
  partition's batch in hand is processed and stored, before its owner node is deleted: a
  graceful move re-processes nothing, and the new owner continues from the stored ranges.
* Paused partitions (and a paused channel) are not recovered until resumed; nothing is
  recovered while the channel's workers may not start batches either (ZooKeeper suspended, or
  the local lease of :mod:`jetkafka.coordination._session_lease` ran out). Both are checked
  again after the wait for the rate's tokens, which lasts up to ``batch_max_events /
  max_rate`` seconds: a batch in hand when the pause comes still finishes, none starts after.

Failure modes: a round that fails on a ZooKeeper or Kafka call is logged and retried after a
second from the stored state; a worker that cannot finish a batch in hand within the release
timeout lets the release go on (the fence then refuses its late store, and the new owner
re-processes that batch).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from jetkafka._tracing._spans import partition_attributes, start_span
from jetkafka.coordination._ownership import Lease
from jetkafka.events import Key
from jetkafka.processors._base import BatchEventProcessor
from jetkafka.recovery import _ranges as rng
from jetkafka.recovery._ledger import RecoveryLedger, Snapshot
from jetkafka.recovery._progress import Cursor, RecoveryRunner
from jetkafka.recovery._rate import TokenBucket
from jetkafka.recovery._reader import RangeReader

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel

log = logging.getLogger("jetkafka.recovery")

REFRESH_S = 1.0  # how often owned partitions are matched against recovery nodes
LINGER_S = 0.3  # a partial batch waits this long for more records before it is delivered
STALL_S = 3.0  # no record for this long: look at the watermarks (retention, truncation)


class RecoveryWorker:
    def __init__(
        self,
        channel: RunningChannel,
        ledger: RecoveryLedger,
        processor: BatchEventProcessor,
        reader_factory: Callable[[], RangeReader],
    ) -> None:
        self.channel = channel
        self.config = channel.config.recovery
        self.ledger = ledger
        self.processor = processor
        self.runner = RecoveryRunner(channel, ledger, processor, lambda key: self._drop(key, None))
        # A burst of one batch: a thread that is a few scheduling delays late for its next batch
        # catches up instead of losing those tokens (a burst of 100 lost ~10% on a busy machine).
        burst = min(self.config.max_rate, max(100, self.config.batch_max_events))
        self.bucket = TokenBucket(self.config.max_rate, burst)
        self._reader_factory = reader_factory
        self._reader: RangeReader | None = None
        self._cursors: dict[Key, Cursor] = {}
        self._turns: list[Key] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._held: set[Key] = set()  # keys with a cursor, for other threads (under _cond)
        self._removed: dict[Key, Lease] = {}
        self._malformed: set[Key] = set()
        self._thread: threading.Thread | None = None

    # -- life cycle (channel threads) ------------------------------------------------------------

    def start(self) -> None:
        self._reader = self._reader_factory()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="jetkafka-recovery", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        stuck = False
        if self._thread is not None:
            self._thread.join(timeout)
            stuck = self._thread.is_alive()
            self._thread = None
        with self._cond:
            self._held.clear()
            self._cond.notify_all()
        if stuck:
            # Closing a consumer another thread is inside of can hang the process: leave it.
            log.error("recovery thread did not stop within %.0f s (a processor call in hand)", timeout)
        elif self._reader is not None:
            self._reader.close()
        self._reader = None

    def wake(self) -> None:
        self._wake.set()

    def partition_removed(self, lease: Lease, timeout: float) -> None:
        """Called before a partition's owner node goes: finish (and store) its batch in hand, drop it."""
        with self._cond:
            if lease.key not in self._held or self._thread is None:
                return
            self._removed[lease.key] = lease
            self._wake.set()
            deadline = time.monotonic() + timeout
            while lease.key in self._removed and self._thread is not None:
                woken = self._cond.wait(max(0.0, min(0.5, deadline - time.monotonic())))
                if not woken and time.monotonic() >= deadline:
                    log.error("%s[%d]: recovery batch still in hand after %.0f s", *lease.key, timeout)
                    return

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        next_refresh = 0.0
        while not self._stop.is_set():
            try:
                self._handle_removals()
                if self._wake.is_set() or time.monotonic() >= next_refresh:
                    self._wake.clear()
                    self._refresh()
                    next_refresh = time.monotonic() + REFRESH_S
                self._step()
            except Exception:
                # ZooKeeper or Kafka calls can fail; the next round starts from stored state.
                log.exception("recovery round failed; retrying in 1 s")
                self._stop.wait(1.0)
        for key in list(self._cursors):
            self._drop(key, None)

    def _step(self) -> None:
        assert self._reader is not None
        if not self.channel.may_act():
            # ZooKeeper out of reach, or the local lease ran out (a process frozen past its
            # session timeout): a recovery batch started now might be another owner's.
            self._stop.wait(0.1)
            return
        cursor = self._next_ready()
        if cursor is None:
            self._reader.poll(0.05)
            return
        if cursor.pending is not None:
            self.runner.store(cursor, *cursor.pending)
            return
        if cursor.current() is None:
            self.runner.all_read(cursor)
            return
        if cursor.redeliver is None:
            feed = self._reader.feed(cursor.key)
            if feed is None:
                return
            if feed.out_of_range:
                self._trim(cursor, reopen=True)
                return
            if not feed.messages:
                if feed.at_end:
                    self.runner.skip_tail(cursor)
                else:
                    feed.last_data = time.monotonic()  # look again after another STALL_S
                    self._trim(cursor)
                return
        if not self.bucket.wait(self._wake):
            return  # woken: removals or a refresh first
        if not self.channel.may_act() or self.channel.is_paused(cursor.key):
            # Paused, or ZooKeeper out of reach, while the rate held this batch back (up to a
            # batch's worth of seconds): it waits for the next round, untaken.
            return
        batch = cursor.redeliver or self._reader.take(cursor.key, self.config.batch_max_events)
        if not batch:
            return
        if cursor.redeliver is None:
            self.bucket.spend(len(batch))
        cursor.redeliver = None
        if self._still_ours(cursor):
            self.runner.deliver(cursor, batch)

    def _next_ready(self) -> Cursor | None:
        assert self._reader is not None
        now = time.monotonic()
        paused_all = self.channel.paused
        for _ in range(len(self._turns)):
            key = self._turns.pop(0)
            self._turns.append(key)
            cursor = self._cursors[key]
            if cursor.not_before > now or paused_all or self.channel.is_paused(key):
                continue
            if cursor.pending is not None or cursor.redeliver is not None:
                return cursor
            if cursor.current() is None:
                if cursor.done_from < cursor.position and not cursor.idle_called:
                    return cursor
                continue
            self._sync_feed(cursor)
            feed = self._reader.feed(key)
            if self._reader.ready(key, self.config.batch_max_events, LINGER_S):
                return cursor
            if feed is not None and not feed.messages and now - feed.last_data >= STALL_S:
                return cursor
        return None

    # -- partitions coming and going ------------------------------------------------------------

    def _refresh(self) -> None:
        """Match owned partitions against recovery nodes; pick up new ones, notice cancels."""
        for key, held in list(self._cursors.items()):
            if self.channel.lease(*key) is not held.lease:
                self._drop(key, None)  # lost or taken again: a new cursor follows if still ours
        owned = set(self.channel.owned_partitions())
        topics = {t for t, _ in owned}
        with_nodes = {(t, p) for t in topics for p in self.ledger.partitions(t)}
        for key in sorted(owned & with_nodes):
            lease = self.channel.lease(*key)
            cursor = self._cursors.get(key)
            if lease is None:
                continue
            try:
                snap = self.ledger.read(*key)
            except ValueError as exc:
                if key not in self._malformed:  # once: it stays broken until someone fixes it
                    log.error("%s[%d]: %s; not recovered until it is fixed or cancelled", *key, exc)
                    self._malformed.add(key)
                continue
            self._malformed.discard(key)
            if cursor is None:
                if snap.record.ranges:
                    self._add(key, lease, snap)
            elif cursor.pending is None and snap.version != cursor.snap.version:
                self._adopt(cursor, snap)
        for key in [k for k in self._cursors if k not in with_nodes]:
            cursor = self._cursors[key]
            if cursor.pending is None and cursor.snap.version is not None:
                log.warning("%s[%d]: recovery node removed (cancelled); recovery of it stops", *key)
                self._drop(key, None)

    def _add(self, key: Key, lease: Lease, snap: Snapshot) -> None:
        first = snap.record.ranges[0][0]
        cursor = Cursor(key, lease, snap, first, first)
        attributes = partition_attributes(key[0], key[1], self.channel.config.channel.group)
        attributes["jetkafka.recovery.ranges"] = rng.describe(snap.record.ranges)
        attributes["jetkafka.recovery.events"] = snap.record.remaining
        cursor.span = start_span(f"recover {key[0]}", attributes)
        self._cursors[key] = cursor
        self._turns.append(key)
        with self._cond:
            self._held.add(key)
        log.info(
            "%s[%d]: recovering %d events in %s (at most %d events/s per instance)",
            key[0],
            key[1],
            snap.record.remaining,
            rng.describe(snap.record.ranges),
            self.config.max_rate,
        )
        self.runner.gauge(cursor)
        self._trim(cursor)

    def _adopt(self, cursor: Cursor, snap: Snapshot) -> None:
        """The node changed under us (an operator's cancel): continue from what it says now."""
        removed = cursor.snap.record.remaining - snap.record.remaining
        log.warning(
            "%s[%d]: recovery ranges changed outside this instance (%d events fewer); now %s",
            *cursor.key,
            removed,
            rng.describe(snap.record.ranges),
        )
        cursor.snap = snap
        cursor.redeliver = None
        self.runner.after_store(cursor)

    def _drop(self, key: Key, lease: Lease | None) -> None:
        cursor = self._cursors.pop(key, None)
        if cursor is not None:
            self._turns.remove(key)
            if lease is not None and cursor.done_from < cursor.position:
                self.runner.terminate(cursor)
            cursor.span.set_attribute("jetkafka.recovery.remaining", cursor.snap.record.remaining)
            cursor.span.end()
        if self._reader is not None:
            self._reader.close_feed(key)
        self.channel.stats.recovery_remaining(key, None)
        with self._cond:
            self._held.discard(key)

    def _handle_removals(self) -> None:
        with self._cond:
            removed = dict(self._removed)
        for key, lease in removed.items():
            cursor = self._cursors.get(key)
            if cursor is not None and cursor.lease is lease:
                self._drop(key, lease)
        with self._cond:
            for key in removed:
                self._removed.pop(key, None)
            self._cond.notify_all()

    def _still_ours(self, cursor: Cursor) -> bool:
        # A release adds the key to _removed before it waits; once there, no new batch starts.
        with self._cond:
            if cursor.key in self._removed:
                return False
        if self.channel.lease(*cursor.key) is not cursor.lease:
            self._drop(cursor.key, None)
            return False
        return True

    def _trim(self, cursor: Cursor, reopen: bool = False) -> None:
        assert self._reader is not None
        if reopen:  # the feed stopped at the broker's error: read again from where we are
            self._reader.close_feed(cursor.key)
        self.runner.trim(cursor, self._reader.watermarks(cursor.key))

    # -- reading ---------------------------------------------------------------------------------

    def _sync_feed(self, cursor: Cursor) -> None:
        """Make the feed read the current range from ``position``."""
        assert self._reader is not None
        current = cursor.current()
        if current is None:
            self._reader.close_feed(cursor.key)
            return
        start, end = current
        if cursor.position < start:
            if cursor.done_from == cursor.position:
                cursor.done_from = start
            cursor.position = start
        feed = self._reader.feed(cursor.key)
        if feed is None or feed.next != cursor.position or feed.end != end:
            self._reader.open(cursor.key, cursor.position, end)

