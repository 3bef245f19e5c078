"""What a partition under ``ordering: key`` shows while one key holds its commit point: the
snapshot's lane figures and the Prometheus gauges, scraped over HTTP."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, InboundChannel, PartitionSource, parse_config
from jetkafka.devstack._ports import free_port
from jetkafka.ops._status import group_status, render_status
from tests.support.channels import channel_config, wait_until
from tests.support.scrape import scrape, value


class OneKeyHeld(BatchEventProcessor):
    """Holds every batch with a record of key ``k0`` until ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.done: set[int] = set()
        self.lock = threading.Lock()

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if any(e.key == b"k0" for e in events):
            assert self.release.wait(60), "the test never released key k0"
        with self.lock:
            self.done.update(e.offset for e in events)
        return BatchResponse.advance()


def test_a_held_key_shows_in_the_lane_figures_and_the_gauges(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str],
    produce: Callable[[str, list[tuple[int, bytes, bytes]]], list[int]],
) -> None:
    topic = topic_factory(partitions=1)
    # Offset 0 is k0's: held, it holds the commit point at 0 while 4 other keys go on (with more
    # threads than keys, no batch holds two keys).
    produce(topic, [(0, f"k{i % 5}".encode(), str(i).encode()) for i in range(100)])
    processor = OneKeyHeld()
    port = free_port()
    data = channel_config(zk_connect, kafka_config, [topic], ordering="key", threads=8, max_in_flight_per_partition=60)
    data["metrics"] = {"port": port, "watermark_interval_s": 0.2}
    channel = InboundChannel.from_dict(data, processor=processor)
    channel.start()
    try:
        # The other keys' records up to the bound of open records finish; k0's stay.
        wait_until(lambda: len(processor.done) == 48, what="the 48 records of the other keys within the bound")
        time.sleep(0.5)
        (snapshot,) = channel.partitions()
        lanes = snapshot.lanes
        assert lanes is not None and lanes.ordering == "key"
        assert lanes.open == 60  # the bound: no more taken while k0 holds the commit point
        assert 1 <= lanes.in_flight <= 12  # k0's held batch (its other records of the 60 wait behind it)
        assert lanes.finished_above == 48
        assert lanes.oldest_unfinished_s >= 0.5
        assert snapshot.committed == 0 and snapshot.position == 0
        samples = scrape(port)
        labels = {"topic": topic, "partition": 0}
        assert value(samples, "jetkafka_partition_open_records", **labels) == 60
        assert value(samples, "jetkafka_partition_finished_above_commit_records", **labels) == 48
        oldest = value(samples, "jetkafka_partition_oldest_unfinished_seconds", **labels)
        assert oldest is not None and oldest >= 0.5
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=10) as response:
            status = json.load(response)
        (part,) = [p for g in status["groups"] for p in g["partitions"] if p["topic"] == topic]
        assert part["ordering"]["mode"] == "key"
        assert (part["ordering"]["open"], part["ordering"]["finished_above_commit"]) == (60, 48)
        # jetkafka status, from ZooKeeper alone: the committed map, in a column of its own.
        config = parse_config(data)
        wait_until(lambda: group_status(config).partitions[0].finished_above == 48, what="the map in jetkafka status")
        table = render_status(group_status(config)).splitlines()
        header = next(line for line in table if line.startswith("TOPIC"))
        row = next(line for line in table if line.startswith(topic))
        assert header.split()[3:6] == ["COMMITTED", "DONE", "ABOVE"] and row.split()[3:5] == ["0", "48"]
        assert any(line.startswith("DONE ABOVE: offsets above COMMITTED already processed") for line in table)
        processor.release.set()
        wait_until(lambda: len(processor.done) == 100, what="every record once k0 is released")
        wait_until(lambda: channel.partitions()[0].committed == 100, what="the commit point at the end")
        (snapshot,) = channel.partitions()
        assert snapshot.lanes is not None
        assert (snapshot.lanes.open, snapshot.lanes.in_flight, snapshot.lanes.finished_above) == (0, 0, 0)
    finally:
        processor.release.set()
        channel.shutdown()
