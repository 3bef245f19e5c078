"""Counters a channel keeps about its own work, readable at any time by any thread.

Per-partition figures (events, batches by response, errors by kind, batch durations) describe
the partition while this channel has its lease: :meth:`ChannelStats.forget` drops them when the
partition is released or lost, so a channel that saw thousands of partitions come and go keeps
only those it has a lease on. Channel-wide totals (:meth:`ChannelStats.summary`) include forgotten
partitions. Everything is guarded by one lock; updates are a few dictionary operations.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from dataclasses import dataclass, field

from jetkafka.errors import CommitFenced
from jetkafka.events import Key

REFUSAL_CAUSES = (*CommitFenced.CAUSES, "dropped")
LOSS_REASONS = ("retention", "skipped", "truncated")

# Upper bounds (seconds) of the batch-duration histogram buckets; +Inf is implied.
BATCH_SECONDS_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


@dataclass
class DurationHistogram:
    """Counts per bucket of :data:`BATCH_SECONDS_BUCKETS` (the last one is +Inf), and the sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BATCH_SECONDS_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BATCH_SECONDS_BUCKETS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= bound)`` per bucket, ending with ``(inf, count)``."""
        out, running = [], 0
        for bound, n in zip((*BATCH_SECONDS_BUCKETS, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def copy(self) -> DurationHistogram:
        return DurationHistogram(list(self.counts), self.total)


@dataclass(frozen=True)
class PartitionFigures:
    """One partition's figures at one moment (a copy; safe to read without the lock)."""

    events: int
    batches: dict[str, int]
    errors: dict[str, int]
    batch_seconds: DurationHistogram
    recovered: int = 0  # events recovered and stored as done (jetkafka.recovery)
    recovery_lost: dict[str, int] = field(default_factory=dict)  # by reason: retention, max_records
    recovery_remaining: int | None = None  # events still to recover; None: no recovery node
    given_back: int = 0  # buffered events dropped to give other partitions room (fetched again)


