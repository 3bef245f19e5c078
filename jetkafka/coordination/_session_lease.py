"""The local lease: how long this process may still act for its ZooKeeper session, by its own clock.

ZooKeeper expires a session ``session timeout`` after the last request it received from the
client. A process that was frozen (SIGSTOP, a long GC pause, a suspended VM) or cut off learns
that its session expired only after it reconnects; until kazoo says so, its workers would start
new batches on partitions another instance already owns. The local lease closes that window:

* A heartbeat thread sends a cheap read (``exists``) every few seconds. When an answer comes,
  the server had received the request, so the session cannot expire before *send time* +
  session timeout. The lease then runs until that instant less ``lease_margin_s``.
* :meth:`SessionLease.valid` compares it with ``time.monotonic()``, which keeps counting while a
  process is stopped: a process woken after the session timeout finds its lease run out at
  once, before any other of its threads runs a line of processor code.

Guarantee: an instance starts no batch (and the Spark processor runs no micro-batch function)
after ``session timeout - lease_margin_s`` has passed since the sending of its last answered
request, whatever its connection state says. A batch started just before that may still run
past it: those are the "batches in hand" docs/guarantees.md counts as possible duplicates.

The timeout used is the one the server negotiated (ZooKeeper clamps the requested value to its
``minSessionTimeout``..``maxSessionTimeout``), read from the connection's handshake.

Failure modes: a heartbeat that gets no answer leaves the lease to run out; while ZooKeeper is
unreachable for longer than the timeout less the margin, the instance holds still (it would
lose its partitions anyway). Requests queued by kazoo while disconnected are sent late, so
their answers renew the lease from an earlier time than they could: the lease errs short.

Each read also tells whether the server still answers: :mod:`._hung_server` leaves a server
that stopped answering for another of the ensemble before the session expires.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient

from jetkafka.coordination._hung_server import Heartbeat, HungServerWatch

log = logging.getLogger(__name__)


class SessionLease:
    """Heartbeats on ``client`` and the lease they keep; one per ZooKeeper session holder."""

    def __init__(self, client: KazooClient, timeout_s: float, margin_s: float) -> None:
        self._client = client
        self._requested_s = timeout_s
        self._timeout_s = timeout_s
        self._margin_s = margin_s
        self._until = 0.0  # monotonic time the lease runs out
        self._contact = time.monotonic()  # send time of the last answered request
        self._voided = False
        self._generation = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hung_server = HungServerWatch(client)
        self._watch_handshakes()

    @property
    def timeout_s(self) -> float:
        """The session timeout in force: the negotiated one once connected."""
        return self._timeout_s

    @property
    def margin_s(self) -> float:
        return self._margin_s

    def valid(self) -> bool:
        return time.monotonic() < self._until

    def remaining(self) -> float:
        """Seconds left (negative once run out)."""
        return self._until - time.monotonic()

    def since_contact(self) -> float:
        """Seconds since the sending of the last request ZooKeeper answered."""
        return time.monotonic() - self._contact

    @property
    def hung_connections(self) -> int:
        """Connections closed because their server stopped answering (:mod:`._hung_server`)."""
        return self._hung_server.closed

    @property
    def voided(self) -> bool:
        """True between a lost session and the first answer on the next one."""
        return self._voided

    def renewed(self, sent_at: float, generation: int | None = None) -> None:
        """An answer came to a request sent at ``sent_at`` (monotonic); with ``generation``,
        only if the lease was not voided since it was sent."""
        # A margin configured for a longer timeout than the server granted must not eat it all.
        until = sent_at + self._timeout_s - min(self._margin_s, self._timeout_s / 2)
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            self._voided = False
            if sent_at > self._contact:
                self._contact = sent_at
            if until > self._until:
                self._until = until

    def void(self) -> None:
        """The session is gone (expired or closed): nothing may be done for it any more."""
        with self._lock:
            self._until = 0.0
            self._voided = True
            self._generation += 1

    # -- heartbeats --------------------------------------------------------------------------

    def start(self) -> None:
        # A fresh event: a thread of an earlier start() still winding down keeps its own, set.
        self._stop = threading.Event()
        self.renewed(time.monotonic())  # the connect handshake just answered
        self._thread = threading.Thread(target=self._beat, args=(self._stop,), name="jetkafka-session-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.void()

    def interval_s(self) -> float:
        # Often enough that the lease normally has most of the timeout left, rarely enough to
        # cost the ensemble nothing: a sixth of the timeout, between 0.2 and 5 seconds.
        return min(5.0, max(0.2, self._timeout_s / 6))

    def stall_s(self) -> float:
        """How long a heartbeat may go unanswered before its server is taken for hung: a third
        of the timeout, what kazoo allows its own ping."""
        return self._timeout_s / 3

    def _beat(self, stop: threading.Event) -> None:
        unanswered: list[Heartbeat] = []
        next_beat = wake = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            late = now - wake
            if late > 0.25:
                # This thread woke late: the process was frozen or starved. Answers may sit unread
                # in the socket; what it overslept does not count as the server's silence.
                for beat in unanswered:
                    beat.waited_since += late
            if now >= next_beat:
                sent = self._send()
                if sent is not None:
                    unanswered.append(sent)
                next_beat = time.monotonic() + self.interval_s()
            unanswered = self._settle(unanswered)
            self._hung_server.check(unanswered, self.stall_s(), self._timeout_s)
            wake = min([next_beat, *(b.waited_since + self.stall_s() for b in unanswered if not b.abandoned)])
            if unanswered:
                # An answer normally comes within milliseconds: wait for the newest, to renew at once.
                try:
                    unanswered[-1].request.get(timeout=max(0.0, wake - time.monotonic()))
                except Exception:  # noqa: BLE001 - no answer yet, or a failure: _settle reads which
                    pass
                if unanswered[-1].request.ready():
                    wake = time.monotonic()  # woken by the answer, not late
            else:
                stop.wait(max(0.0, wake - time.monotonic()))

    def _send(self) -> Heartbeat | None:
        with self._lock:
            generation = self._generation
        connection = getattr(getattr(self._client, "_connection", None), "_socket", None)
        sent = time.monotonic()
        try:
            request = self._client.exists_async("/")
        except Exception as exc:  # noqa: BLE001 - kazoo fails requests through the result; the thread must live on
            log.warning("ZooKeeper heartbeat not sent (%s: %s)", type(exc).__name__, exc)
            return None
        return Heartbeat(sent, request, connection, generation, waited_since=sent)

    def _settle(self, beats: list[Heartbeat]) -> list[Heartbeat]:
        """Renew from the answered heartbeats; the ones still waiting for an answer."""
        waiting = []
        now = time.monotonic()
        for beat in beats:
            if beat.request.ready():
                if beat.request.successful():
                    self.renewed(beat.sent, beat.generation)
            elif now - beat.sent < self._timeout_s:
                waiting.append(beat)
            # Older than the timeout: its answer could renew nothing, and kazoo may never
            # settle a request it lost in a reconnect.
        return waiting

    def _watch_handshakes(self) -> None:
        """Learn the negotiated timeout at each connect.

        kazoo keeps it in a local variable of its connection handler only; wrapping the
        handshake is the one way to read it. Should a kazoo version lack that method, the
        requested timeout stays in use, which is right unless the server lowers it.
        """
        connection: Any = getattr(self._client, "_connection", None)
        handshake = getattr(connection, "_connect", None)
        if handshake is None:
            log.warning("cannot read the negotiated ZooKeeper session timeout; using the requested %.1f s", self._requested_s)
            return

        def connect(*args: Any, **kwargs: Any) -> Any:
            result = handshake(*args, **kwargs)
            self._hung_server.connected()
            try:
                read_timeout_ms = float(result[0])
            except (TypeError, ValueError, IndexError):
                return result
            # kazoo's read timeout is two thirds of the negotiated session timeout.
            negotiated = read_timeout_ms * 1.5 / 1000
            if abs(negotiated - self._timeout_s) > 0.01:
                if abs(negotiated - self._requested_s) > 0.01:
                    log.warning(
                        "ZooKeeper negotiated a session timeout of %.1f s (requested %.1f s): the server's "
                        "min/maxSessionTimeout bound it",
                        negotiated,
                        self._requested_s,
                    )
                self._timeout_s = negotiated
            return result

        connection._connect = connect
