"""Fixtures shared by the whole suite: a real ZooKeeper and broker, topics, and records in them.

``cluster`` comes from the environment, Docker, or a local DevStack (see ``tests/support/cluster``).
Every test gets its own ZooKeeper chroot and its own topics, so tests never see each other's data.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tests.support.cluster import Cluster, cluster_from_env, devstack_cluster, docker_cluster, docker_requested

log = logging.getLogger(__name__)

# Fixtures that bring live servers: the shared ones, and the quick benchmark's own stack.
CLUSTER_FIXTURES = frozenset({"cluster", "quick_run"})

Record = tuple[int, Any, Any] | tuple[int, Any, Any, Sequence[tuple[str, bytes]] | dict[str, bytes] | None]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False, help="also run tests marked soak")


def pytest_configure(config: pytest.Config) -> None:
    cluster_from_env()  # a half-set environment is a usage error before anything runs


# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadscope`): each worker
# is a process of its own with its own session fixtures, so its own ZooKeeper and broker (in its
# own temporary directory, on ports the kernel picks), Spark session and Tansu broker. A worker
# is handed a whole scope at a time and runs it in order: every test of a module (so a
# module-scoped fixture starts once), or, below, every test of a directory, for a fixture they
# share per session or because no two of their tests should overlap.
XDIST_DIRECTORY_SCOPES = {
    "tests/bench/": "bench",  # one `jetkafka bench` run of Spark and latency (tests/bench/conftest.py)
    "tests/spark/": "spark",  # one Spark session; their subprocesses start Spark drivers of their own
    "tests/kafka_groups/": "kafka_groups",  # one Tansu broker
    "tests/faults/": "faults",  # they freeze, kill and restart servers of their own
}


def xdist_scope(nodeid: str) -> str:
    """The scope, of the test ``nodeid``, that one xdist worker runs whole."""
    module = nodeid.split("::", 1)[0]
    for directory, scope in XDIST_DIRECTORY_SCOPES.items():
        if module.startswith(directory):
            return scope
    return module


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, when it is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with the scopes of :func:`xdist_scope` (pytest-xdist's own: module or class)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return Scheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # A test that uses the shared servers needs a live ZooKeeper and broker: `-m "not
        # cluster"` leaves the unit tier. Tests starting servers of their own carry the marker
        # in their module.
        if CLUSTER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        # The marker, not the keyword: keywords include the names of the test's packages, so
        # every test under tests/soak (the checker's fast unit tests too) would match.
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """``.zookeeper`` and ``.bootstrap`` (``host:port`` each) of servers shared by the session."""
    from_env = cluster_from_env()
    if from_env is not None:
        yield from_env
    elif docker_requested():
        with docker_cluster() as found:
            yield found
    else:
        with devstack_cluster(tmp_path_factory.mktemp("devstack")) as found:
            yield found


@pytest.fixture
def zk_connect(cluster: Cluster) -> Iterator[str]:
    """A connect string chrooted to a fresh node of its own, e.g. ``127.0.0.1:2181/t-1a2b3c4d``."""
    chroot = f"/t-{uuid.uuid4().hex[:8]}"
    client = KazooClient(hosts=cluster.zookeeper)
    client.start(timeout=15)
    try:
        client.create(chroot)
        yield f"{cluster.zookeeper}{chroot}"
        with contextlib.suppress(Exception):
            client.delete(chroot, recursive=True)
    finally:
        client.stop()
        client.close()


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    """A plain client rooted in the test's chroot, to inspect what channels wrote."""
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def kafka_config(cluster: Cluster) -> dict[str, Any]:
    """librdkafka properties for the session's broker (a fresh dict per test)."""
    return cluster.client_config()


@pytest.fixture
def topic_factory(kafka_config: dict[str, Any]) -> Iterator[Callable[..., str]]:
    """``topic_factory(partitions=12, name=None) -> name``: a new topic, deleted after the test.

    Returns once the broker's metadata lists every partition.
    """
    admin = AdminClient({**kafka_config, "logger": log})
    created: list[str] = []

    def create(partitions: int = 12, name: str | None = None) -> str:
        topic = name or f"t-{uuid.uuid4().hex[:12]}"
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
            topic
        ].result(timeout=30)
        created.append(topic)
        deadline = time.monotonic() + 30
        while True:
            # Listing all topics: asking for one by name would create it on some brokers.
            metadata = admin.list_topics(timeout=10)
            found = metadata.topics.get(topic)
            if found is not None and found.error is None and len(found.partitions) == partitions:
                return topic
            if time.monotonic() > deadline:
                have = len(found.partitions) if found is not None else "no"
                raise AssertionError(f"topic {topic}: metadata shows {have} of {partitions} partitions")
            time.sleep(0.05)

    yield create
    if created:
        for topic, future in admin.delete_topics(created, operation_timeout=10).items():
            try:
                future.result(timeout=15)
            except Exception as exc:  # noqa: BLE001 - clean-up only: logged
                log.warning("could not delete topic %s: %s", topic, exc)


@pytest.fixture
def produce(kafka_config: dict[str, Any]) -> Iterator[Callable[[str, Iterable[Record]], list[int]]]:
    """``produce(topic, records) -> offsets``: write and flush records, asserting all landed.

    A record is ``(partition, key, value)`` or ``(partition, key, value, headers)``. The returned
    list holds each record's offset, in the order given.
    """
    producer = Producer({**kafka_config, "linger.ms": 5, "logger": log})

    def send(topic: str, records: Iterable[Record]) -> list[int]:
        offsets: list[int | None] = []
        errors: list[str] = []

        def delivered(index: int) -> Callable[[KafkaError | None, Message], None]:
            def callback(err: KafkaError | None, msg: Message) -> None:
                if err is not None:
                    errors.append(f"record {index} to {topic}[{msg.partition()}]: {err}")
                else:
                    offsets[index] = msg.offset()

            return callback

        for index, record in enumerate(records):
            partition, key, value, *rest = record
            headers = rest[0] if rest else None
            offsets.append(None)
            while True:
                try:
                    producer.produce(
                        topic, value=value, key=key, partition=partition, headers=headers,
                        on_delivery=delivered(index),
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
        remaining = producer.flush(60)
        assert remaining == 0, f"{remaining} records to {topic} still undelivered after 60 s"
        assert not errors, "delivery failed:\n" + "\n".join(errors[:20])
        missing = [i for i, offset in enumerate(offsets) if offset is None]
        assert not missing, f"no delivery report for records {missing[:20]}"
        return [offset for offset in offsets if offset is not None]

    yield send
    producer.flush(10)
