"""Every watch an instance relies on keeps working after its connection or session is lost.

Injected, in turn: (1) a session expired for real by a second client that attaches to it with
its id and password and closes it; (2) the only ZooKeeper server frozen (SIGSTOP) past the
session timeout and thawed, so every session expires at once (a server of the test's own);
(3) the instance's connection cut (its socket shut down) while the session lives on.
Asserted after (1) and (2), with ``rebalance_interval_s`` an hour so only watches can trigger
anything: the instance takes its partitions again on the new session; when a second instance
joins, the first releases its surplus within seconds; a pause marker and its removal are
applied; an offset reset is applied by the owners; no exception reaches
``threading.excepthook`` and no traceback reaches the log.
Asserted after (3): a partition freed later by another consumer, with no instance joining or
leaving, is taken within seconds (the owner watches are armed again on the new connection).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState

from jetkafka import parse_config
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._pause_markers import PauseMarkers
from jetkafka.devstack import ZooKeeperServer
from jetkafka.ops._reset import reset_offsets
from tests.support.channels import channel_config, values
from tests.support.group_watch import committed, owners, started_client, stop_client
from tests.support.instances import Instance
from tests.support.load import wait_for
from tests.support.zk_faults import expire_session

PARTITIONS = 4
PATHS = GroupPaths("g")


@pytest.fixture
def thread_failures(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Exceptions that escaped any thread from now on (they end up in threading.excepthook)."""
    seen: list[str] = []
    original = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        seen.append(f"{args.thread.name if args.thread else '?'}: {args.exc_type.__name__}: {args.exc_value}")
        original(args)

    monkeypatch.setattr(threading, "excepthook", hook)
    return seen


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    zk = ZooKeeperServer(tmp_path / "zk")
    zk.ends_with_parent = True
    zk.start(timeout=90)
    yield zk
    if zk.pid is not None:
        os.kill(zk.pid, signal.SIGCONT)
    zk.stop()


def freeze_past_timeout(server: ZooKeeperServer, client: KazooClient, session_timeout_s: float) -> None:
    """SIGSTOP ``server`` until ``client`` noticed and the session timeout passed, then SIGCONT."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: client.state != KazooState.CONNECTED, 30, "the client to see the freeze")
        time.sleep(session_timeout_s + 2.0)  # the fault itself: frozen past the session timeout
    finally:
        os.kill(server.pid, signal.SIGCONT)


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.exc_info or "Traceback" in r.getMessage() or r.getMessage().startswith("Exception in")
    ]


@pytest.mark.parametrize("fault", ["expired by a second client", "server frozen past the timeout"])
def test_watches_work_after_the_session_expired(
    fault: str,
    request: pytest.FixtureRequest,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce: Callable[..., Any],
    thread_failures: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    session_timeout_s = 4.0
    server: ZooKeeperServer | None = None
    if fault.startswith("server frozen"):
        server = request.getfixturevalue("own_server")
        zk_connect = f"{server.connect_string}/jk"
    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, values(40, PARTITIONS))
    raw = channel_config(zk_connect, kafka_config, [topic], auto_offset_reset="earliest", rebalance_interval_s=3600)
    raw["zookeeper"]["session_timeout_s"] = session_timeout_s
    a = Instance(raw)
    b: Instance | None = None
    observer = started_client(zk_connect)
    try:
        wait_for(lambda: committed(observer, topic) == {p: 10 for p in range(PARTITIONS)}, 60, "A committed all")
        old_session = a.session_id
        marks = len(caplog.records)

        if server is None:
            expire_session(a.client)
        else:
            freeze_past_timeout(server, a.client, session_timeout_s)
            stop_client(observer)
            observer = started_client(zk_connect)
            wait_for(a.connected, 30, "A connected again")
            if a.session_id == old_session:
                # A thawed server revalidates a session whose expiry it had not processed yet if
                # the client is back first (a loaded machine): expire it for real instead.
                print("the server revalidated the session after the freeze; expiring it with a twin client")
                expire_session(a.client)
        wait_for(lambda: a.connected() and a.session_id != old_session, 30, "A on a new session")
        wait_for(lambda: len(a.channel.owned_partitions()) == PARTITIONS, 30, "A holding everything again")

        b = Instance(raw)
        shared = wait_for(
            lambda: sorted(len(i.channel.owned_partitions()) for i in (a, b)) == [2, 2], 10, "A releasing 2 to B"
        )

        markers = PauseMarkers(observer, PATHS)
        markers.pause()
        paused = wait_for(lambda: a.channel.paused and b is not None and b.channel.paused, 10, "both paused")
        markers.resume()
        wait_for(lambda: not a.channel.paused and b is not None and not b.channel.paused, 10, "both resumed")

        result = reset_offsets(parse_config(raw), topic, "earliest", timeout=30)
        assert result.ok
        by_owner = {p: r.by for p, r in result.applied.items()}
        assert set(by_owner.values()) == {a.consumer_id, b.consumer_id}, by_owner
        wait_for(lambda: len(a.processor.ids()) + len(b.processor.ids()) >= 40 + 40, 30, "the events again")
    finally:
        stop_client(observer)
        for inst in (b, a):
            if inst is not None:
                inst.close()
    assert thread_failures == []
    assert tracebacks(caplog) == []
    print(f"{fault}: surplus released {shared:.2f} s after B joined; pause applied in {paused:.2f} s")
    assert len(caplog.records) > marks


def test_owner_watches_are_armed_again_on_a_new_connection(
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    thread_failures: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    topic = topic_factory(partitions=2)
    other = started_client(zk_connect)
    observer = started_client(zk_connect)
    outsider = PartitionOwnership(other, PATHS, "outsider")  # holds a partition, never registers
    outsider.prepare(topic)
    held = outsider.take(topic, 1)
    assert held is not None
    a = Instance(channel_config(zk_connect, kafka_config, [topic], rebalance_interval_s=3600))
    try:
        wait_for(lambda: owners(observer, topic) == {0: a.consumer_id, 1: "outsider"}, 30, "A holding 0")
        states: list[KazooState] = []
        a.client.add_listener(states.append)
        session = a.session_id
        sock = a.client._connection._socket  # kazoo keeps no public accessor
        sock.shutdown(socket.SHUT_RDWR)
        wait_for(lambda: KazooState.SUSPENDED in states and a.connected(), 30, "A reconnected")
        assert a.session_id == session, "the session was meant to survive"

        outsider.release(held)
        took = wait_for(lambda: owners(observer, topic).get(1) == a.consumer_id, 5, "A taking the freed partition")
    finally:
        stop_client(other)
        stop_client(observer)
        a.close()
    assert thread_failures == []
    assert tracebacks(caplog) == []
    print(f"freed partition taken {took:.2f} s after it was freed")
