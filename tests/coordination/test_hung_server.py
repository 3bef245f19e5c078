"""HungServerWatch's judgement, on a real socket pair standing for kazoo's connection.

The cluster tests (tests/faults/test_zookeeper_outages.py) show a hung server left and a single
stalled server connected to again; these show each case in which the watch must keep the
connection: the server is not the one keeping the answer back.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from kazoo.client import KazooClient, KazooState

from jetkafka.coordination._hung_server import Heartbeat, HungServerWatch

STALL_S = 2.0
TIMEOUT_S = 6.0


@dataclass
class _Connection:
    _socket: socket.socket | None


@dataclass
class KazooLike:
    """The parts of a KazooClient the watch reads."""

    _connection: _Connection
    state: str = KazooState.CONNECTED
    _queue: deque[tuple[Any, Any]] = field(default_factory=deque)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, server = socket.socketpair()
    yield ours, server
    ours.close()
    server.close()


def watch_on(sock: socket.socket) -> tuple[HungServerWatch, KazooLike]:
    client = KazooLike(_Connection(sock))
    watch = HungServerWatch(cast(KazooClient, client))
    watch._usable_since = time.monotonic() - 60  # the handshake long done
    return watch, client


def beat(sock: socket.socket | None, silent_s: float) -> Heartbeat:
    sent = time.monotonic() - silent_s
    return Heartbeat(sent, object(), sock, 0, waited_since=sent)


def closed(server: socket.socket) -> bool:
    """Whether the other end saw our side shut down (EOF)."""
    server.settimeout(1.0)
    try:
        return server.recv(1) == b""
    except TimeoutError:
        return False


def test_a_read_unanswered_for_the_stall_closes_the_connection(pair, caplog: pytest.LogCaptureFixture) -> None:
    ours, server = pair
    watch, _ = watch_on(ours)
    caplog.set_level(logging.WARNING)
    beats = [beat(ours, STALL_S + 0.5), beat(ours, 0.5)]
    assert watch.check(beats, STALL_S, TIMEOUT_S)
    assert closed(server)
    assert watch.closed == 1
    assert "has not answered a heartbeat for 2.5 s" in caplog.text


def test_a_read_not_unanswered_that_long_closes_nothing(pair) -> None:
    ours, server = pair
    watch, _ = watch_on(ours)
    assert not watch.check([beat(ours, STALL_S - 0.5)], STALL_S, TIMEOUT_S)
    assert not closed(server)


def test_an_answer_waiting_unread_in_the_socket_is_not_the_servers_silence(pair) -> None:
    ours, server = pair
    watch, _ = watch_on(ours)
    server.sendall(b"\0")  # the answer came; kazoo's thread has not read it yet
    stalled = beat(ours, STALL_S + 1)
    assert not watch.check([stalled], STALL_S, TIMEOUT_S)
    assert time.monotonic() - stalled.waited_since < 0.5  # waits a stall more from now
    assert not closed(server)


def test_a_read_kazoo_has_not_written_yet_is_not_the_servers_silence(pair) -> None:
    ours, server = pair
    watch, client = watch_on(ours)
    stalled = beat(ours, STALL_S + 1)
    client._queue.append(("exists", stalled.request))
    assert not watch.check([stalled], STALL_S, TIMEOUT_S)
    assert not closed(server)


def test_the_time_before_the_handshake_ended_does_not_count(pair) -> None:
    ours, server = pair
    watch, _ = watch_on(ours)
    stalled = beat(ours, STALL_S + 1)
    watch.connected()  # a handshake just finished: the read went out on a connection just usable
    assert not watch.check([stalled], STALL_S, TIMEOUT_S)
    assert not closed(server)


def test_a_read_sent_on_an_earlier_connection_or_while_reconnecting_closes_nothing(pair) -> None:
    ours, server = pair
    watch, client = watch_on(ours)
    other, other_end = socket.socketpair()
    try:
        assert not watch.check([beat(other, STALL_S + 1)], STALL_S, TIMEOUT_S)
        client.state = KazooState.SUSPENDED
        assert not watch.check([beat(ours, STALL_S + 1)], STALL_S, TIMEOUT_S)
    finally:
        other.close()
        other_end.close()
    assert not closed(server)


def test_a_second_stall_within_a_session_timeout_waits_for_it(pair, caplog: pytest.LogCaptureFixture) -> None:
    ours, server = pair
    watch, client = watch_on(ours)
    assert watch.check([beat(ours, STALL_S + 0.1)], STALL_S, TIMEOUT_S)
    first_close = time.monotonic()
    assert closed(server)
    # kazoo connected again (to a server just as slow): its reads stall at once.
    again, again_end = socket.socketpair()
    try:
        client._connection._socket = again
        caplog.set_level(logging.WARNING)
        stalled = [beat(again, STALL_S + 0.1), beat(again, STALL_S + 0.05)]
        assert not watch.check(stalled, STALL_S, TIMEOUT_S)
        assert not watch.check(stalled, STALL_S, TIMEOUT_S)
        assert not closed(again_end)
        assert caplog.text.count("the ensemble looks slow") == 1
        # Judged again a session timeout after the first close, not before.
        due = min(b.waited_since for b in stalled) + STALL_S
        assert abs(due - (first_close + TIMEOUT_S)) < 0.5
    finally:
        again.close()
        again_end.close()
    assert watch.closed == 1


def test_a_connection_on_a_descriptor_above_1023_is_judged_too(pair) -> None:
    # select() cannot look at descriptors from 1024 on; a process with Spark, Kafka clients and
    # a raised file limit gets there.
    ours, server = pair
    high = 1500
    try:
        os.dup2(ours.fileno(), high)
    except OSError:
        pytest.skip("the file limit is below 1501")
    high_sock = socket.socket(fileno=high)
    try:
        watch, _ = watch_on(high_sock)
        assert watch.check([beat(high_sock, STALL_S + 1)], STALL_S, TIMEOUT_S)
        assert closed(server)
    finally:
        high_sock.close()
