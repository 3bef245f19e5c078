"""Liveness and readiness (jetkafka.ops._health): the verdicts on fake channels, and /healthz and
/readyz of real channels through pause, stop and a ZooKeeper outage."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jetkafka import InboundChannel
from jetkafka.channel._stats import ChannelStats
from jetkafka.config import parse_config
from jetkafka.devstack import ZooKeeperServer
from jetkafka.devstack._ports import free_port
from jetkafka.ops._health import PartitionCounts, channel_readiness, describe_failing, liveness, readiness
from tests.channel.test_failures import PoisonAware, records_with_poison
from tests.support.channels import RecordingProcessor, channel_config, wait_until


class FakeChannel:
    """What the checks read of a channel before they go to ZooKeeper."""

    def __init__(self, state: str = "CONNECTED", paused: bool = False, threads: int = 2, consumer: str = "c1") -> None:
        self.config = parse_config(
            {
                "zookeeper": {"connect": "127.0.0.1:1"},
                "kafka": {"bootstrap.servers": "127.0.0.1:1"},
                "channel": {"group": "g", "topics": ["t"], "threads": threads},
            }
        )
        self.consumer_id = consumer
        self.paused = paused
        self.stats = ChannelStats()
        self._state = state
        self.not_fetching: str | None = None
        self.metadata_error: Exception | None = None

    def zookeeper_state(self) -> str:
        return self._state

    def fetching(self) -> str | None:
        return self.not_fetching

    def partition_counts(self, timeout: float = 10.0) -> dict[str, int]:
        if self.metadata_error is not None:
            raise self.metadata_error
        return {"t": 1}

    @property
    def zookeeper(self) -> Any:
        raise AssertionError("the check must not read ZooKeeper here")


def no_counts(topics: Any) -> dict[str, int]:
    raise AssertionError("the check must not ask the brokers here")


def test_live_when_every_loop_runs() -> None:
    names = ["MainThread", "jetkafka-fetcher", "jetkafka-worker-0", "jetkafka-worker-1", "jetkafka-rebalance"]
    verdict = liveness([FakeChannel()], lambda: names)  # type: ignore[list-item]
    assert verdict.ok and verdict.status == 200
    assert verdict.body["reason"] == "all loops are running"
    assert verdict.body["loops"]["workers"] == {"running": 2, "wanted": 2}


def test_not_live_names_each_missing_loop() -> None:
    names = ["jetkafka-worker-0", "jetkafka-rebalance"]
    verdict = liveness([FakeChannel()], lambda: names)  # type: ignore[list-item]
    assert not verdict.ok and verdict.status == 503
    assert verdict.body["reason"] == "loops not running: fetcher, workers"


def test_two_channels_need_two_fetchers() -> None:
    names = ["jetkafka-fetcher", "jetkafka-rebalance"] + [f"jetkafka-worker-{i}" for i in (0, 1, 0, 1)]
    channels = [FakeChannel(consumer="a"), FakeChannel(consumer="b")]
    assert liveness(channels, lambda: names).body["reason"] == "loops not running: fetcher"  # type: ignore[arg-type]
    assert liveness(channels, lambda: [*names, "jetkafka-fetcher"]).ok  # type: ignore[arg-type]


def test_no_channel_is_neither_live_nor_ready() -> None:
    assert not liveness([]).ok
    verdict = readiness([], lambda c: PartitionCounts(no_counts))
    assert not verdict.ok and verdict.body["reason"] == "no channel is attached to this endpoint"


def test_not_ready_without_zookeeper_whatever_else() -> None:
    ok, entry = channel_readiness(FakeChannel(state="SUSPENDED", paused=True), PartitionCounts(no_counts))  # type: ignore[arg-type]
    assert not ok and entry["reason"] == "ZooKeeper session SUSPENDED"


def test_paused_is_ready_with_reason_paused() -> None:
    verdict = readiness([FakeChannel(paused=True)], lambda c: PartitionCounts(no_counts))  # type: ignore[list-item]
    assert verdict.ok and verdict.body["reason"] == "paused"
    assert verdict.body["channels"][0]["paused"] is True


def test_not_ready_before_the_first_rebalance() -> None:
    verdict = readiness([FakeChannel()], lambda c: PartitionCounts(no_counts))  # type: ignore[list-item]
    assert not verdict.ok
    assert verdict.body["reason"] == "g/c1: first rebalance not done yet"


def test_not_ready_while_its_consumer_reaches_no_broker() -> None:
    channel = FakeChannel()
    channel.not_fetching = "no broker reachable since 12:00:00"
    channel.metadata_error = ConnectionError("connection refused")
    verdict = readiness([channel], lambda c: PartitionCounts(no_counts))  # type: ignore[list-item]
    assert not verdict.ok
    assert verdict.body["reason"] == (
        "g/c1: its consumer does not fetch: no broker reachable since 12:00:00 (connection refused)"
    )
    # librdkafka never says a broker is back: a metadata answer does, and the checks go on.
    channel.metadata_error = None
    verdict = readiness([channel], lambda c: PartitionCounts(no_counts))  # type: ignore[list-item]
    assert verdict.body["reason"] == "g/c1: first rebalance not done yet"


def test_partition_counts_are_cached_for_their_ttl() -> None:
    asked: list[list[str]] = []

    def lookup(topics: Any) -> dict[str, int]:
        asked.append(list(topics))
        return {t: 3 for t in topics}

    counts = PartitionCounts(lookup, ttl=60)
    assert counts.get(["a"]) == {"a": 3}
    assert counts.get(["a", "b"]) == {"a": 3, "b": 3}
    assert counts.get(["a", "b"]) == {"a": 3, "b": 3}
    assert asked == [["a"], ["b"]]


# -- on a real group ---------------------------------------------------------------------------


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def probed_channel(zk_connect: str, kafka_config: dict[str, Any], topic: str, port: int) -> InboundChannel:
    data = channel_config(zk_connect, kafka_config, [topic])
    data["metrics"] = {"port": port}
    return InboundChannel.from_dict(data, processor=RecordingProcessor())


def ready_with(port: int, reason: str) -> Callable[[], bool]:
    def check() -> bool:
        status, body = probe(port, "/readyz")
        return status == 200 and body["reason"] == reason

    return check


def test_probes_follow_a_group_of_two_through_pause_and_stop(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=4)
    ports = [free_port(), free_port()]
    channels = [probed_channel(zk_connect, kafka_config, topic, port) for port in ports]
    stopped: list[InboundChannel] = []
    try:
        for channel in channels:
            channel.start()
        # (a) running: live, and ready once each holds its even share of 4.
        for port, channel in zip(ports, channels, strict=True):
            wait_until(ready_with(port, "holds its share"), 60, f"{channel.consumer_id} ready")
            status, body = probe(port, "/healthz")
            assert status == 200 and body["reason"] == "all loops are running", body
            ready = probe(port, "/readyz")[1]["channels"][0]
            assert ready["consumer"] == channel.consumer_id and ready["zookeeper"] == "CONNECTED"
            assert ready["topics"][topic]["quota"] == 2
            assert ready["topics"][topic]["held"] == sorted(p for _, p in channel.owned_partitions())

        # (b) paused: still ready, saying why; the other one is untouched.
        channels[0].pause()
        wait_until(ready_with(ports[0], "paused"), 30, "paused instance ready with reason paused")
        status, body = probe(ports[0], "/readyz")
        assert status == 200 and body["channels"][0]["paused"] is True
        status, body = probe(ports[1], "/readyz")
        assert status == 200 and body["reason"] == "holds its share", body
        assert probe(ports[0], "/healthz")[0] == 200
        channels[0].resume()

        # (c) a stopped channel no longer answers; the other is not ready until it holds all 4.
        channels[1].shutdown()
        stopped.append(channels[1])
        try:
            probe(ports[1], "/readyz")
            raise AssertionError("a stopped channel's endpoint still answers")
        except urllib.error.URLError:
            pass
        wait_until(ready_with(ports[0], "holds its share"), 60, "the survivor ready again")
        assert probe(ports[0], "/readyz")[1]["channels"][0]["topics"][topic]["held"] == [0, 1, 2, 3]
    finally:
        for channel in channels:
            if channel not in stopped:
                channel.shutdown()


def test_lost_zookeeper_makes_an_instance_not_ready_but_keeps_it_live(
    tmp_path: Path, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    server = ZooKeeperServer(tmp_path / "zk")
    server.ends_with_parent = True
    server.start(timeout=90)
    topic = topic_factory(partitions=2)
    port = free_port()
    data = channel_config(f"{server.connect_string}/jk", kafka_config, [topic])
    data["zookeeper"]["session_timeout_s"] = 20
    data["metrics"] = {"port": port}
    channel = InboundChannel.from_dict(data, processor=RecordingProcessor())
    try:
        channel.start()
        wait_until(ready_with(port, "holds its share"), 60, "ready")
        server.stop()

        def not_ready() -> bool:
            status, body = probe(port, "/readyz")
            return status == 503 and body["channels"][0]["zookeeper"] != "CONNECTED"

        wait_until(not_ready, 30, "not ready while ZooKeeper is down")
        status, body = probe(port, "/readyz")
        assert status == 503
        assert body["reason"].startswith(f"g/{channel.consumer_id}: ZooKeeper session ")
        # A ZooKeeper outage is no reason to restart the process: it stays live.
        assert probe(port, "/healthz")[0] == 200
        server.start(timeout=60)
        wait_until(ready_with(port, "holds its share"), 90, "ready again once ZooKeeper is back")
    finally:
        channel.shutdown(timeout=30)
        server.stop()


# -- a partition that does not move on ----------------------------------------------------------


def test_a_poison_record_keeps_the_instance_live_and_ready_and_says_so(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    """A restart would not help (the record fails the same way after it) and would hand the
    poison to another instance; not ready would stall rolling updates. Both probes stay 200, and
    /readyz names the partition and the error."""
    topic = topic_factory(partitions=2)
    produce(topic, records_with_poison(30, 5))  # all to partition 0
    port = free_port()
    data = channel_config(zk_connect, kafka_config, [topic], error_backoff_ms=200, error_backoff_max_ms=400)
    data["metrics"] = {"port": port}
    processor = PoisonAware()
    with InboundChannel.from_dict(data, processor=processor):
        wait_until(lambda: len(processor.failed_batches) >= 3, what="partition 0 failing")

        def ready_and_failing() -> bool:
            status, body = probe(port, "/readyz")
            return status == 200 and bool(body["channels"][0].get("failing"))

        wait_until(ready_and_failing, 60, "ready, with the failing partition listed")
        status, body = probe(port, "/readyz")
        assert status == 200 and body["status"] == "ready"
        (failing,) = body["channels"][0]["failing"]
        assert (failing["topic"], failing["partition"], failing["state"]) == (topic, 0, "retrying")
        assert failing["error"] == "ValueError: cannot parse record" and failing["attempts"] >= 3
        assert body["reason"].startswith(f"holds its share; 1 partition not moving on: {topic}[0] retrying for ")
        assert body["reason"].endswith("s (ValueError: cannot parse record)")
        status, body = probe(port, "/healthz")
        assert status == 200 and body["reason"] == "all loops are running"


def test_the_reason_names_the_first_three_partitions_not_moving_on() -> None:
    failing = [
        {"topic": "t", "partition": p, "state": "retrying", "since": 100.0 + p, "error": "E: x"} for p in range(5)
    ]
    assert describe_failing(failing, now=160.0) == (
        "; 5 partitions not moving on: t[0] retrying for 60 s (E: x), t[1] retrying for 59 s (E: x), "
        "t[2] retrying for 58 s (E: x), and 2 more"
    )
    assert describe_failing([]) == ""
