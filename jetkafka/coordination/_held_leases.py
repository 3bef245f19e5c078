"""The leases one member holds, and where each stands between its take and its owner node's end.

A lease is *held* from its take until the channel is done with it (or the owner node turns out
not to be ours any more, or the session expires). On its way a lease may be:

* *adopting*: handed to the channel, not started by it yet;
* *releasing*: the channel was asked to give it up (a rebalance, a deleted topic, leaving);
* *unreleased*: no longer held, but its owner node was not deleted yet (the delete is tried
  again until it happens or the session ends, and nobody can take the partition meanwhile);
* *backed off*: given up before the channel started it, so not taken again for a while.

:class:`HeldLeases` is the only owner of these states: the membership changes them through its
methods, each of which takes the one lock, so a lease moves from one state to the next
atomically. Threads: the rebalance thread (rebalances, session events), the thread that ends
a hold (a worker, or the rebalance thread) and kazoo's callbacks through the membership. No
method calls out (no ZooKeeper, no channel) while holding the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping

from jetkafka.coordination._ownership import Lease
from jetkafka.events import Key

# Back-off before a member takes again a partition the channel could not start.
RETAKE_FIRST_S = 1.0
RETAKE_MAX_S = 30.0
# Back-offs ending this close together are over together: partitions given up together are
# taken again in one go.
RETAKE_SLACK_S = 0.1


class HeldLeases:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Key, Lease] = {}
        # Counts the sessions that expired: a take begun in an earlier one is not recorded.
        self._expiries = 0
        self._releasing: set[Key] = set()
        self._unreleased: dict[Key, Lease] = {}
        self._adopting: dict[Key, Lease] = {}
        # Partitions the channel could not start: (not taken again before, back-off).
        self._retake: dict[Key, tuple[float, float]] = {}

    # -- reading ----------------------------------------------------------------------------

    def get(self, key: Key) -> Lease | None:
        with self._lock:
            return self._held.get(key)

    def accounted(self, topic: str) -> set[int]:
        """Partitions of ``topic`` whose owner node this member knows of (held or unreleased)."""
        with self._lock:
            return {p for t, p in [*self._held, *self._unreleased] if t == topic}

    def next_retake(self, now: float) -> float | None:
        """When the earliest back-off still running ends (monotonic), or None."""
        with self._lock:
            ends = [end for end, _ in self._retake.values() if end > now]
        return min(ends) if ends else None

    # -- taking -----------------------------------------------------------------------------

    def wanted(self, topic: str, partitions: Iterable[int]) -> tuple[list[int], int]:
        """The partitions of a plan that are not backed off, and the session count to pass to
        :meth:`record_take` for each lease taken of them."""
        now = time.monotonic()
        with self._lock:
            wanted = [p for p in partitions if self._retake.get((topic, p), (0.0, 0.0))[0] <= now + RETAKE_SLACK_S]
            return wanted, self._expiries

    def record_take(self, lease: Lease, expiries: int) -> bool:
        """Hold ``lease``, unless the session expired since the take began: then its owner node
        is of a dead session (or, taken just after a new one began, is deleted like a release)
        and it is kept as unreleased. True when held."""
        with self._lock:
            if self._expiries != expiries:
                self._unreleased[lease.key] = lease
                return False
            self._held[lease.key] = lease
            return True

    def handing_over(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._adopting[lease.key] = lease

    def adopted(self, lease: Lease) -> bool:
        """The channel started ``lease``; False when it is no longer held (the session
        expired since its take: the channel must not work on it)."""
        with self._lock:
            if self._adopting.get(lease.key) is lease:
                del self._adopting[lease.key]
            self._retake.pop(lease.key, None)
            return self._held.get(lease.key) is lease

    def not_adopted(self, leases: Iterable[Lease]) -> list[Lease]:
        """Of ``leases`` just handed over, those the channel neither adopted nor gave up."""
        with self._lock:
            return [lease for lease in leases if self._adopting.get(lease.key) is lease]

    def forget_adopting(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                if self._adopting.get(lease.key) is lease:
                    del self._adopting[lease.key]

    # -- releasing --------------------------------------------------------------------------

    def start_releasing(self, keys: Iterable[Key]) -> list[Key]:
        """Mark the held ``keys`` not releasing yet as releasing; returns those."""
        with self._lock:
            marked = [k for k in keys if k in self._held and k not in self._releasing]
            self._releasing.update(marked)
            return marked

    def held_keys(self, topic: str | None = None) -> list[Key]:
        with self._lock:
            return [k for k in self._held if topic is None or k[0] == topic]

    def end(self, key: Key, lease: Lease | None) -> tuple[Lease, bool] | None:
        """End the hold of ``key`` (only if ``lease`` is the held one, when given): it becomes
        unreleased until :meth:`deleted`. Returns the lease and whether the channel never
        started it, or None when there was nothing (or a newer hold) to end."""
        with self._lock:
            held = self._held.get(key)
            if held is None or (lease is not None and held is not lease):
                return None
            del self._held[key]
            self._releasing.discard(key)
            never_started = self._adopting.pop(key, None) is held
            self._unreleased[key] = held
            return held, never_started

    def deleted(self, key: Key, lease: Lease) -> None:
        """The owner node of ``lease`` is gone."""
        with self._lock:
            if self._unreleased.get(key) is lease:
                del self._unreleased[key]

    def unreleased(self) -> list[tuple[Key, Lease]]:
        with self._lock:
            return list(self._unreleased.items())

    def any_unreleased(self) -> bool:
        with self._lock:
            return bool(self._unreleased)

    def back_off(self, key: Key) -> float:
        """Do not take ``key`` again for a while (doubling while it keeps failing); returns the wait."""
        with self._lock:
            _, last = self._retake.get(key, (0.0, 0.0))
            wait = min(max(RETAKE_FIRST_S, 2 * last), RETAKE_MAX_S)
            self._retake[key] = (time.monotonic() + wait, wait)
            return wait

    def drop_not_owned(self, topic: str, owners: Mapping[int, str], consumer_id: str) -> list[Key]:
        """Stop holding the leases of ``topic`` whose owner node no longer names us; returns them."""
        with self._lock:
            gone = [k for k in self._held if k[0] == topic and owners.get(k[1]) != consumer_id]
            for k in gone:
                del self._held[k]
                self._releasing.discard(k)
            return gone

    # -- the end of a session or of the member ----------------------------------------------

    def expire(self) -> list[Key]:
        """The session expired: every owner node went with it. Returns the keys that were held."""
        with self._lock:
            keys = list(self._held)
            self._expiries += 1
            self._held.clear()
            self._releasing.clear()
            self._unreleased.clear()
            self._adopting.clear()
            return keys

    def clear(self) -> list[Lease]:
        """Forget every lease (the member stops); returns those whose owner node may still exist."""
        with self._lock:
            leftover = [*self._held.values(), *self._unreleased.values()]
            self._held.clear()
            self._unreleased.clear()
            self._adopting.clear()
            return leftover
