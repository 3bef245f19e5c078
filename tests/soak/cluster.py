"""The soak's own ZooKeeper and broker, which it freezes and restarts, and a view of the group.

:class:`SoakCluster` starts a :class:`~jetkafka.devstack.DevStack` in the run's directory
(ephemeral: its servers die with the soak, even when the soak is killed) and keeps a
:class:`ZooKeeperServer` and a :class:`LocalBroker` handle on the same directories and ports,
so a fault can stop and start either server in place, with its data, or freeze ZooKeeper
with SIGSTOP.

The observer client (:meth:`SoakCluster.observer`) reads the group's nodes for the harness.
Its reads retry through outages (the harness reads while ZooKeeper is down or frozen), and
kazoo opens a new session by itself when the soak expired the old one.

Threads: everything here is called from the harness's main thread, which must be the thread
that started the servers (an ephemeral server dies with the thread that launched it).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from jetkafka.coordination._paths import GroupPaths
from jetkafka.devstack import DevStack, LocalBroker, ServerProcess, ZooKeeperServer, client_config
from jetkafka.errors import DevStackError
from jetkafka.recovery._ledger import RecoveryLedger
from tests.support.group_watch import committed, consumer_pids, owners

log = logging.getLogger("soak.cluster")
T = TypeVar("T")


def _start_on_same_port(server: ServerProcess, timeout: float = 60.0) -> None:
    """Start ``server`` on its port, waiting while a client's socket holds that port.

    The dev stack's ports lie in the kernel's ephemeral range. While a server is down its
    clients keep reconnecting, and one of them may be given the server's own port as its local
    port and connect to itself (TCP simultaneous open); the port is taken until that client
    gives the connection up a moment later.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            server.start(timeout=120)
            return
        except DevStackError as exc:
            if "is taken" not in str(exc) or time.monotonic() > deadline:
                raise
            log.warning("%s: %s; trying again", server, exc)
            time.sleep(0.5)


class SoakCluster:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.stack = DevStack(directory / "stack", ephemeral=True)
        info = self.stack.up(timeout=120)
        zk_port = int(info.zookeeper.rsplit(":", 1)[1])
        broker_port = int(info.bootstrap_servers.rsplit(":", 1)[1])
        self.zookeeper = ZooKeeperServer(self.stack.state_dir / "zookeeper", zk_port)
        self.broker = LocalBroker(self.stack.state_dir / "broker", broker_port)
        for server in (self.zookeeper, self.broker):
            server.ends_with_parent = True
        self.zk_address = info.zookeeper
        self.kafka = client_config(info.bootstrap_servers)
        self.admin = AdminClient({**self.kafka, "logger": log})
        self._observer: KazooClient | None = None

    @property
    def zk_data_dir(self) -> Path:
        return self.zookeeper.data_dir

    # -- servers -------------------------------------------------------------------------

    def freeze_zookeeper(self, seconds: float) -> tuple[float, float]:
        """SIGSTOP the ZooKeeper server for ``seconds``; returns the wall times of stop and resume."""
        pid = self.zookeeper.pid
        assert pid is not None, "ZooKeeper is not running"
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        return stopped, time.time()

    def restart_zookeeper(self) -> float:
        """Stop ZooKeeper cleanly and start it again on its port and data; returns the seconds down."""
        down = time.monotonic()
        self.zookeeper.stop()
        _start_on_same_port(self.zookeeper)
        return time.monotonic() - down

    def restart_broker(self, pause_s: float) -> float:
        down = time.monotonic()
        self.broker.stop(timeout=30)
        time.sleep(pause_s)
        _start_on_same_port(self.broker)
        return time.monotonic() - down

    def stop(self) -> None:
        if self._observer is not None:
            try:
                self._observer.stop()
                self._observer.close()
            except Exception as exc:  # noqa: BLE001 - clean-up: the servers go next anyway
                log.warning("observer did not stop cleanly: %s", exc)
        for server in (self.broker, self.zookeeper):
            try:
                if server.pid is not None:
                    os.kill(server.pid, signal.SIGCONT)  # a frozen server must run to stop
                server.stop(timeout=30)
            except Exception as exc:  # noqa: BLE001 - clean-up: logged, the stack goes next
                log.warning("%s did not stop cleanly: %s", server, exc)
        self.stack.down()

    # -- Kafka ---------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int) -> None:
        self.admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout=60)
        deadline = time.monotonic() + 60
        while True:
            found = self.admin.list_topics(timeout=10).topics.get(topic)
            if found is not None and found.error is None and len(found.partitions) == partitions:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {topic} not in the broker's metadata with {partitions} partitions")
            time.sleep(0.2)

    def watermarks(self, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        """``partition -> (low, high)``, through a short-lived consumer (the admin client has no call)."""
        from confluent_kafka import Consumer

        consumer = Consumer({**self.kafka, "group.id": "soak-watermarks", "enable.auto.commit": False, "logger": log})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20) for p in range(partitions)}
        finally:
            consumer.close()

    def delete_records(self, topic: str, partition: int, below: int) -> int:
        """Delete the partition's records below ``below``; returns the new low watermark."""
        futures = self.admin.delete_records([TopicPartition(topic, partition, below)], operation_timeout=30)
        result = next(iter(futures.values())).result(timeout=60)
        return int(result.low_watermark)

    # -- the group, as ZooKeeper has it ----------------------------------------------------

    def observer(self, chroot: str) -> KazooClient:
        if self._observer is None:
            self._observer = KazooClient(hosts=f"{self.zk_address}{chroot}", timeout=30)
            self._observer.start(timeout=60)
        return self._observer

    def read(self, what: Callable[[KazooClient], T], chroot: str, timeout: float = 120.0) -> T:
        """``what(observer)``, retried until it succeeds (ZooKeeper may be down or frozen)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return what(self.observer(chroot))
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"ZooKeeper unreadable for {timeout} s: {exc}") from exc
                time.sleep(0.5)

    def recovery_remaining(self, chroot: str, group: str, topic: str) -> dict[int, int]:
        """Offsets left in each partition's recovery ranges, for partitions that have any."""

        def remaining(zk: KazooClient) -> dict[int, int]:
            ledger = RecoveryLedger(zk, GroupPaths(group), "soak-observer")
            left = {p: ledger.read(topic, p).record.remaining for p in ledger.partitions(topic)}
            return {p: n for p, n in left.items() if n}

        return self.read(remaining, chroot)

    def group_view(self, chroot: str, group: str, topic: str) -> dict[str, Any]:
        """Registered pids by consumer id, owners and committed offsets, read now."""
        return self.read(
            lambda zk: {
                "pids": consumer_pids(zk, group),
                "owners": owners(zk, topic, group),
                "committed": committed(zk, topic, group),
            },
            chroot,
        )
