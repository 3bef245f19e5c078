"""ZooKeeper outages the sessions survive: a server restart, an ensemble member lost or hung.

Three tests run two in-process channels, each with its own session, under steady load, on
ZooKeeper servers of their own or, for (3), on relays in front of the shared test server (which
itself is never touched).

Injected: (1) a clean stop of the only ZooKeeper server, about 3 s down, and a start on the same
port with the same data directory, shorter than the 15 s session timeout; (2) a clean stop of
the member of a three-server ensemble that one channel's session is connected through, kept
down to the end; (3) the server one channel's session is connected through made to hang: of
two relays in front of one server, the one that session uses stops forwarding, its
connections left open (no FIN, no RST), to the end, while the test sends reads of its own on
the sessions every second (each pushes back the ping by which kazoo alone would find the hang).
Asserted, all three: each session saw the connection drop and came back within the same session
(same session id, no expiry); owner nodes are exactly the same nodes before, during (sampled)
and after (owner id, owning session, creation zxid); no ``PartitionLost``; committed offsets
never go back; every acknowledged id delivered exactly once; for (3), the connection was closed
by the instance for the hung server.

A fourth test runs one channel on one relay that stops forwarding (new connections accepted and
held, as a frozen server's kernel does) until the instance closes its connection for it, then
forwards again: the instance connects to the same server again within its session, and every
event comes through once.

ZooKeeper 3.9 itself can expire a session across a restart: a connection refused while the
server still loads its data is left open after a NullPointerException in
``ZooKeeperServer.removeCnxn`` (``zkDb`` is null), and kazoo waits the whole session timeout for
its handshake reply. When the server log shows exactly that and a session expired, the restart
test still checks that no acknowledged id was lost, then reports an expected failure naming
the defect (see :func:`startup_leak`); any other expiry fails the test.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import SessionExpiredError

from jetkafka.devstack import ZooKeeperEnsemble, ZooKeeperServer
from tests.support.channels import channel_config, values
from tests.support.group_watch import (
    Sampler,
    committed,
    offset_nodes,
    offsets_going_back,
    owner_nodes,
    started_client,
    stop_client,
)
from tests.support.instances import Instance
from tests.support.load import AckedProducer, delivery_report, wait_delivered, wait_for
from tests.support.tcp_relay import TcpRelay

PARTITIONS = 6
SESSION_TIMEOUT_S = 15  # tickTime 500 ms: the servers accept 1..60 s


def run_through_outage(
    connect: str,
    kafka_config: dict[str, Any],
    topic: str,
    caplog: pytest.LogCaptureFixture,
    inject: Callable[[list[Instance]], str],
    explain_expiry: Callable[[], str | None] = lambda: None,
    observe: str | None = None,
) -> None:
    """Two channels under load on ``connect``; ``inject(instances)`` breaks ZooKeeper and mends it.

    The test's own reads go to ``observe`` (default ``connect``), which the fault must spare.

    ``explain_expiry`` names a known ZooKeeper defect that expired a session anyway, if it
    struck (see :func:`startup_leak`); the test then only checks that nothing was lost, and is
    reported as an expected failure with that reason instead of passing.
    """
    caplog.set_level(logging.INFO)
    config = channel_config(connect, kafka_config, [topic], threads=2, batch_max_events=50)
    config["zookeeper"]["session_timeout_s"] = SESSION_TIMEOUT_S
    producer = AckedProducer(kafka_config, topic, range(PARTITIONS), rate=300)
    instances: list[Instance] = []
    samplers: list[Sampler[Any]] = []
    observer = None
    try:
        instances.extend(Instance(config) for _ in range(2))
        observer = started_client(observe or connect, timeout=30)  # the chroot exists now
        wait_for(
            lambda: sorted(len(i.channel.owned_partitions()) for i in instances) == [3, 3], 60, "3/3 ownership"
        )
        wait_for(
            lambda: (lambda c: len(c) == PARTITIONS and min(c.values()) >= 50)(committed(observer, topic)),
            60,
            "commits on every partition",
        )
        before = owner_nodes(observer, topic)
        assert {n.consumer_id for n in before.values()} == {i.consumer_id for i in instances}
        sessions = [i.session_id for i in instances]
        samplers = [
            Sampler(lambda: owner_nodes(observer, topic), interval=0.05, name="owners"),
            Sampler(lambda: offset_nodes(observer, topic), interval=0.05, name="offsets"),
        ]
        wait_for(lambda: all(s.samples for s in samplers), 10, "first samples")
        marks = len(caplog.records)

        what = inject(instances)

        wait_for(lambda: all(i.connected() for i in instances), 60, "both sessions connected again")
        # Work goes on after the outage: ids written from now on are delivered and committed.
        mark = producer.next_id
        wait_for(
            lambda: all(
                any(int(v) >= mark + 100 for *_, v in i.processor.delivered[-200:]) for i in instances
            ),
            60,
            "deliveries after the outage on both",
        )
        time.sleep(1.0)
        acked = producer.stop()
        wait_delivered(lambda: instances[0].processor.ids() + instances[1].processor.ids(), acked)
        owner_history, offset_history = (s.stop() for s in samplers)
        try:
            after = owner_nodes(observer, topic)
        except SessionExpiredError:  # the same defect can strike the test's own session
            after = None
        expired = [i.session_id for i in instances] != sessions or after is None
        for i in instances:
            assert i.close(), f"{i.consumer_id} did not release everything in time"
    finally:
        for s in samplers:
            s.stop()
        for i in instances:
            if i.channel.running:
                i.close()
        producer.close()
        if observer is not None:
            stop_client(observer)

    if expired:
        lost = sorted(acked - {i for inst in instances for i in inst.processor.ids()})
        assert lost == [], f"a session expired and {len(lost)} acknowledged ids were lost: {lost[:20]}"
        reason = explain_expiry()
        assert reason is not None, "a session expired although the outage was shorter than the session timeout"
        pytest.xfail(reason)
    assert after == before, f"ownership changed: {before} -> {after}"
    owner_snapshots = [snapshot for _, snapshot in owner_history]
    assert owner_snapshots and all(s == before for s in owner_snapshots), "ownership changed during the outage"
    assert offsets_going_back(offset_history) == []
    ids: list[int] = []
    for i in instances:
        ids.extend(i.processor.ids())
        assert i.processor.losses() == [], i.processor.losses()[:5]
        assert not [k for k in i.channel.stats.errors if k[1] == "partition_lost"]
        assert i.processor.violations == []
    report = delivery_report(ids, acked)
    assert report.exactly_once, str(report)
    logs = [r.getMessage() for r in caplog.records[marks:]]
    suspended = sum("ZooKeeper connection suspended" in m for m in logs)
    restored = sum("ZooKeeper connection restored within the session" in m for m in logs)
    assert not [m for m in logs if "session expired" in m or "new ZooKeeper session" in m]
    assert suspended >= 1 and restored >= suspended, (suspended, restored)
    print(f"{what}; {len(acked)} ids each delivered once; {suspended} suspensions, all restored in-session")


def startup_leak(server: ZooKeeperServer) -> str | None:
    """Whether the server's last start-up hit a ZooKeeper race that can expire a session.

    A client connecting while the server still loads its data is turned away ("ZooKeeperServer
    not running"); when closing that connection races with the creation of the data tree, the
    close fails ("WorkerService: Unexpected exception") and the socket is left open, unanswered.
    kazoo waits for the handshake reply as long as the session timeout, so by the time it tries
    again, the server, which restarted the session's timer when it began serving, has expired it.
    """
    text = server.log_path.read_text(errors="replace")
    start = text.rfind("binding to port")
    serving = text.find("PrepRequestProcessor (sid:0) started", start)
    window = text[start:serving if serving >= 0 else len(text)]
    if start >= 0 and "ZooKeeperServer not running" in window and "WorkerService: Unexpected exception" in window:
        return (
            "ZooKeeper start-up race: a client connection closed while the server loaded its data was left "
            f"open (see {server.log_path}), and that client's session expired waiting for the handshake"
        )
    return None


def test_zookeeper_restart_shorter_than_the_session_timeout(
    tmp_path: Path, kafka_config: dict[str, Any], topic_factory, caplog: pytest.LogCaptureFixture
) -> None:
    server = ZooKeeperServer(tmp_path / "zk")
    server.ends_with_parent = True
    server.start(timeout=90)
    try:
        topic = topic_factory(partitions=PARTITIONS)

        def restart(instances: list[Instance]) -> str:
            port = server.client_port
            down = time.monotonic()
            server.stop()
            wait_for(lambda: not any(i.connected() for i in instances), 30, "both sessions to see the drop")
            time.sleep(3.0)
            server.start(timeout=60)
            outage = time.monotonic() - down
            assert server.client_port == port
            # Sessions restored from the data directory get a full timeout once the server serves
            # again; the restart itself must stay shorter than the session timeout.
            assert outage < SESSION_TIMEOUT_S, f"the restart took {outage:.1f} s, longer than the session timeout"
            reconnected = wait_for(lambda: all(i.connected() for i in instances), 60, "sessions back")
            return f"server down {outage:.1f} s, sessions back {reconnected:.2f} s after it served again"

        run_through_outage(
            f"{server.connect_string}/jk", kafka_config, topic, caplog, restart, lambda: startup_leak(server)
        )
    finally:
        server.stop()
    assert not server.is_running()


def test_ensemble_losing_the_member_a_session_uses(
    tmp_path: Path, kafka_config: dict[str, Any], topic_factory, caplog: pytest.LogCaptureFixture
) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble", size=3, ends_with_parent=True)
    ensemble.start(timeout=120)
    try:
        topic = topic_factory(partitions=PARTITIONS)
        by_port = {s.client_port: s for s in ensemble.servers}

        def lose_member(instances: list[Instance]) -> str:
            port = instances[0].server_port()
            assert port in by_port, f"cannot tell which member session 1 uses ({port})"
            victim = by_port[port]
            role = victim.mode()
            on_it = [i for i in instances if i.server_port() == port]
            down = time.monotonic()
            victim.stop()
            wait_for(
                lambda: all(i.connected() and i.server_port() not in (None, port) for i in on_it),
                60,
                "the sessions on the stopped member to move to another",
            )
            moved = time.monotonic() - down
            assert len(ensemble.running()) == 2
            return (
                f"stopped member {victim.server_id} ({role}, {len(on_it)} of 2 sessions on it); "
                f"they were connected to another member {moved:.2f} s after the stop began"
            )

        run_through_outage(f"{ensemble.connect_string}/jk", kafka_config, topic, caplog, lose_member)
    finally:
        ensemble.stop()
    assert ensemble.running() == []


def test_a_hung_server_the_session_uses(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory, caplog: pytest.LogCaptureFixture
) -> None:
    hosts, _, chroot = zk_connect.partition("/")
    host, _, port = hosts.rpartition(":")
    relays = [TcpRelay(host, int(port)) for _ in range(2)]
    try:
        topic = topic_factory(partitions=PARTITIONS)
        by_port = {r.port: r for r in relays}

        def hang(instances: list[Instance]) -> str:
            port = instances[0].server_port()
            assert port in by_port, f"cannot tell which relay session 1 uses ({port})"
            on_it = [i for i in instances if i.server_port() == port]
            moved_on = lambda: all(i.connected() and i.server_port() not in (None, port) for i in on_it)  # noqa: E731
            hung = time.monotonic()
            by_port[port].hang()
            # The application's own reads go on meanwhile, one a second (each a request that
            # pushes back kazoo's ping): they must not keep the hung connection looking alive.
            reads = 0
            while not moved_on() and time.monotonic() - hung < 60:
                for i in on_it:
                    i.client.exists_async("/")
                    reads += 1
                time.sleep(1.0)
            # Before the session timeout, or the server expires the session meanwhile.
            wait_for(moved_on, 1, "the sessions on the hung server to move to the other")
            moved = time.monotonic() - hung
            closed = sum(i.session.lease.hung_connections for i in on_it)
            assert closed == len(on_it), f"{closed} connection(s) closed for a hung server, {len(on_it)} on it"
            return (
                f"hung the server {len(on_it)} of 2 sessions were connected through ({reads} other reads "
                f"sent meanwhile); they were connected through the other {moved:.2f} s later (session "
                f"timeout {SESSION_TIMEOUT_S} s)"
            )

        connect = ",".join(r.address for r in relays) + "/" + chroot
        run_through_outage(connect, kafka_config, topic, caplog, hang, observe=zk_connect)
    finally:
        for relay in relays:
            relay.close()


def test_a_single_server_that_stalls_is_connected_to_again(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory, produce, caplog: pytest.LogCaptureFixture
) -> None:
    # One server in zookeeper.connect, silent for longer than a third of the timeout (a long
    # garbage collection on it) but shorter than the timeout: the connection is closed as for a
    # hung server, kazoo connects to the same server again and waits for it, and the session,
    # the partitions and the events come through.
    caplog.set_level(logging.INFO)
    hosts, _, chroot = zk_connect.partition("/")
    host, _, port = hosts.rpartition(":")
    relay = TcpRelay(host, int(port))
    topic = topic_factory(partitions=2)
    produce(topic, values(20, 2))
    config = channel_config(f"{relay.address}/{chroot}", kafka_config, [topic], auto_offset_reset="earliest")
    config["zookeeper"]["session_timeout_s"] = 6
    instance = Instance(config)
    try:
        wait_for(lambda: len(instance.processor.ids()) == 20, 30, "the first events")
        session = instance.session_id
        states: list[str] = []
        instance.client.add_listener(states.append)
        relay.hang(refuse_new=False)
        # The fault: silent until the connection is closed for it (a third of the timeout after
        # the first unanswered read), then answering again well within the timeout.
        wait_for(lambda: instance.session.lease.hung_connections == 1, 5, "the connection closed for the stall")
        relay.resume()
        produce(topic, values(20, 2, start=20))
        wait_for(lambda: len(instance.processor.ids()) == 40, 30, "the events after the stall")
        assert instance.session_id == session
        closed = instance.session.lease.hung_connections
        changes = list(states)  # before the close, which ends the session
    finally:
        instance.close()
        relay.close()
    assert changes == ["SUSPENDED", "CONNECTED"], changes
    assert closed == 1
    assert sorted(instance.processor.ids()) == list(range(40))
    assert instance.processor.losses() == []
