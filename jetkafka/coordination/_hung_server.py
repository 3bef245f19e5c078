"""Leaving a hung ZooKeeper server for another server of the ensemble, before the session expires.

A server that stops answering while its connection stays open (frozen, a stalled disk, a path
that drops packets) is found by kazoo only through a ping it sends after a third of the session
timeout with nothing else sent. Every request pushes that ping back: the local lease's reads,
commits, a processor's own reads. On a busy connection kazoo would never find the server hung;
the session would expire there and the instance would hold still for good.

:class:`HungServerWatch` looks at the lease's reads instead (:mod:`._session_lease` sends one
every sixth of the timeout). When one sent on kazoo's current connection has had no answer for
a third of the timeout, the limit kazoo gives its own ping, the watch shuts that connection
down: kazoo finds it broken and connects to the next server in ``connect``. The session, its
ephemeral nodes and every offset stay as they were.

Guarantee: an instance closes its connection to a server that stopped answering about half the
session timeout after its last answer, whatever else it sends, and kazoo connects to the next
server in ``connect``. Only the server's silence counts: not time before the connection's handshake finished,
not a read kazoo has not written yet, not an answer waiting unread in the socket (kazoo's own
thread slow), not the time this process was frozen.

Failure modes: a server merely slow to answer (this session's own writes included, as answers
come in order) looks the same as a hung one and is left too, as kazoo leaves a server whose
ping goes unanswered. A connection is closed at most once per session timeout: a stall sooner
after the last close (a slow ensemble rather than one hung server) waits for that, so that a
slow ensemble does not get a storm of reconnects. With one server in ``connect``, kazoo
connects to it again and waits for it. kazoo may try the hung server again among the next ones
(it shuffles the list each round); its handshake there waits the session timeout divided by
the number of servers before it moves on. With two servers that wait is half the timeout, and
the session can expire before kazoo reaches the other one; with three or more it is not.
"""

from __future__ import annotations

import logging
import math
import select
import socket
import time
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState

log = logging.getLogger(__name__)


@dataclass
class Heartbeat:
    """One of the lease's reads, until its answer comes."""

    sent: float  # monotonic
    request: Any  # kazoo's async result
    connection: socket.socket | None  # kazoo's socket when it was sent
    generation: int  # the lease's count of voids then: an answer across a void renews nothing
    waited_since: float  # monotonic: since when only the server can be the reason it is unanswered
    abandoned: bool = False  # judged already


class HungServerWatch:
    """Judges the lease's unanswered reads.

    Threads: :meth:`check` runs on the lease's heartbeat thread only; :meth:`connected` on
    kazoo's connection thread (one float written whole, read by :meth:`check`).
    """

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._usable_since = time.monotonic()
        self._last_close = -math.inf
        self._postponed_to = -math.inf  # the last postponement logged
        self.closed = 0  # connections shut down for a hung server

    def connected(self) -> None:
        """A handshake finished (kazoo's connection thread): the connection is usable from now."""
        self._usable_since = time.monotonic()

    def check(self, beats: list[Heartbeat], stall_s: float, timeout_s: float) -> bool:
        """Shut down kazoo's connection if a read sent on it has waited ``stall_s`` for the
        server; True when it did."""
        now = time.monotonic()
        for beat in beats:
            beat.waited_since = max(beat.waited_since, self._usable_since)
        stalled = [b for b in beats if not b.abandoned and now - b.waited_since >= stall_s]
        if not stalled:
            return False
        current: socket.socket | None = getattr(getattr(self._client, "_connection", None), "_socket", None)
        on_current = current is not None and any(b.connection is current for b in stalled)
        if current is None or not on_current or self._client.state != KazooState.CONNECTED:
            for beat in stalled:
                beat.abandoned = True  # sent on an earlier connection: kazoo failed or will fail it
            return False
        if _unread(current) or _unsent(self._client, stalled):
            for beat in stalled:
                beat.waited_since = now  # kazoo's own thread is behind, not the server
            return False
        server = _peer(current)
        silent = now - min(b.sent for b in stalled)
        if now - self._last_close < timeout_s:
            # Judged again once a session timeout has passed since the last close.
            again = self._last_close + timeout_s - stall_s
            for beat in stalled:
                beat.waited_since = max(beat.waited_since, again)
            if self._postponed_to != again:
                self._postponed_to = again
                log.warning(
                    "ZooKeeper server %s has not answered a heartbeat for %.1f s, within one session timeout "
                    "of the last connection closed for that: the ensemble looks slow; the connection is kept "
                    "%.1f s more",
                    server, silent, self._last_close + timeout_s - now,
                )
            return False
        for beat in stalled:
            beat.abandoned = True
        try:
            # The plain socket's shutdown: an SSL socket's own would pull its state from under
            # kazoo's thread mid-read.
            socket.socket.shutdown(current, socket.SHUT_RDWR)
        except OSError:
            return False  # closed meanwhile: kazoo is reconnecting already
        self._last_close = now
        self.closed += 1
        log.warning(
            "ZooKeeper server %s has not answered a heartbeat for %.1f s (a third of the %.1f s session timeout): "
            "connection closed so that the client moves to another server before the session expires",
            server, silent, timeout_s,
        )
        return True


def _unread(sock: socket.socket) -> bool:
    """Whether bytes (or the server's close) wait in the socket for kazoo's thread."""
    fd = sock.fileno()
    if fd < 0:
        return True  # closed meanwhile: not the server's silence to judge
    try:
        if hasattr(select, "poll"):  # any descriptor number (select() stops at 1023)
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except OSError:
        return True


def _unsent(client: KazooClient, beats: list[Heartbeat]) -> bool:
    """Whether kazoo has not written one of these reads yet."""
    queued = list(getattr(client, "_queue", ()))  # copied in one step under the interpreter lock
    requests = {id(b.request) for b in beats}
    return any(id(entry[1]) in requests for entry in queued)


def _peer(sock: socket.socket) -> str:
    try:
        peer = sock.getpeername()
    except OSError:
        return "?"
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer) or "?"
