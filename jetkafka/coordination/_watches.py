"""Watches that outlive connection losses, session expiries and failed reads.

kazoo drops every watch it knows of when the connection drops (it cannot tell whether the
session survives), and its own recipes re-read on reconnection in a thread of their own with
the client's command retry: when that read fails (the session expires at that moment, which
is what a ZooKeeper frozen past the session timeout does to every client at once), the thread
dies with a traceback and the watch is gone for good, silently. These two do not give up:

* :class:`ChildrenWatch` reports a node's children (``[]`` while the node does not exist);
* :class:`NodeWatch` reports a node's data and stat (``None, None`` while it does not exist).

Guarantee: from :meth:`~_Watch.start` until :meth:`~_Watch.stop`, every change ZooKeeper
notifies is followed by a call of ``on_change`` with the state read after it, and after every
new connection (same session or a new one) the state is read again and reported if it differs
from the last one reported. Changes made while disconnected are not replayed one by one: the
state they left is. Calls of ``on_change`` never overlap, and none starts after :meth:`stop`
returned.

Threads: ``on_change`` runs on kazoo's watch-callback thread (after a notification) or on a
short-lived timer thread of the watch (the first read when started off a kazoo thread, the
read after a new connection, a retry); kazoo's connection thread only schedules. So
``on_change`` must only hand work over (queue it, schedule a rebalance), never wait.

Failure modes: a read that fails for any reason (connection lost, session expired, no
permission, a bug) and an ``on_change`` that raises are logged as one WARNING line and tried
again after a back-off (0.5 s, doubling up to 10 s), and at once on the next connection; a
state not reported yet because of it is reported then. Nothing escapes into kazoo's threads.
A client that was closed ends the watch quietly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionClosedError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.5
RETRY_MAX_S = 10.0

S = TypeVar("S")
_NOTHING_YET: Any = object()


class _Watch(Generic[S]):
    """What both watches share: re-arming, retries, serialised delivery, stopping."""

    def __init__(self, client: KazooClient, path: str) -> None:
        self.path = path
        self._client = client
        self._reading = threading.Lock()  # one read (and delivery) at a time
        self._timer_lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._stopped = False
        self._started = False
        self._backoff = RETRY_FIRST_S
        self._last: Any = _NOTHING_YET  # the state last handed to on_change
        self._owed = False  # a notification came whose state was not handed over yet

    def start(self) -> Self:
        """Read and report the current state, and watch from now on; returns the watch."""
        if self._started:
            return self
        self._started = True
        self._client.add_listener(self._on_state)
        self._read()
        return self

    def stop(self) -> None:
        """Watch no more: no call of ``on_change`` starts once this returned. Safe to call from
        inside ``on_change``. A read in progress is not waited for (it may be stuck until
        ZooKeeper answers); what it reads is dropped."""
        self._stopped = True
        self._client.remove_listener(self._on_state)
        with self._timer_lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    @property
    def stopped(self) -> bool:
        return self._stopped

    # -- what each kind reads and reports ----------------------------------------------------

    def _fetch(self) -> S:
        raise NotImplementedError

    def _same(self, a: S, b: S) -> bool:
        return bool(a == b)

    def _deliver(self, state: S) -> None:
        raise NotImplementedError

    # -- kazoo's threads: schedule, never block ----------------------------------------------

    def _on_state(self, state: KazooState) -> None:
        # kazoo's connection thread. Every watch was dropped with the connection: read again.
        if state == KazooState.CONNECTED and not self._stopped:
            self._backoff = RETRY_FIRST_S
            self._schedule(0.0)

    def _on_event(self, event: WatchedEvent) -> None:
        # kazoo's watch-callback thread. NONE events only announce a connection state;
        # _on_state reads again once connected.
        if self._stopped or event.type == EventType.NONE:
            return
        self._owed = True
        self._read()

    # -- reading -----------------------------------------------------------------------------

    def _schedule(self, delay: float) -> None:
        with self._timer_lock:
            if self._stopped:
                return
            if self._timer is not None:
                self._timer.cancel()
            timer = threading.Timer(delay, self._read)
            timer.name = f"jetkafka-watch {self.path}"
            timer.daemon = True
            self._timer = timer
        timer.start()

    def _read(self) -> None:
        with self._reading:
            if self._stopped:
                return
            try:
                state = self._fetch()
                if self._stopped:
                    return
                if self._owed or self._last is _NOTHING_YET or not self._same(state, self._last):
                    self._deliver(state)
                    self._last = state
                self._owed = False
                self._backoff = RETRY_FIRST_S
            except ConnectionClosedError:
                return  # the client was closed: there is nothing left to watch
            except Exception as exc:  # noqa: BLE001 - never into kazoo's threads: log, retry
                if self._stopped:
                    return
                delay = self._backoff
                self._backoff = min(self._backoff * 2, RETRY_MAX_S)
                log.warning(
                    "watch on %s: %s: %s; reading it again in %.1f s",
                    self.path,
                    type(exc).__name__,
                    exc or "no details",
                    delay,
                )
                self._schedule(delay)


class ChildrenWatch(_Watch[list[str]]):
    """Calls ``on_change(children)`` (sorted names) with the children of ``path``, at start and
    after every change; ``[]`` while ``path`` does not exist (its creation is watched too)."""

    def __init__(self, client: KazooClient, path: str, on_change: Callable[[list[str]], None]) -> None:
        super().__init__(client, path)
        self._on_change = on_change

    def _fetch(self) -> list[str]:
        while True:
            try:
                return sorted(self._client.get_children(self.path, watch=self._on_event))
            except NoNodeError:
                if self._client.exists(self.path, watch=self._on_event) is None:
                    return []
                # Created between the two reads: list it.

    def _deliver(self, state: list[str]) -> None:
        self._on_change(state)


class NodeWatch(_Watch[tuple[bytes | None, ZnodeStat | None]]):
    """Calls ``on_change(data, stat)`` with the data of ``path``, at start and after every
    change, creation or deletion; ``(None, None)`` while it does not exist."""

    def __init__(
        self, client: KazooClient, path: str, on_change: Callable[[bytes | None, ZnodeStat | None], None]
    ) -> None:
        super().__init__(client, path)
        self._on_change = on_change

    def _fetch(self) -> tuple[bytes | None, ZnodeStat | None]:
        while True:
            try:
                data, stat = self._client.get(self.path, watch=self._on_event)
                return data, stat
            except NoNodeError:
                if self._client.exists(self.path, watch=self._on_event) is None:
                    return None, None
                # Created between the two reads: read it.

    def _same(self, a: tuple[bytes | None, ZnodeStat | None], b: tuple[bytes | None, ZnodeStat | None]) -> bool:
        # The node's identity and data version; its children's changes do not count.
        def key(s: tuple[bytes | None, ZnodeStat | None]) -> tuple[int, int] | None:
            return None if s[1] is None else (s[1].czxid, s[1].mzxid)

        return key(a) == key(b)

    def _deliver(self, state: tuple[bytes | None, ZnodeStat | None]) -> None:
        self._on_change(*state)
