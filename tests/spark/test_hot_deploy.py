"""A hot deploy that resubscribes a running Spark channel (``channel.threads`` 2 -> 1, a real
edit of its YAML file while events keep coming): micro-batches commit after the resubscribe,
the shutdown that follows settles every partition, and every event is in the output once.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import yaml

from examples.pipeline.events import EVENT_SCHEMA, encode, generate_events
from jetkafka.channel import InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.spark import SparkMicroBatchProcessor
from tests.spark.helpers import id_writer, read_ids
from tests.support.channels import channel_config, wait_until

PARTITIONS = 4
MAX_EVENTS = 40_000


class Producer(threading.Thread):
    """Produces events in steps of 100 (round robin) until stopped: load through the resubscribe."""

    def __init__(self, produce: Any, topic: str) -> None:
        super().__init__(name="test-producer", daemon=True)
        self.produce, self.topic = produce, topic
        self.events = generate_events(MAX_EVENTS, seed=21)
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set() and self.sent < MAX_EVENTS:
                chunk = self.events[self.sent : self.sent + 100]
                self.produce(self.topic, [((self.sent + i) % PARTITIONS, None, encode(e)) for i, e in enumerate(chunk)])
                self.sent += len(chunk)
                self.stop.wait(0.1)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_resubscribe_keeps_the_micro_batches_committing(spark, zk, zk_connect, kafka_config, topic_factory, produce, tmp_path, caplog) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    out = str(tmp_path / "events")
    config = channel_config(zk_connect, kafka_config, [topic], threads=2, batch_max_events=100)
    path = tmp_path / "spark.yaml"
    path.write_text(yaml.safe_dump(config))
    processor = SparkMicroBatchProcessor(
        id_writer(out), value_format="json", schema=EVENT_SCHEMA, max_events=2_000, max_interval_ms=300, spark=spark
    )
    channel = InboundChannel.from_yaml(path, processor=processor)
    store = OffsetStore(zk, GroupPaths("g"))
    producer = Producer(produce, topic)
    channel.start()
    try:
        channel.watch()
        producer.start()
        wait_until(lambda: processor.stats()["batches"] >= 2, timeout=120, what="micro-batches under load")
        # The edit an operator makes: written to a temporary file, renamed over the original.
        edited = {**config, "channel": {**config["channel"], "threads": 1}}
        tmp = path.with_suffix(".swp")
        tmp.write_text(yaml.safe_dump(edited))
        os.replace(tmp, path)
        wait_until(lambda: channel.config.channel.threads == 1 and channel.running, timeout=120, what="the resubscribe")
        at_resubscribe = producer.sent, processor.stats()["batches"]
        wait_until(
            lambda: processor.stats()["batches"] >= at_resubscribe[1] + 2 and producer.sent > at_resubscribe[0],
            timeout=120,
            what="micro-batches committed after the resubscribe, events still coming",
        )
        producer.stop.set()
        producer.join(60)
        assert producer.error is None
        wait_until(
            lambda: sum(store.read_all(topic).values()) == producer.sent, timeout=180, what="every event committed"
        )
        assert channel.shutdown(), "the shutdown after the resubscribe timed out"
    finally:
        producer.stop.set()
        if channel.running:
            channel.shutdown()
    assert "released before its micro-batch committed" not in caplog.text
    ids = [i for i, _ in read_ids(out)]
    sent = producer.sent
    assert len(ids) == sent, f"{len(ids) - len(set(ids))} duplicates, {sent - len(set(ids))} missing"
    assert set(ids) == {e["id"] for e in producer.events[:sent]}
