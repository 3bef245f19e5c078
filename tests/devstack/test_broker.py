"""The local broker (noida-db) and the fixtures built on it: real produce, fetch and restarts."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from jetkafka.devstack import LocalBroker, ServerProcess, client_config
from jetkafka.devstack import _broker as broker_module
from jetkafka.errors import DevStackError

# Starts servers of its own: a live ZooKeeper and broker (see tests/conftest.py).
pytestmark = pytest.mark.cluster


def _consume_all(config: dict[str, Any], topic: str, partitions: int, expected: int) -> list[Any]:
    consumer = Consumer({**config, "group.id": "devstack-tests", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        messages: list[Any] = []
        deadline = time.monotonic() + 30
        while len(messages) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                assert message.error() is None, message.error()
                messages.append(message)
        return messages
    finally:
        consumer.close()


def _watermarks(config: dict[str, Any], topic: str, partitions: int) -> list[tuple[int, int]]:
    consumer = Consumer({**config, "group.id": "devstack-tests"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
    finally:
        consumer.close()


def test_client_config_accepts_any_response_size() -> None:
    config = client_config("127.0.0.1:9092")
    assert config["bootstrap.servers"] == "127.0.0.1:9092"
    assert int(config["receive.message.max.bytes"]) >= 100_000_000


def test_thousand_records_round_trip(
    kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Callable[..., list[int]]
) -> None:
    topic = topic_factory(partitions=12)
    records = [(i % 12, f"k{i}".encode(), f"v{i}".encode(), [("n", str(i).encode())]) for i in range(1000)]
    offsets = produce(topic, records)
    # Per partition, offsets count up from 0 in the order the records were given.
    for partition in range(12):
        mine = [offsets[i] for i in range(partition, 1000, 12)]
        assert mine == list(range(len(mine)))

    expected = {p: len(range(p, 1000, 12)) for p in range(12)}
    assert _watermarks(kafka_config, topic, 12) == [(0, expected[p]) for p in range(12)]

    messages = _consume_all(kafka_config, topic, 12, 1000)
    assert len(messages) == 1000
    seen = {(m.partition(), m.offset()): m for m in messages}
    assert len(seen) == 1000
    for i, (partition, key, value, headers) in enumerate(records):
        message = seen[(partition, offsets[i])]
        assert message.key() == key and message.value() == value
        assert message.headers() == headers


def test_data_survives_a_clean_restart(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "broker")
    started = time.monotonic()
    broker.start()
    assert time.monotonic() - started < 10
    try:
        config = broker.client_config()
        admin = AdminClient(config)
        admin.create_topics([NewTopic("kept", num_partitions=3, replication_factor=1)])["kept"].result(10)
        producer = Producer(config)
        for i in range(300):
            producer.produce("kept", value=str(i).encode(), partition=i % 3)
        assert producer.flush(30) == 0
        assert (tmp_path / "broker" / "broker.pid").exists()

        port, pid = broker.port, broker.pid
        broker.restart()
        assert broker.port == port and broker.pid != pid and broker.is_running()

        assert _watermarks(config, "kept", 3) == [(0, 100)] * 3
        values = sorted(int(m.value()) for m in _consume_all(config, "kept", 3, 300))
        assert values == list(range(300))
    finally:
        broker.stop()
    assert not broker.is_running()
    assert not (tmp_path / "broker" / "broker.pid").exists()


def test_missing_binary_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = broker_module.importlib.util.find_spec
    monkeypatch.setattr(
        broker_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "noida_db" else real_find_spec(name, *a),
    )
    with pytest.raises(DevStackError) as caught:
        LocalBroker(tmp_path / "broker").start()
    assert "install the devstack extra: pip install 'jetkafka[devstack]'" in str(caught.value)


class _Stubborn(ServerProcess):
    """A real process that ignores SIGINT, as a wedged broker would."""

    name = "stubborn"
    stop_signal = signal.SIGINT

    def command(self) -> list[str]:
        code = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
        return [sys.executable, "-c", code]

    def probe(self) -> bool:
        return "up" in self.output_path.read_text()


def test_stop_kills_a_server_that_ignores_its_stop_signal(tmp_path: Path) -> None:
    server = _Stubborn(tmp_path)
    server.start(timeout=20)
    record = server.record
    assert record is not None
    started = time.monotonic()
    server.stop(timeout=0.5)
    assert not server.is_running() and not record.is_alive()
    assert time.monotonic() - started < 5
