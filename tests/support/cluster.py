"""Where the test suite finds a ZooKeeper and a Kafka-protocol broker.

Three sources, first match wins:

1. ``JETKAFKA_TEST_ZOOKEEPER`` and ``JETKAFKA_TEST_BOOTSTRAP``: servers somebody else runs.
2. ``JETKAFKA_TEST_DOCKER=1``: containers from the ``zookeeper`` and ``apache/kafka`` images,
   through testcontainers (the Docker engine must be reachable, or the run fails).
3. Otherwise a :class:`~jetkafka.devstack.DevStack` in a temporary directory: the same code
   ``jetkafka dev up`` runs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jetkafka.devstack import DevStack, client_config, free_port
from jetkafka.devstack._zookeeper import four_letter_word

ENV_ZOOKEEPER = "JETKAFKA_TEST_ZOOKEEPER"
ENV_BOOTSTRAP = "JETKAFKA_TEST_BOOTSTRAP"
ENV_DOCKER = "JETKAFKA_TEST_DOCKER"
ENV_KAFKA_IMAGE = "JETKAFKA_TEST_KAFKA_IMAGE"
ENV_ZOOKEEPER_IMAGE = "JETKAFKA_TEST_ZOOKEEPER_IMAGE"

DEFAULT_KAFKA_IMAGE = "apache/kafka:3.9.1"
DEFAULT_ZOOKEEPER_IMAGE = "zookeeper:3.9"


@dataclass(frozen=True)
class Cluster:
    """Addresses of the servers the tests talk to."""

    zookeeper: str
    bootstrap: str
    source: str  # "env", "docker" or "devstack"

    def client_config(self) -> dict[str, Any]:
        return client_config(self.bootstrap)


def cluster_from_env() -> Cluster | None:
    """The cluster named by the environment, ``None`` if neither variable is set."""
    zookeeper = os.environ.get(ENV_ZOOKEEPER, "").strip()
    bootstrap = os.environ.get(ENV_BOOTSTRAP, "").strip()
    if not zookeeper and not bootstrap:
        return None
    if not (zookeeper and bootstrap):
        missing = ENV_BOOTSTRAP if zookeeper else ENV_ZOOKEEPER
        given = ENV_ZOOKEEPER if zookeeper else ENV_BOOTSTRAP
        raise pytest.UsageError(
            f"{given} is set but {missing} is not: set both (host:port each) to test against "
            "running servers, or neither to start a local stack"
        )
    return Cluster(zookeeper=zookeeper, bootstrap=bootstrap, source="env")


def docker_requested() -> bool:
    return os.environ.get(ENV_DOCKER, "").strip().lower() in {"1", "true", "yes"}


@contextlib.contextmanager
def devstack_cluster(state_dir: Path) -> Iterator[Cluster]:
    """A DevStack in ``state_dir``, stopped on exit whatever happened."""
    stack = DevStack(state_dir, ephemeral=True)
    try:
        info = stack.up()
        yield Cluster(zookeeper=info.zookeeper, bootstrap=info.bootstrap_servers, source="devstack")
    finally:
        stack.down()


@contextlib.contextmanager
def docker_cluster(timeout: float = 120.0) -> Iterator[Cluster]:
    """A ZooKeeper container and a single-node KRaft Kafka container, removed on exit."""
    try:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.docker_client import DockerClient
    except ImportError:
        pytest.fail(f"{ENV_DOCKER}=1 needs testcontainers: pip install 'jetkafka[dev]'", pytrace=False)
    unreachable = None
    try:
        docker_host = DockerClient()
        docker_host.client.ping()
    except Exception as exc:  # noqa: BLE001 - docker.errors.DockerException and connection errors alike
        unreachable = str(exc)
    if unreachable is not None:  # failing outside the handler keeps the report to one line
        pytest.fail(
            f"{ENV_DOCKER}=1 but no Docker engine is reachable ({unreachable}); start Docker or "
            f"unset {ENV_DOCKER} to use the local stack",
            pytrace=False,
        )
    host = docker_host.host()
    # Kafka must advertise the address clients reach it on, so the host port is fixed before
    # the container starts rather than picked by Docker.
    kafka_port = free_port()
    zookeeper = (
        DockerContainer(os.environ.get(ENV_ZOOKEEPER_IMAGE, DEFAULT_ZOOKEEPER_IMAGE))
        .with_exposed_ports(2181)
        .with_env("ZOO_4LW_COMMANDS_WHITELIST", "srvr,ruok,mntr")
        .with_env("ZOO_ADMINSERVER_ENABLED", "false")
    )
    kafka = (
        DockerContainer(os.environ.get(ENV_KAFKA_IMAGE, DEFAULT_KAFKA_IMAGE))
        .with_bind_ports(9092, kafka_port)
        .with_envs(
            KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_LISTENERS="PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://{host}:{kafka_port}",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
        )
    )
    with contextlib.ExitStack() as stack:
        zookeeper.start()
        stack.callback(zookeeper.stop)
        kafka.start()
        stack.callback(kafka.stop)
        zk_host = zookeeper.get_container_host_ip()
        zk_port = int(zookeeper.get_exposed_port(2181))
        bootstrap = f"{host}:{kafka_port}"
        _wait_for_containers(zk_host, zk_port, bootstrap, timeout)
        yield Cluster(zookeeper=f"{zk_host}:{zk_port}", bootstrap=bootstrap, source="docker")


def _wait_for_containers(zk_host: str, zk_port: int, bootstrap: str, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    while "Mode:" not in (four_letter_word(zk_host, zk_port) or ""):
        if time.monotonic() > deadline:
            pytest.fail(f"ZooKeeper container at {zk_host}:{zk_port} not serving", pytrace=False)
        time.sleep(0.5)
    admin = AdminClient(client_config(bootstrap))
    while True:
        try:
            if admin.list_topics(timeout=2).brokers:
                return
        except Exception:  # noqa: BLE001 - not answering yet, whatever the error: poll until the deadline
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"Kafka container at {bootstrap} not answering metadata", pytrace=False)
        time.sleep(0.5)
