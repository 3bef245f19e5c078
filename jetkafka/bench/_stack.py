"""Where a benchmark runs: a dev stack of its own, or the cluster named in a YAML file.

:class:`BenchCluster` hands the benchmarks what they need from either: the ZooKeeper connect
string and settings, librdkafka properties, topic creation and deletion, a fast bulk producer,
and ZooKeeper's own request counters (the ``mntr`` four-letter word). Everything a run creates
is named ``jetkafka-bench-<run id>-...`` and removed at the end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jetkafka.config import SparkConfig

log = logging.getLogger("jetkafka.bench")

# Producer settings for filling topics quickly (the figures measure consuming, not producing).
FAST_PRODUCER = {
    "linger.ms": 50,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none",
    "acks": 1,
}


@dataclass
class BenchCluster:
    """ZooKeeper and Kafka addresses plus helpers; built by :func:`open_cluster`."""

    zookeeper: Mapping[str, Any]  # the ``zookeeper:`` section (connect, session_timeout_s, auth)
    kafka: dict[str, Any]  # librdkafka properties for every client
    broker: str  # what serves Kafka, for the report
    local: bool  # a dev stack started by this run
    # The file's ``spark:`` section when run with --config (its master or Connect server runs the
    # Spark parts); None: a local[2] session in the bench's process.
    spark: SparkConfig | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="jetkafka-bench-")))
    keep_workdir: bool = False  # set when a part failed: its logs stay for a look
    _topics: list[str] = field(default_factory=list)
    _groups: list[str] = field(default_factory=list)
    _admin: Any = None

    # -- names -----------------------------------------------------------------------------

    def name(self, what: str) -> str:
        return f"jetkafka-bench-{self.run_id}-{what}"

    def group(self, what: str) -> str:
        name = self.name(what)
        self._groups.append(name)
        return name

    @property
    def zk_hosts(self) -> str:
        return str(self.zookeeper["connect"]).partition("/")[0]

    # -- Kafka -----------------------------------------------------------------------------

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(dict(self.kafka), logger=log)
        return self._admin

    def create_topic(self, what: str, partitions: int, timeout: float = 120.0) -> str:
        """A new topic ``jetkafka-bench-<run>-<what>``; returns once metadata lists every partition."""
        from confluent_kafka.admin import NewTopic

        topic = self.name(what)
        replication = 1 if self.local else -1  # -1: the cluster's default
        self.admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication)])[
            topic
        ].result(timeout=timeout)
        self._topics.append(topic)
        deadline = time.monotonic() + timeout
        while True:
            # All topics: asking for one by name would create it on some brokers.
            found = self.admin.list_topics(timeout=10).topics.get(topic)
            if found is not None and found.error is None and len(found.partitions) == partitions:
                return topic
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic}: metadata never showed {partitions} partitions")
            time.sleep(0.05)

    def fill(
        self, topic: str, events: int, size: int, partitions: int, progress: Any = None, first: int = 0
    ) -> float:
        """Write ``events`` values of ``size`` bytes round-robin over the partitions; returns seconds."""
        return fill_topic(self.kafka, topic, events, size, partitions, progress, first)

    def high_watermarks(self, topic: str, partitions: int) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self.kafka, "group.id": self.name("meta"), "logger": log})
        try:
            return {
                p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1])
                for p in range(partitions)
            }
        finally:
            consumer.close()

    # -- ZooKeeper ---------------------------------------------------------------------------

    def zk_client(self) -> Any:
        from jetkafka.config._schema import ZooKeeperAuth, ZooKeeperConfig
        from jetkafka.coordination._session import build_client, start_client

        auth = self.zookeeper.get("auth")
        config = ZooKeeperConfig(
            connect=str(self.zookeeper["connect"]),
            session_timeout_s=float(self.zookeeper.get("session_timeout_s", 10.0)),
            auth=ZooKeeperAuth(**auth) if auth else None,
        )
        client = build_client(config)
        start_client(client, config)
        return client

    def zk_counters(self) -> dict[str, int] | None:
        """ZooKeeper's ``mntr`` counters summed over the ensemble's servers; None if refused."""
        from jetkafka.devstack._zookeeper import four_letter_word

        totals: dict[str, int] = {}
        for item in self.zk_hosts.split(","):
            host, _, port = item.rpartition(":")
            reply = four_letter_word(host.strip("[]"), int(port), "mntr", timeout=2.0)
            if not reply or "zk_packets_received" not in reply:
                return None
            for line in reply.splitlines():
                key, _, value = line.partition("\t")
                if value.strip().lstrip("-").isdigit():
                    totals[key] = totals.get(key, 0) + int(value)
        return totals

    def zk_version(self) -> str:
        counters_host = self.zk_hosts.split(",")[0]
        host, _, port = counters_host.rpartition(":")
        from jetkafka.devstack._zookeeper import four_letter_word

        reply = four_letter_word(host.strip("[]"), int(port), "srvr", timeout=2.0) or ""
        for line in reply.splitlines():
            if line.startswith("Zookeeper version:"):
                # "3.9.5-293c895a8d96..., built on ..." -> 3.9.5
                return line.split(":", 1)[1].split(",")[0].strip().split("-")[0]
        return "unknown (srvr not answered)"

    # -- configuration of a channel ------------------------------------------------------------

    def channel_config(self, group: str, topic: str, **channel: Any) -> dict[str, Any]:
        """A jetkafka configuration (as a dict) for one channel of ``group`` on ``topic``."""
        zookeeper = {k: v for k, v in self.zookeeper.items() if v is not None}
        return {
            "zookeeper": zookeeper,
            "kafka": dict(self.kafka),
            "channel": {"group": group, "topics": [topic], **channel},
            "logging": {"level": "WARNING"},
        }

    # -- clean-up ----------------------------------------------------------------------------

    def cleanup(self) -> None:
        if self._topics:
            try:
                for future in self.admin.delete_topics(list(self._topics), operation_timeout=30).values():
                    with contextlib.suppress(Exception):
                        future.result(timeout=60)
            except Exception as exc:  # noqa: BLE001 - the stack may already be gone
                log.debug("topic clean-up failed: %s", exc)
            self._topics.clear()
        if not self.keep_workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)
        if self._groups and not self.local:
            with contextlib.suppress(Exception):
                client = self.zk_client()
                try:
                    for group in self._groups:
                        with contextlib.suppress(Exception):
                            client.delete(f"/consumers/{group}", recursive=True)
                finally:
                    client.stop()
                    client.close()
        self._admin = None


def fill_topic(
    kafka: Mapping[str, Any],
    topic: str,
    events: int,
    size: int,
    partitions: int,
    progress: Any = None,
    first: int = 0,
) -> float:
    """Produce ``events`` records of ``size`` bytes (an id, then padding), flushed; returns seconds."""
    from confluent_kafka import KafkaError, Producer

    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    producer = Producer({**kafka, **FAST_PRODUCER, "logger": log})
    pad = b"x" * size
    started = time.perf_counter()
    step = max(1, events // 100)
    for i in range(first, first + events):
        value = str(i).encode()
        value = value + pad[: size - len(value)]
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if (i - first) % step == 0:
            producer.poll(0)
            if progress is not None:
                progress(i - first, events)
    left = producer.flush(300)
    seconds = time.perf_counter() - started
    if left or errors:
        raise RuntimeError(f"producing to {topic} failed: {left} unsent, errors: {'; '.join(errors) or '-'}")
    return seconds


@contextlib.contextmanager
def open_cluster(config_path: str | os.PathLike[str] | None) -> Iterator[BenchCluster]:
    """The cluster of ``config_path``; without one, a dev stack in a temporary directory."""
    if config_path is not None:
        from jetkafka.config import load_config

        config = load_config(config_path)
        zk = config.zookeeper
        zookeeper: dict[str, Any] = {"connect": zk.connect, "session_timeout_s": zk.session_timeout_s}
        if zk.auth is not None:
            zookeeper["auth"] = {"credential": zk.auth.credential, "scheme": zk.auth.scheme}
        kafka = dict(config.kafka)
        cluster = BenchCluster(
            zookeeper, kafka, broker=f"Kafka at {kafka['bootstrap.servers']}", local=False, spark=config.spark
        )
        try:
            yield cluster
        finally:
            cluster.cleanup()
        return

    from jetkafka.devstack import DevStack

    state_dir = Path(tempfile.mkdtemp(prefix="jetkafka-bench-stack-"))
    stack = DevStack(state_dir, ephemeral=True)
    info = stack.up(zookeeper_port=0, broker_port=0)
    try:
        cluster = BenchCluster(
            {"connect": info.zookeeper},
            info.client_config(),
            broker=f"noida-db {_version('noida-db')} (local dev stack)",
            local=True,
        )
        try:
            yield cluster
        finally:
            cluster.cleanup()
    finally:
        stack.down()
        import shutil

        shutil.rmtree(state_dir, ignore_errors=True)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"
