"""A token bucket limiting recovery to ``recovery.max_rate`` events per second.

Tokens accrue at ``rate`` per second up to ``burst``. A batch is spent as a whole, so the
balance may go below zero (a batch larger than the burst is still delivered whole); the next
batch then waits until the balance is back at zero.

Guarantee: over any interval of ``T`` seconds, at most ``rate * T + burst + largest batch``
events are spent. Over long runs the rate is exactly ``rate`` as long as the caller is fast
enough to keep up; a slow caller is simply slower (unused tokens beyond ``burst`` are not saved
up, so a stall is never followed by a burst above ``burst``).

Failure modes: none; :meth:`wait` returns False early when its ``stop`` event is set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError(f"rate and burst must be > 0, got rate={rate} burst={burst}")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    @property
    def tokens(self) -> float:
        with self._lock:
            self._refill()
            return self._tokens

    def delay(self) -> float:
        """Seconds until the balance is back at zero (0 when a batch may start now)."""
        with self._lock:
            self._refill()
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def spend(self, events: int) -> None:
        """Take ``events`` tokens; the balance may go negative (see the module docstring)."""
        with self._lock:
            self._refill()
            self._tokens -= events

    def wait(self, stop: threading.Event | None = None, timeout: float | None = None) -> bool:
        """Block until a batch may start; False when ``stop`` was set or ``timeout`` ran out first."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            delay = self.delay()
            if delay <= 0:
                return True
            if deadline is not None:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return False
                delay = min(delay, remaining)
            if stop is None:
                time.sleep(delay)
            elif stop.wait(delay):
                return False
