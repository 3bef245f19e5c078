"""A lost ZooKeeper connection stops new batches at once, even while the rebalance thread is stuck.

The processor commits only now and then (``get_next`` between commits, as the Spark processor
and ``SimpleKafkaProcessor``'s periodic mode do), so its workers do not block in commits that
wait for ZooKeeper: only the channel's own state can stop them.

Injected: the only ZooKeeper server is stopped (its sockets close, so kazoo reports SUSPENDED
at once) while the process's rebalance thread is inside a synchronous ZooKeeper call, which
waits for as long as the connection is down; about 4 s later the server starts again.
Asserted: no batch starts from half a second after the stop until the server serves again
(connection states reach the channel directly, not through the rebalance thread's queue); the
channel goes on afterwards; every acknowledged id is delivered.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from jetkafka import BatchResponse, EventBatch, PartitionSource
from jetkafka.devstack import ZooKeeperServer
from tests.support.channels import channel_config
from tests.support.instances import Instance
from tests.support.load import AckedProducer, delivery_report, wait_delivered, wait_for

PARTITIONS = 4


def every_tenth_batch(source: PartitionSource, events: EventBatch) -> BatchResponse:
    return BatchResponse.advance() if events.first_offset % 200 < 20 else BatchResponse.get_next()


def test_new_batches_stop_when_zookeeper_drops_while_a_rebalance_is_stuck_in_a_call(
    tmp_path: Path, kafka_config: dict[str, Any], topic_factory: Any
) -> None:
    server = ZooKeeperServer(tmp_path / "zk")
    server.ends_with_parent = True
    server.start(timeout=90)
    topic = topic_factory(partitions=PARTITIONS)
    config = channel_config(f"{server.connect_string}/jk", kafka_config, [topic], threads=2, batch_max_events=20)
    config["zookeeper"]["session_timeout_s"] = 20
    producer = AckedProducer(kafka_config, topic, range(PARTITIONS), rate=400)
    instance = None
    try:
        instance = Instance(config, every_tenth_batch)
        channel, processor = instance.channel, instance.processor
        wait_for(lambda: len(channel.owned_partitions()) == PARTITIONS, 60, "every partition taken")
        wait_for(lambda: len(processor.batch_starts) > 50, 60, "steady batches")

        # A task of the rebalance thread that makes a ZooKeeper call while the server is down:
        # kazoo holds such a call until the connection is back.
        down = threading.Event()
        call_returned = threading.Event()

        def stuck_call() -> None:
            down.wait(30)
            wait_for(lambda: not instance.connected(), 30, "kazoo to see the drop")
            try:
                instance.client.exists("/")  # queued by kazoo until the connection is back
            except Exception:  # noqa: BLE001 - the outcome does not matter, only that the call returns
                pass  # the session may not survive a restart (see test_zookeeper_outages.startup_leak)
            finally:
                call_returned.set()

        instance.session.call(stuck_call)
        server.stop()
        stopped = time.monotonic()
        down.set()
        wait_for(lambda: not instance.connected(), 30, "the connection to drop")
        time.sleep(4.0)
        served = time.monotonic()
        server.start(timeout=60)
        wait_for(instance.connected, 60, "the connection back")
        assert call_returned.wait(30), "the rebalance thread's call never returned"
        acked = producer.stop()
        wait_delivered(processor.ids, acked, timeout=90)
    finally:
        producer.close()
        if instance is not None:
            instance.close()
        server.stop()

    during = [t for t, _, _ in processor.batch_starts if stopped + 0.5 <= t <= served]
    assert during == [], f"{len(during)} batches started while ZooKeeper was unreachable"
    assert [t for t, _, _ in processor.batch_starts if t > served], "no batch after the server came back"
    report = delivery_report(processor.ids(), acked)
    assert report.lost == [] and report.unexpected == [], str(report)
