"""Prometheus metrics scraped over HTTP from running channels, on a real ZooKeeper and broker."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, InboundChannel, PartitionSource
from jetkafka.channel._stats import BATCH_SECONDS_BUCKETS, ChannelStats
from jetkafka.devstack._ports import free_port
from jetkafka.errors import ConfigError
from tests.support.channels import RecordingProcessor, channel_config, values, wait_until
from tests.support.scrape import Samples, scrape, value


def partitions_in(samples: Samples, name: str) -> set[tuple[str, int]]:
    return {(dict(ls)["topic"], int(dict(ls)["partition"])) for (n, ls), _ in samples.items() if n == name}


def metrics_channel(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, processor: BatchEventProcessor, port: int, **channel: Any
) -> InboundChannel:
    data = channel_config(zk_connect, kafka_config, [topic], **channel)
    data["metrics"] = {"port": port, "watermark_interval_s": 0.2}
    return InboundChannel.from_dict(data, processor=processor)


class GatedProcessor(BatchEventProcessor):
    """Holds every batch until ``gate`` is set; counts what it processed."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.processed = 0

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        self.entered.set()
        assert self.gate.wait(60), "test never opened the gate"
        self.processed += len(events)
        return BatchResponse.advance()


def eventually(port: int, check: Callable[[Samples], bool], what: str) -> Samples:
    last: list[Samples] = []

    def ok() -> bool:
        last[:] = [scrape(port)]
        return check(last[0])

    try:
        wait_until(ok, timeout=60, what=what)
    except AssertionError:
        shown = {k: v for k, v in (last[0] if last else {}).items() if k[0].startswith("jetkafka_partition_")}
        raise AssertionError(f"timed out waiting for {what}; last scrape: {shown}") from None
    return last[0]


