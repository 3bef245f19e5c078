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

A hung server (frozen, or behind a path that drops packets, its connection left open) must be
left for another server of the ensemble before the session expires. kazoo finds one only by a
ping it sends after a third of the timeout with nothing sent, and every request (these
heartbeats, commits, the application's own reads) pushes that ping back, so on a busy
connection kazoo would never find it. The heartbeats close that gap: when one has gone
unanswered for a third of the timeout (the limit kazoo gives its ping) on the connection kazoo
still uses, the lease shuts that connection down, kazoo sees it broken and connects to the next
server, all within about half the session timeout of the last answer
(tests/faults/test_zookeeper_outages.py shows it). A server slower than that to answer is
treated the same way; on a single-server ensemble kazoo reconnects to it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState

log = logging.getLogger(__name__)


@dataclass
class _Heartbeat:
    sent: float  # monotonic
    request: Any  # kazoo's async result
    connection: socket.socket | None  # kazoo's socket when it was sent
    generation: int  # the lease's count of voids then: an answer across a void renews nothing
    waited_since: float = 0.0  # monotonic: since when its answer is awaited (sent, or a thaw)
    abandoned: bool = False  # its connection was shut down for it


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
        self.hung_connections = 0  # connections shut down for an unanswered heartbeat
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
        unanswered: list[_Heartbeat] = []
        next_beat = last_ran = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            if now - last_ran > self.stall_s():
                # This thread did not run for a third of the timeout (no wait here is that long):
                # the process was frozen or starved. Answers may sit unread in the socket; kazoo's
                # thread gets as long again to read them before a connection is judged hung.
                for beat in unanswered:
                    beat.waited_since = now
            last_ran = now
            if now >= next_beat:
                sent = self._send()
                if sent is not None:
                    unanswered.append(sent)
                next_beat = time.monotonic() + self.interval_s()
            unanswered = self._settle(unanswered)
            self._leave_if_hung(unanswered)
            wake = min([next_beat, *(b.waited_since + self.stall_s() for b in unanswered if not b.abandoned)])
            if unanswered:
                # An answer normally comes within milliseconds: wait for the newest, to renew at once.
                try:
                    unanswered[-1].request.get(timeout=max(0.0, wake - time.monotonic()))
                except Exception:  # noqa: BLE001 - no answer yet, or a failure: _settle reads which
                    pass
            else:
                stop.wait(max(0.0, wake - time.monotonic()))

    def _send(self) -> _Heartbeat | None:
        with self._lock:
            generation = self._generation
        connection = getattr(getattr(self._client, "_connection", None), "_socket", None)
        sent = time.monotonic()
        try:
            request = self._client.exists_async("/")
        except Exception as exc:  # noqa: BLE001 - kazoo fails requests through the result; the thread must live on
            log.warning("ZooKeeper heartbeat not sent (%s: %s)", type(exc).__name__, exc)
            return None
        return _Heartbeat(sent, request, connection, generation, waited_since=sent)

    def _settle(self, beats: list[_Heartbeat]) -> list[_Heartbeat]:
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

    def _leave_if_hung(self, beats: list[_Heartbeat]) -> None:
        """Shut down kazoo's connection when a heartbeat sent on it is unanswered for
        :meth:`stall_s`: kazoo sees it broken and connects to the next server."""
        now = time.monotonic()
        stalled = [b for b in beats if not b.abandoned and now - b.waited_since >= self.stall_s()]
        if not stalled:
            return
        current = getattr(getattr(self._client, "_connection", None), "_socket", None)
        for beat in stalled:
            beat.abandoned = True  # one shut-down per connection is enough
        if current is None or self._client.state != KazooState.CONNECTED:
            return  # kazoo is reconnecting already
        if not any(b.connection is current for b in stalled):
            return  # sent on an earlier connection: kazoo failed or will fail it
        try:
            host, port = current.getpeername()[:2]
            server = f"{host}:{port}"
        except OSError:
            server = "?"
        self.hung_connections += 1
        log.warning(
            "ZooKeeper server %s has not answered a heartbeat for %.1f s (a third of the %.1f s session "
            "timeout): closing the connection so that the client moves to another server before the "
            "session expires",
            server, now - stalled[0].waited_since, self._timeout_s,
        )
        try:
            current.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed meanwhile: kazoo is reconnecting

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