@dataclass
class ChannelStats:
    events: Counter[Key] = field(default_factory=Counter)
    batches: Counter[tuple[Key, str]] = field(default_factory=Counter)
    errors: Counter[tuple[Key, str]] = field(default_factory=Counter)
    committed_offsets: dict[Key, int] = field(default_factory=dict)
    batch_histograms: dict[Key, DurationHistogram] = field(default_factory=dict)
    rebalances: Counter[str] = field(default_factory=Counter)
    recovered_events: Counter[Key] = field(default_factory=Counter)
    recovery_lost_events: Counter[tuple[Key, str]] = field(default_factory=Counter)
    recovery_left: dict[Key, int] = field(default_factory=dict)
    given_back: Counter[Key] = field(default_factory=Counter)
    # Channel-wide, kept when the partition goes: every cause and reason present from the start.
    refusals: Counter[str] = field(default_factory=lambda: Counter({c: 0 for c in REFUSAL_CAUSES}))
    lost_events: Counter[str] = field(default_factory=lambda: Counter({r: 0 for r in LOSS_REASONS}))
    commits: int = 0
    commits_refused: int = 0
    batch_seconds: float = 0.0
    events_total: int = 0
    batches_total: int = 0
    errors_total: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def batch_done(self, key: Key, events: int, seconds: float, response: str) -> None:
        """A batch of ``events`` took ``seconds`` and was answered ``response`` (the value of its
        :class:`~jetkafka.processors._base.ResponseKind`: advance, revert, get_next)."""
        with self._lock:
            self.events[key] += events
            self.batches[(key, response)] += 1
            self.batch_seconds += seconds
            self.events_total += events
            self.batches_total += 1
            histogram = self.batch_histograms.get(key)
            if histogram is None:
                histogram = self.batch_histograms[key] = DurationHistogram()
            histogram.observe(seconds)

    def batch_failed(self, key: Key) -> None:
        self.error(key, "processor_raised")

    def error(self, key: Key, kind: str) -> None:
        with self._lock:
            self.errors[(key, kind)] += 1
            self.errors_total += 1

    def committed(self, key: Key, offset: int) -> None:
        with self._lock:
            self.commits += 1
            self.committed_offsets[key] = offset

    def commit_refused(self, key: Key, cause: str) -> None:
        """A commit of the partition did not happen because this instance no longer had its lease:
        ``cause`` is a :attr:`CommitFenced.cause <jetkafka.errors.CommitFenced.CAUSES>`, or
        ``dropped`` (an advance still waiting for its commit when the partition was lost)."""
        with self._lock:
            self.commits_refused += 1
            self.refusals[cause] += 1
        self.error(key, "commit_refused")

    def events_lost(self, key: Key, reason: str, events: int) -> None:
        """``events`` of the partition will not be processed by this group: ``retention``
        (deleted before they were read), ``skipped`` (jumped over by on_out_of_range: latest) or
        ``truncated`` (already processed, then gone from the log)."""
        if events > 0:
            with self._lock:
                self.lost_events[reason] += events

    def rebalanced(self, reason: str) -> None:
        """Count one rebalance run; ``reason`` is one of a small fixed set (a metric label)."""
        with self._lock:
            self.rebalances[reason] += 1

    def gave_back(self, key: Key, events: int) -> None:
        """``events`` buffered for the partition were dropped to give other partitions room;
        they are fetched again (:mod:`jetkafka.channel._shares`)."""
        with self._lock:
            self.given_back[key] += events

    def recovered(self, key: Key, events: int) -> None:
        """Recovery stored ``events`` more events of the partition as done."""
        with self._lock:
            self.recovered_events[key] += events

    def recovery_lost(self, key: Key, reason: str, events: int) -> None:
        """``events`` of the partition will never be recovered; ``reason``: retention or max_records."""
        with self._lock:
            self.recovery_lost_events[(key, reason)] += events

    def recovery_remaining(self, key: Key, events: int | None) -> None:
        """Events of the partition still to recover; None when this channel stopped recovering it."""
        with self._lock:
            if events is None:
                self.recovery_left.pop(key, None)
            else:
                self.recovery_left[key] = events

    def rebalance_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.rebalances)

    def refusal_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.refusals)

    def loss_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.lost_events)

    def forget(self, key: Key) -> None:
        """Drop the per-partition figures of a partition this channel no longer has a lease on."""
        with self._lock:
            self.events.pop(key, None)
            self.committed_offsets.pop(key, None)
            self.batch_histograms.pop(key, None)
            self.recovered_events.pop(key, None)
            self.recovery_left.pop(key, None)
            self.given_back.pop(key, None)
            for counter in (self.batches, self.errors, self.recovery_lost_events):
                for k in [k for k in counter if k[0] == key]:
                    del counter[k]

    def partition(self, key: Key) -> PartitionFigures:
        with self._lock:
            histogram = self.batch_histograms.get(key)
            return PartitionFigures(
                events=self.events.get(key, 0),
                batches={kind: n for (k, kind), n in self.batches.items() if k == key},
                errors={kind: n for (k, kind), n in self.errors.items() if k == key},
                batch_seconds=histogram.copy() if histogram is not None else DurationHistogram(),
                recovered=self.recovered_events.get(key, 0),
                recovery_lost={reason: n for (k, reason), n in self.recovery_lost_events.items() if k == key},
                recovery_remaining=self.recovery_left.get(key),
                given_back=self.given_back.get(key, 0),
            )

    def partitions(self) -> dict[Key, PartitionFigures]:
        """A copy of the figures of every partition that has any."""
        with self._lock:
            keys = set(self.events) | set(self.batch_histograms) | {k for k, _ in self.batches}
            keys |= {k for k, _ in self.errors}
            keys |= set(self.recovered_events) | set(self.recovery_left) | {k for k, _ in self.recovery_lost_events}
            keys |= set(self.given_back)
        return {key: self.partition(key) for key in keys}

    def summary_line(self) -> str:
        """The channel-wide totals as a sentence, for the log of a stopped channel."""
        s = self.summary()
        return (
            f"{s['events']:,} events in {s['batches']:,} batches, {s['commits']:,} commits "
            f"({s['commits_refused']:,} refused), {s['errors']:,} processor errors, "
            f"{s['rebalances']:,} rebalances, {s['batch_seconds']:,.1f} s in the processor"
        )

    def summary(self) -> dict[str, int | float]:
        with self._lock:
            return {
                "events": self.events_total,
                "batches": self.batches_total,
                "commits": self.commits,
                "commits_refused": self.commits_refused,
                "errors": self.errors_total,
                "rebalances": sum(self.rebalances.values()),
                "batch_seconds": round(self.batch_seconds, 3),
            }