def test_lag_is_n_after_producing_n_and_zero_after_processing(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    port = free_port()
    processor = GatedProcessor()
    channel = metrics_channel(zk_connect, kafka_config, topic, processor, port)
    channel.start()
    try:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition taken")
        produce(topic, values(25, 1))
        labels = {"group": "g", "topic": topic, "partition": 0}
        samples = eventually(port, lambda s: value(s, "jetkafka_partition_lag", **labels) == 25, "lag 25")
        assert value(samples, "jetkafka_partition_high_watermark", **labels) == 25
        assert value(samples, "jetkafka_partition_low_watermark", **labels) == 0
        assert value(samples, "jetkafka_partition_committed_offset", **labels) == 0
        assert value(samples, "jetkafka_owned_partitions", group="g", consumer=channel.consumer_id) == 1

        processor.gate.set()
        samples = eventually(port, lambda s: value(s, "jetkafka_partition_lag", **labels) == 0, "lag 0")
        assert value(samples, "jetkafka_partition_committed_offset", **labels) == 25
        assert value(samples, "jetkafka_partition_events_consumed_total", **labels) == 25
        batches = value(samples, "jetkafka_partition_batches_total", response="advance", **labels)
        assert batches is not None and batches >= 1
        assert value(samples, "jetkafka_partition_batch_duration_seconds_count", **labels) == batches
        assert value(samples, "jetkafka_partition_batch_duration_seconds_bucket", le="+Inf", **labels) == batches
        instance = {"group": "g", "consumer": channel.consumer_id}
        assert value(samples, "jetkafka_zookeeper_connection_state", state="CONNECTED", **instance) == 1
        assert value(samples, "jetkafka_zookeeper_connection_state", state="LOST", **instance) == 0
        start_runs = value(samples, "jetkafka_rebalances_total", reason="start", **instance)
        assert start_runs is not None and start_runs >= 1
        # Every cause and reason is there from the start, at 0, so rate() works before the first.
        for cause in ("fenced", "session_expired", "not_held", "dropped"):
            assert value(samples, "jetkafka_commits_refused_total", cause=cause, **instance) == 0
        for reason in ("retention", "skipped", "truncated"):
            assert value(samples, "jetkafka_events_lost_total", reason=reason, **instance) == 0
        commits = value(samples, "jetkafka_commits_total", **instance)
        assert commits is not None and commits >= 1
        assert value(samples, "jetkafka_channel_paused", **instance) == 0

        channel.pause()
        samples = eventually(port, lambda s: value(s, "jetkafka_channel_paused", **instance) == 1, "paused")
        assert value(samples, "jetkafka_paused_partitions", **instance) == 1
    finally:
        processor.gate.set()
        channel.resume()  # a paused partition is released only once resumed
        channel.shutdown()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        scrape(port)


def test_commits_refused_by_fencing_are_counted(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    port = free_port()
    processor = GatedProcessor()
    channel = metrics_channel(zk_connect, kafka_config, topic, processor, port)
    channel.start()
    thief = KazooClient(hosts=zk_connect)
    thief.start(timeout=10)
    try:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition taken")
        produce(topic, values(5, 1))
        assert processor.entered.wait(30)
        # Another consumer takes the partition over while the batch is in hand, as after a
        # session expiry: one transaction swaps the owner node and bumps the fencing token.
        owner, offset = f"/consumers/g/owners/{topic}/0", f"/consumers/g/offsets/{topic}/0"
        data, stat = thief.get(offset)
        tx = thief.transaction()
        tx.delete(owner)
        tx.create(owner, b"thief", ephemeral=True)
        tx.set_data(offset, data, version=stat.version)
        assert not any(isinstance(r, Exception) for r in tx.commit())
        processor.gate.set()
        instance = {"group": "g", "consumer": channel.consumer_id}
        samples = eventually(
            port,
            lambda s: value(s, "jetkafka_commits_refused_total", cause="fenced", **instance) == 1,
            "one refused commit",
        )
        eventually(port, lambda s: value(s, "jetkafka_owned_partitions", **instance) == 0, "the partition dropped")
        assert thief.get(offset)[0] == data  # the refused commit wrote nothing
        assert value(samples, "jetkafka_partition_lag", group="g", topic=topic, partition=0) in (None, 5)
    finally:
        processor.gate.set()
        thief.stop()
        thief.close()
        channel.shutdown()


def test_released_partitions_leave_the_metrics(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=4)
    produce(topic, values(40, 4))
    port_a, port_b = free_port(), free_port()
    a = metrics_channel(zk_connect, kafka_config, topic, RecordingProcessor(), port_a)
    b = metrics_channel(zk_connect, kafka_config, topic, RecordingProcessor(), port_b)
    a.start()
    try:
        all_four = {(topic, p) for p in range(4)}
        eventually(port_a, lambda s: partitions_in(s, "jetkafka_partition_lag") == all_four, "a reports 4 partitions")
        b.start()
        try:
            wait_until(lambda: len(a.owned_partitions()) == 2 and len(b.owned_partitions()) == 2, what="2 + 2")
            samples_a = eventually(
                port_a, lambda s: partitions_in(s, "jetkafka_partition_committed_offset") == set(a.owned_partitions()),
                "a reports only its 2 partitions",
            )
            samples_b = eventually(
                port_b, lambda s: partitions_in(s, "jetkafka_partition_lag") == set(b.owned_partitions()),
                "b reports its 2 partitions",
            )
            for name in ("jetkafka_partition_events_consumed_total", "jetkafka_partition_batch_duration_seconds_count"):
                assert partitions_in(samples_a, name) <= set(a.owned_partitions())
            assert partitions_in(samples_a, "jetkafka_partition_lag").isdisjoint(partitions_in(samples_b, "jetkafka_partition_lag"))
            reasons = {dict(ls)["reason"] for (n, ls), _ in samples_a.items() if n == "jetkafka_rebalances_total"}
            assert "consumers_changed" in reasons
            assert not any(topic in r for r in reasons)
        finally:
            b.shutdown()
    finally:
        a.shutdown()


def test_channels_of_one_process_share_one_endpoint(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    t1, t2 = topic_factory(partitions=1), topic_factory(partitions=2)
    port = free_port()
    a = metrics_channel(zk_connect, kafka_config, t1, RecordingProcessor(), port)
    b = metrics_channel(zk_connect, kafka_config, t2, RecordingProcessor(), port, group="g2")
    a.start()
    b.start()
    try:
        samples = eventually(
            port,
            lambda s: partitions_in(s, "jetkafka_partition_lag") == {(t1, 0), (t2, 0), (t2, 1)},
            "both channels' partitions on one endpoint",
        )  # scrape() also asserts that no series appears twice
        assert value(samples, "jetkafka_owned_partitions", group="g", consumer=a.consumer_id) == 1
        assert value(samples, "jetkafka_owned_partitions", group="g2", consumer=b.consumer_id) == 2
        b.shutdown()
        samples = scrape(port)
        assert partitions_in(samples, "jetkafka_partition_lag") == {(t1, 0)}
        assert value(samples, "jetkafka_owned_partitions", group="g2", consumer=b.consumer_id) is None
    finally:
        b.shutdown()
        a.shutdown()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        scrape(port)


def test_a_taken_port_fails_start_naming_the_key(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        channel = metrics_channel(zk_connect, kafka_config, topic, RecordingProcessor(), port)
        with pytest.raises(ConfigError) as caught:
            channel.start()
    assert caught.value.key_path == "metrics.port"
    assert f"127.0.0.1:{port}" in caught.value.problem
    assert not channel.running


# -- the figures behind the metrics (no servers needed) ---------------------------------------------


def test_batch_histogram_buckets_are_cumulative_and_inclusive() -> None:
    stats = ChannelStats()
    key = ("t", 0)
    for seconds in (0.001, 0.002, 0.3, 100.0):
        stats.batch_done(key, 10, seconds, "advance")
    stats.batch_done(key, 5, 0.02, "revert")
    figures = stats.partition(key)
    buckets = dict(figures.batch_seconds.cumulative())
    assert buckets[0.001] == 1  # le is inclusive
    assert buckets[0.005] == 2
    assert buckets[0.025] == 3
    assert buckets[0.5] == 4
    assert buckets[BATCH_SECONDS_BUCKETS[-1]] == 4
    assert buckets[float("inf")] == 5
    assert figures.batch_seconds.total == pytest.approx(100.323)
    assert figures.events == 45
    assert figures.batches == {"advance": 4, "revert": 1}


def test_forget_drops_a_partition_but_keeps_totals() -> None:
    stats = ChannelStats()
    for key in (("t", 0), ("t", 1)):
        stats.batch_done(key, 3, 0.01, "advance")
        stats.error(key, "processor_raised")
        stats.committed(key, 3)
    stats.forget(("t", 0))
    assert set(stats.partitions()) == {("t", 1)}
    assert stats.partition(("t", 0)).events == 0
    summary = stats.summary()
    assert (summary["events"], summary["batches"], summary["errors"], summary["commits"]) == (6, 2, 2, 2)


def test_endpoint_also_serves_processor_and_process_metrics(zk_connect, kafka_config, topic_factory) -> None:
    from prometheus_client import Counter

    topic = topic_factory(partitions=1)
    port = free_port()
    marker = Counter("jetkafka_test_processor_marker", "a processor's own metric", registry=None)
    from prometheus_client import REGISTRY

    REGISTRY.register(marker)
    try:
        marker.inc(3)
        with metrics_channel(zk_connect, kafka_config, topic, RecordingProcessor(), port):
            samples = scrape(port)
        assert value(samples, "jetkafka_test_processor_marker_total") == 3
        assert value(samples, "process_resident_memory_bytes") is not None
    finally:
        REGISTRY.unregister(marker)
