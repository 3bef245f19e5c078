"""What answers at the addresses of ``zookeeper.connect``, asked before the first connection.

kazoo tries the servers of the connect string over and over until its timeout, whatever the
reason a connection fails, and then says only that it timed out. :func:`probe_servers` asks each
address once, all at the same time: a TCP connection, then ZooKeeper's ``srvr`` command, which
every ZooKeeper server answers in text (its version, or that the command is not allowed, or
that it is not serving requests) and closes. The outcome of each server says why a start could
not connect, so the message names the cause:

* every server refused the connection, or has a name that does not resolve, or an address the
  network says it cannot reach: known at once, nothing to wait for;
* no answer to the connection: an unroutable address or a firewall dropping the packets, known
  only at the timeout;
* an answer that is not ZooKeeper's (the connection closed at ``srvr``, or other bytes): another
  service's port, such as a Kafka broker's;
* ZooKeeper's answer: kazoo connects (or the server is not serving, e.g. without a quorum).

Guarantees: returns by its deadline, as soon as a server answers as ZooKeeper or every address
has answered one way or another; sends nothing but ``srvr`` (no session is opened); every socket
it opened is closed when it returns or raises (a signal's handler may raise while it waits).
Only the first connection of a start is probed; kazoo's own retries after that are unchanged.
"""

from __future__ import annotations

import enum
import errno
import os
import selectors
import socket
import time
from dataclasses import dataclass

from kazoo.hosts import collect_hosts

_COMMAND = b"srvr"
_MOST = 4096  # bytes of an answer kept: enough to tell ZooKeeper's from another service's
ZOOKEEPER_MARKERS = (b"Zookeeper version", b"is not executed because", b"not currently serving requests")
_NOT_SERVING = b"not currently serving requests"


class Outcome(enum.IntEnum):
    """What one address did, the most telling last (a server's outcome is its best address's)."""

    UNRESOLVED = 0  # the host name does not resolve
    REFUSED = 1  # nothing listens on the port
    UNREACHABLE = 2  # the network says so at once (no route to host, network unreachable)
    NO_ANSWER = 3  # the connection was neither accepted nor refused by the deadline
    SILENT = 4  # accepted, then nothing by the deadline
    NOT_ZOOKEEPER = 5  # accepted, then closed at srvr or answered something else
    NOT_SERVING = 6  # ZooKeeper, not serving requests
    ZOOKEEPER = 7

    @property
    def settled(self) -> bool:
        """Known before the deadline (the others are what the deadline found)."""
        return self not in (Outcome.NO_ANSWER, Outcome.SILENT)

    @property
    def failed_at_once(self) -> bool:
        """The connection itself failed: nothing a longer wait would change."""
        return self <= Outcome.UNREACHABLE


@dataclass(frozen=True)
class ServerAnswer:
    """One server of the connect string (as written there), and what it did."""

    server: str
    outcome: Outcome
    detail: str = ""  # the OS's error, or the bytes that were not ZooKeeper's


@dataclass
class _Address:
    server: str
    sock: socket.socket
    received: bytes = b""
    outcome: Outcome = Outcome.NO_ANSWER
    detail: str = ""

    @property
    def done(self) -> bool:
        return self.outcome.settled


def probe_servers(hosts: str, timeout_s: float) -> list[ServerAnswer]:
    """What each server of ``hosts`` (``host:port[,host:port...]``, no chroot) did within
    ``timeout_s``, in the order written; returns early as soon as one answers as ZooKeeper or
    every address has answered."""
    deadline = time.monotonic() + timeout_s
    answers: dict[str, ServerAnswer] = {}
    addresses: list[_Address] = []
    selector = selectors.DefaultSelector()
    try:
        for server in hosts.split(","):
            found = _connect_all(server, selector)
            if isinstance(found, ServerAnswer):
                answers[server] = found
            else:
                addresses.extend(found)
        _exchange(selector, addresses, deadline)
    finally:
        for address in addresses:
            address.sock.close()
        selector.close()
    for address in addresses:
        best = answers.get(address.server)
        if best is None or address.outcome > best.outcome:
            answers[address.server] = ServerAnswer(address.server, address.outcome, address.detail)
    return [answers[server] for server in hosts.split(",")]


def _connect_all(server: str, selector: selectors.BaseSelector) -> list[_Address] | ServerAnswer:
    """A connection started to each address of ``server``, or why there is none."""
    ((host, port),), _ = collect_hosts(server)
    try:
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        return ServerAnswer(server, Outcome.UNRESOLVED, exc.strerror or str(exc))
    started: list[_Address] = []
    unusable: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:  # an address family this host cannot use (IPv6 switched off)
            unusable = exc
            continue
        sock.setblocking(False)
        address = _Address(server, sock)
        started.append(address)
        code = sock.connect_ex(sockaddr)
        if code in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            selector.register(sock, selectors.EVENT_WRITE, address)
        else:
            _refused_or_unreachable(address, code)
    if not started and unusable is not None:
        return ServerAnswer(server, Outcome.UNREACHABLE, unusable.strerror or str(unusable))
    return started


def _exchange(selector: selectors.BaseSelector, addresses: list[_Address], deadline: float) -> None:
    while not all(a.done for a in addresses) and not any(a.outcome >= Outcome.NOT_SERVING for a in addresses):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for key, events in selector.select(left):
            address: _Address = key.data
            if events & selectors.EVENT_WRITE:
                _connected(selector, address)
            elif events & selectors.EVENT_READ:
                _read(selector, address)


def _connected(selector: selectors.BaseSelector, address: _Address) -> None:
    code = address.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if code:
        selector.unregister(address.sock)
        _refused_or_unreachable(address, code)
        return
    address.outcome = Outcome.SILENT
    try:
        address.sock.send(_COMMAND)
    except OSError as exc:
        selector.unregister(address.sock)
        _closed(address, exc)
        return
    selector.modify(address.sock, selectors.EVENT_READ, address)


def _read(selector: selectors.BaseSelector, address: _Address) -> None:
    try:
        chunk = address.sock.recv(_MOST)
    except OSError as exc:
        selector.unregister(address.sock)
        _closed(address, exc)
        return
    address.received += chunk
    if chunk and len(address.received) < _MOST:
        return  # ZooKeeper closes the connection after its answer: read up to that
    selector.unregister(address.sock)
    _closed(address, None)


def _closed(address: _Address, error: OSError | None) -> None:
    """Classify what came back before the connection closed (or ``error`` ended it)."""
    answer = address.received
    if any(marker in answer for marker in ZOOKEEPER_MARKERS):
        address.outcome = Outcome.NOT_SERVING if _NOT_SERVING in answer else Outcome.ZOOKEEPER
    elif answer:
        address.outcome = Outcome.NOT_ZOOKEEPER
        address.detail = f"it answered ZooKeeper's srvr request with {answer[:40]!r}"
    else:
        address.outcome = Outcome.NOT_ZOOKEEPER
        cause = f" ({error.strerror or error})" if error is not None else ""
        address.detail = f"it closed the connection at ZooKeeper's srvr request without an answer{cause}"


def _refused_or_unreachable(address: _Address, code: int) -> None:
    address.outcome = Outcome.REFUSED if code == errno.ECONNREFUSED else Outcome.UNREACHABLE
    address.detail = os.strerror(code)


__all__ = ["Outcome", "ServerAnswer", "ZOOKEEPER_MARKERS", "probe_servers"]
