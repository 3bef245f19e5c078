"""SimpleKafkaProcessor's three commit policies, on a real ZooKeeper and broker."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from jetkafka import EventBatch, SimpleKafkaProcessor
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from tests.support.channels import committed_offsets, make_channel, values, wait_until


class Collector:
    def __init__(self, zk: KazooClient | None = None, topic: str = "") -> None:
        self.ids: list[int] = []
        self.committed_at_delivery: list[int | None] = []
        self.lock = threading.Lock()
        self.zk, self.topic = zk, topic

    def __call__(self, events: EventBatch) -> None:
        if self.zk is not None:
            self.committed_at_delivery.append(committed_offsets(self.zk, "g", self.topic).get(0))
        with self.lock:
            self.ids.extend(int(e.value or b"-1") for e in events)


def test_every_batch_commits_after_each_batch(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))
    handler = Collector(zk, topic)
    proc = SimpleKafkaProcessor(handler, auto_advance="every-batch")
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 300})
    # Commit follows delivery: no handler call saw its own batch, or a later one, committed
    # (the previous batch's commit may still wait for channel.commit_interval_ms).
    seen = handler.committed_at_delivery
    assert len(seen) == 3 and all(c is not None and c <= 100 * i for i, c in enumerate(seen)), seen
    assert seen == sorted(seen)


def test_no_duplication_commits_before_delivery(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))
    handler = Collector(zk, topic)
    proc = SimpleKafkaProcessor(handler, auto_advance="no-duplication")
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: len(handler.ids) == 300)
    assert handler.committed_at_delivery == [100, 200, 300]


def test_no_duplication_does_not_retry_a_failed_handler(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(200, 1))
    seen: list[int] = []

    def handler(events: EventBatch) -> None:
        seen.append(events.first_offset)
        if events.first_offset == 0:
            raise RuntimeError("boom")

    proc = SimpleKafkaProcessor(handler, auto_advance="no-duplication")
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=100):
        wait_until(lambda: 100 in seen)
        time.sleep(0.5)
    assert seen == [0, 100]


@pytest.mark.parametrize("where", ["below the start", "past the end"])
def test_no_duplication_leaves_an_offset_out_of_range_to_the_channel(
    zk, zk_connect, kafka_config, topic_factory, produce, where: str
) -> None:
    """An offset the broker does not hold is not a failed handler: ``channel.on_out_of_range``
    moves the partition (to the low watermark; past the end, to the end), once, and the handler
    gets the records from there. Answered as a handler failure instead, the partition stays
    where it is and the same out-of-range turn comes back at once, for ever."""
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    store = OffsetStore(zk, GroupPaths("g"))
    if where == "below the start":
        store.write_unfenced(topic, 0, 10)
        admin = AdminClient(dict(kafka_config))  # kept: its futures end with it
        for future in admin.delete_records([TopicPartition(topic, 0, 50)]).values():
            future.result(timeout=30)
        expected = list(range(50, 100))
    else:
        store.write_unfenced(topic, 0, 150)  # 100..149 processed, then the log lost them
        expected = list(range(1000, 1005))
    handler = Collector()
    proc = SimpleKafkaProcessor(handler, auto_advance="no-duplication")
    with make_channel(zk_connect, kafka_config, topic, proc, on_out_of_range="earliest") as channel:
        if where == "past the end":
            wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 100}, timeout=10, what="the end committed")
            produce(topic, values(5, 1, start=1000))  # written after the loss: offsets 100..104
        wait_until(lambda: len(handler.ids) == len(expected), timeout=10, what=f"the records after the move ({where})")
        with channel.stats._lock:
            out_of_range = channel.stats.errors[((topic, 0), "offset_out_of_range")]
    assert sorted(handler.ids) == expected
    assert out_of_range == 1  # handled once, not turned over and over


def test_periodic_commits_on_interval_and_on_release(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(100, 1))
    handler = Collector()
    proc = SimpleKafkaProcessor(handler, auto_advance="periodic", interval_ms=60_000)
    channel = make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=10)
    channel.start()
    wait_until(lambda: len(handler.ids) == 100)
    time.sleep(0.3)
    assert committed_offsets(zk, "g", topic) == {0: 0}  # interval not reached: nothing committed yet
    channel.shutdown(timeout=10)
    assert committed_offsets(zk, "g", topic) == {0: 100}  # committed at release


def test_periodic_commits_when_idle(zk, zk_connect, kafka_config, topic_factory, produce) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(50, 1))
    proc = SimpleKafkaProcessor(Collector(), auto_advance="periodic", interval_ms=60_000)
    with make_channel(zk_connect, kafka_config, topic, proc, idle_ms=200):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 50}, what="commit on idle")


def test_handler_named_by_module_path(tmp_path, monkeypatch) -> None:
    (tmp_path / "myhandlers.py").write_text("def handle(events):\n    return len(events)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = SimpleKafkaProcessor("myhandlers:handle")
    assert proc.handler([]) == 0
    with pytest.raises(ValueError, match="auto_advance"):
        SimpleKafkaProcessor("myhandlers:handle", auto_advance="sometimes")  # type: ignore[arg-type]
