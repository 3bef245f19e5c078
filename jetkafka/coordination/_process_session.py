"""ProcessSession: the ZooKeeper session and the rebalance thread a process's channels share.

One per process (per ZooKeeper address and identity, see :meth:`ProcessSession.shared`); it
owns the kazoo client, the session's local lease and a single rebalance thread,
``jetkafka-rebalance``. Members (one :class:`~jetkafka.coordination._membership.GroupMembership`
per channel) ask it for rebalances; it runs them on its thread, on a timer and at once (after a
short debounce) when a ZooKeeper watch fires, so a partition freed by a graceful leave is taken
within about ``rebalance_delay_ms`` plus one ZooKeeper round trip, not after a rebalance
interval.

Session states: kazoo reports SUSPENDED when the connection drops (the session may still be
alive) and LOST when the session expired. Members are told of both at once, on kazoo's
connection thread (they only set flags there); on LOST every lease is void (the ephemeral
nodes are gone), and once a new session is connected members register again, on the
rebalance thread, and compete for partitions like a new consumer. Independently of what kazoo
reports, :class:`~jetkafka.coordination._session_lease.SessionLease` tells from the process's
own clock when the session may have expired unnoticed (a frozen process).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import ClassVar, Protocol

from kazoo.client import KazooClient, KazooState

from jetkafka.config import ZooKeeperConfig
from jetkafka.coordination._session import build_client, start_client
from jetkafka.coordination._session_lease import SessionLease

log = logging.getLogger(__name__)


class Member(Protocol):
    """What the process session drives: a channel's membership in its group."""

    name: str

    def rebalance(self, reason: str) -> None: ...

    # The next three run on kazoo's connection thread as the state changes: they set flags and
    # queue work, never call ZooKeeper or wait.

    def connection_suspended(self) -> None: ...

    def connection_restored(self) -> None: ...

    def session_lost(self) -> None: ...

    # On the rebalance thread, after connection_restored, when the session is a new one.
    def session_renewed(self) -> None: ...


class ProcessSession:
    """The ZooKeeper session and rebalance thread shared by a process's channels.

    Threads: :meth:`call` and :meth:`request_rebalance` may be called from any thread; what they
    queue runs on the rebalance thread, one task at a time. Session-state changes reach the
    members on kazoo's connection thread.
    """

    # One registry for the whole process, not one per instance.
    _shared: ClassVar[dict[tuple[str, str | None], ProcessSession]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, config: ZooKeeperConfig) -> None:
        self.config = config
        self.client: KazooClient = build_client(config)
        # Before the first connect: the lease reads the timeout the server negotiates there.
        self.lease = SessionLease(self.client, config.session_timeout_s, config.lease_margin)
        self._tasks: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._due: dict[Member, tuple[float, str]] = {}
        self._members: list[Member] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._refs = 0
        self._session_lost = False
        self.rebalances = 0

    # -- sharing ---------------------------------------------------------------------------

    @classmethod
    def shared(cls, config: ZooKeeperConfig) -> ProcessSession:
        """The process's session for this ZooKeeper address and identity, started."""
        key = (config.connect, config.auth.credential if config.auth else None)
        with cls._shared_lock:
            session = cls._shared.get(key)
            if session is None or not session.running:
                session = cls(config)
                session.start()
                cls._shared[key] = session
            session._refs += 1
            return session

    def release(self) -> None:
        """Drop one reference taken by :meth:`shared`; the last one stops the session."""
        with self._shared_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            for key, session in list(self._shared.items()):
                if session is self:
                    del self._shared[key]
        self.stop()

    # -- life cycle ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def connected(self) -> bool:
        # kazoo is untyped: its states are plain strings.
        return bool(self.client.state == KazooState.CONNECTED)

    def start(self) -> None:
        start_client(self.client, self.config)
        self.lease.start()
        self.client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name="jetkafka-rebalance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._tasks.put(None)
            self._thread.join(timeout=10)
            self._thread = None
        self.client.remove_listener(self._on_state)
        self.lease.stop()
        self.client.stop()
        self.client.close()
        log.info("ZooKeeper session closed")

    def attach(self, member: Member) -> None:
        with self._lock:
            self._members.append(member)

    def detach(self, member: Member) -> None:
        with self._lock:
            if member in self._members:
                self._members.remove(member)
            self._due.pop(member, None)

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the rebalance thread (ZooKeeper work must not run on kazoo's thread)."""
        self._tasks.put(fn)

    def request_rebalance(self, member: Member, reason: str, delay_s: float = 0.0) -> None:
        due = time.monotonic() + delay_s
        with self._lock:
            current = self._due.get(member)
            # Keep the earliest due time: a burst of watch events yields one rebalance.
            if current is None or due < current[0]:
                self._due[member] = (due, reason)
        self._tasks.put(lambda: None)  # wake the thread to recompute its timeout

    # -- the rebalance thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                next_due = min((d for d, _ in self._due.values()), default=None)
            timeout = None if next_due is None else max(0.0, next_due - time.monotonic())
            try:
                task = self._tasks.get(timeout=timeout)
            except queue.Empty:
                task = None
            else:
                if task is None:
                    return
                self._safely(task, "task")
            self._run_due()

    def _run_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            ready = [(m, r) for m, (d, r) in self._due.items() if d <= now]
            for m, _ in ready:
                del self._due[m]
        for member, reason in ready:
            self.rebalances += 1
            self._safely(partial(member.rebalance, reason), f"rebalance of {member.name}")

    def _safely(self, fn: Callable[[], None], what: str) -> None:
        try:
            fn()
        except Exception:
            # A failed rebalance is retried by the next watch event or timer tick.
            log.exception("%s failed; retrying at the next trigger", what)

    def _on_state(self, state: KazooState) -> None:
        # On kazoo's connection thread, in the order kazoo saw the changes: members only set
        # flags here (see Member), at once, so a rebalance stuck in a ZooKeeper call on the
        # rebalance thread cannot hold them up; what talks to ZooKeeper goes to that thread.
        if state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended; commits and new batches wait for it")
            self._tell("connection_suspended")
        elif state == KazooState.LOST:
            log.error("ZooKeeper session expired: every owned partition is lost")
            self.lease.void()
            self._session_lost = True
            self._tell("session_lost")
        elif state == KazooState.CONNECTED:
            self._tell("connection_restored")
            if self._session_lost:
                self._session_lost = False
                log.warning("new ZooKeeper session established; registering again")
                self._broadcast("session_renewed")
            else:
                log.info("ZooKeeper connection restored within the session")

    def _tell(self, method: str) -> None:
        with self._lock:
            members = list(self._members)
        for m in members:
            self._safely(getattr(m, method), f"{method} of {m.name}")

    def _broadcast(self, method: str) -> None:
        def run() -> None:
            with self._lock:
                members = list(self._members)
            for m in members:
                self._safely(getattr(m, method), f"{method} of {m.name}")

        self._tasks.put(run)
