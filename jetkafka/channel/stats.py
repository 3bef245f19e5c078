"""Counters a channel keeps about its own work, readable at any time by any thread."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from jetkafka.processors.base import ResponseKind

Key = tuple[str, int]


@dataclass
class ChannelStats:
    events: Counter[Key] = field(default_factory=Counter)
    batches: Counter[tuple[Key, str]] = field(default_factory=Counter)
    errors: Counter[tuple[Key, str]] = field(default_factory=Counter)
    committed_offsets: dict[Key, int] = field(default_factory=dict)
    commits: int = 0
    commits_refused: int = 0
    batch_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def batch_done(self, key: Key, events: int, seconds: float, kind: ResponseKind) -> None:
        with self._lock:
            self.events[key] += events
            self.batches[(key, kind.value)] += 1
            self.batch_seconds += seconds

    def batch_failed(self, key: Key) -> None:
        self.error(key, "processor_raised")

    def error(self, key: Key, kind: str) -> None:
        with self._lock:
            self.errors[(key, kind)] += 1

    def committed(self, key: Key, offset: int) -> None:
        with self._lock:
            self.commits += 1
            self.committed_offsets[key] = offset

    def commit_refused(self, key: Key) -> None:
        with self._lock:
            self.commits_refused += 1
        self.error(key, "commit_refused")

    def summary(self) -> dict[str, int | float]:
        with self._lock:
            return {
                "events": sum(self.events.values()),
                "batches": sum(self.batches.values()),
                "commits": self.commits,
                "commits_refused": self.commits_refused,
                "errors": sum(self.errors.values()),
                "batch_seconds": round(self.batch_seconds, 3),
            }
