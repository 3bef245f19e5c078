"""Loopback port allocation for the local servers.

Guarantees: :func:`free_ports` returns distinct ports that were bindable on ``host`` at the
moment of the call. Nothing reserves them afterwards, so another process can still take one
before our server binds it; the servers' own start-up checks turn that race into a
:class:`~jetkafka.errors.DevStackError` rather than a hang.
"""

from __future__ import annotations

import contextlib
import errno
import socket

from jetkafka.errors import DevStackError

__all__ = ["LOOPBACK", "free_port", "free_ports", "is_port_free", "check_port_free"]

LOOPBACK = "127.0.0.1"


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # SO_REUSEADDR mirrors what the servers do: a port whose old connections linger in
    # TIME_WAIT is usable, while a port somebody listens on still is not.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Return ``count`` distinct ports that are free on ``host`` right now.

    All sockets stay open until every port is chosen, so the kernel cannot hand out the same
    port twice within one call.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(_bind(host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def free_port(host: str = LOOPBACK) -> int:
    """Return one port that is free on ``host`` right now."""
    return free_ports(1, host)[0]


def is_port_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a server could bind ``host:port`` now (nobody listens on it)."""
    try:
        _bind(host, port).close()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return False
        raise
    return True


def check_port_free(port: int, host: str = LOOPBACK, option: str = "--port") -> None:
    """Raise :class:`DevStackError` naming ``option`` as the fix if ``host:port`` is taken.

    A port that cannot be bound for another reason (a privileged port, an address this machine
    does not have) raises too, with the operating system's reason.
    """
    try:
        free = is_port_free(port, host)
    except OSError as exc:
        raise DevStackError(
            f"port {port} on {host} cannot be bound: {exc.strerror}; pick another with {option}"
        ) from exc
    if not free:
        raise DevStackError(
            f"port {port} on {host} is taken by another process; "
            f"pick another with {option} or stop that process"
        )
