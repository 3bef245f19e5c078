"""A take-over with a huge backlog: fresh events first, the gap recovered in the background at the
configured rate, every gap event exactly once; a second outage during recovery; a partition that
moves during recovery. Real ZooKeeper and broker, channels in this process."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from jetkafka import BatchResponse, InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.devstack._ports import free_port
from jetkafka.recovery import RecoveryLedger
from tests.recovery import Recorder
from tests.support.channels import channel_config, committed_offsets, wait_until

PATHS = GroupPaths("g")


def backlog(zk: KazooClient, produce: Any, topic: str, partitions: int, per_partition: int) -> None:
    """Offsets committed at 0 (the group consumed nothing more), then ``per_partition`` records each."""
    store = OffsetStore(zk, PATHS)
    for p in range(partitions):
        store.write_unfenced(topic, p, 0)
    produce(topic, [(i % partitions, None, str(i).encode()) for i in range(per_partition * partitions)])


def recovering_channel(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, live: Recorder, rec: Recorder, **recovery: Any
) -> InboundChannel:
    data = channel_config(zk_connect, kafka_config, [topic])
    metrics_port = recovery.pop("metrics_port", None)
    if metrics_port is not None:
        data["metrics"] = {"port": metrics_port, "watermark_interval_s": 0.5}
    data["recovery"] = recovery
    return InboundChannel.from_dict(data, processor=live, recovery_processor=rec)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k in ("partition", "reason")))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def node_ranges(zk: KazooClient, topic: str, partition: int) -> list[list[int]] | None:
    ledger = RecoveryLedger(zk, PATHS, "test")
    snap = ledger.read(topic, partition)
    return None if snap.version is None else [list(r) for r in snap.record.ranges]


def test_backlog_live_first_gap_recovered_at_the_configured_rate_exactly_once(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    # 48 000 gap events at 3 000/s: 16 s, long enough to measure, with headroom on a busy machine.
    rate, lag, per_partition = 3000, 1000, 25_000
    topic = topic_factory(partitions=2)
    backlog(zk, produce, topic, 2, per_partition)  # 50 000 events behind
    gap_end = per_partition - lag  # per partition: [0, 24 000) is recovered, live starts at 24 000
    live, rec = Recorder(expect_recovery=False), Recorder(expect_recovery=True)
    port = free_port()
    channel = recovering_channel(
        zk_connect, kafka_config, topic, live, rec, max_partition_lag=lag, max_rate=rate, metrics_port=port
    )
    started = time.monotonic()
    channel.start()
    try:
        wait_until(lambda: {0, 1} <= {d.partition for d in live.snapshot()}, 10, "live events of both partitions")
        first_live = min(d.at for d in live.snapshot()) - started
        assert first_live < 5, f"first live event after {first_live:.1f} s"
        # A fresh event while the gap is being recovered reaches the processor within seconds.
        wait_until(lambda: len(rec.offsets()) >= 5000, 30, "recovery under way")
        sent = time.monotonic()
        fresh = produce(topic, [(0, None, b"fresh-0"), (1, None, b"fresh-1")])
        wait_until(lambda: sum(d.value.startswith(b"fresh") for d in live.snapshot()) == 2, 10, "fresh events")
        fresh_latency = max(d.at for d in live.snapshot() if d.value.startswith(b"fresh")) - sent
        in_flight = len(rec.offsets())
        assert in_flight < 2 * gap_end, "recovery finished before the fresh events: nothing shown"
        assert fresh_latency < 3, f"fresh events took {fresh_latency:.1f} s with recovery running"
        samples = scrape(port)
        assert samples[("jetkafka_recovery_active_partitions", ())] == 2
        assert 0 < samples[("jetkafka_recovery_events_remaining", (("partition", "0"),))] < gap_end

        wait_until(lambda: len(rec.offsets()) >= 2 * gap_end, 2 * gap_end / rate + 30, "the whole gap recovered")
        wait_until(lambda: node_ranges(zk, topic, 0) is None and node_ranges(zk, topic, 1) is None, 10, "nodes removed")
        for p in (0, 1):
            recovered = rec.offsets(partition=p)
            # Exactly once, first and last included: the range is [0, gap_end).
            assert len(recovered) == gap_end, f"partition {p}: {len(recovered) - len(set(recovered))} duplicates"
            assert sorted(recovered) == list(range(gap_end))
            assert recovered[0] == 0 and recovered[-1] == gap_end - 1
            live_offsets = live.offsets(partition=p)
            assert min(live_offsets) == gap_end, "live must start exactly where the gap ends"
            assert sorted(live_offsets) == list(range(gap_end, per_partition + 1))  # + the fresh event
        assert fresh == [per_partition, per_partition]
        assert not live.violations and not rec.violations, live.violations + rec.violations

        # The rate: from the first recovery batch to the last (whose events are not yet paid for).
        deliveries = rec.snapshot()
        first, last = deliveries[0].at, deliveries[-1].at
        window = last - first
        counted = len(deliveries) - deliveries[-1].batch
        measured = counted / window
        figures = f"{counted} events in {window:.2f} s = {measured:.0f}/s, configured {rate}/s"
        assert window >= 5, f"window too short to measure: {figures}"
        assert abs(measured - rate) <= 0.10 * rate, f"recovery rate off by more than 10%: {figures}"
        print(f"recovery rate: {figures}; first live event after {first_live:.2f} s, fresh latency {fresh_latency:.2f} s")

        samples = scrape(port)
        for label in ("0", "1"):
            assert samples[("jetkafka_recovered_events_total", (("partition", label),))] == gap_end
            assert samples[("jetkafka_recovery_events_remaining", (("partition", label),))] == 0
        assert samples[("jetkafka_recovery_active_partitions", ())] == 0
        # Exported from the start (so rate() works before the first loss), and nothing lost.
        lost = [value for (name, _), value in samples.items() if name == "jetkafka_recovery_lost_events_total"]
        assert lost and all(value == 0 for value in lost), lost
    finally:
        channel.shutdown()
    assert committed_offsets(zk, "g", topic) == {0: per_partition + 1, 1: per_partition + 1}


def test_second_outage_during_recovery_merges_ranges_and_loses_nothing(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    backlog(zk, produce, topic, 1, 5000)  # first outage: gap [0, 4000), live from 4000
    live, rec = Recorder(False), Recorder(True)
    gate = {"open": False}
    # Live processing is held back (revert, nothing committed), so the live offset stays at the
    # gap's end: the second gap then starts exactly there and must merge with the first.
    live_response = live.on_next_batch

    def held(source: Any, events: Any) -> Any:
        if not gate["open"]:
            return BatchResponse.revert().wait(50)
        return live_response(source, events)

    live.on_next_batch = held  # type: ignore[method-assign]
    first = recovering_channel(zk_connect, kafka_config, topic, live, rec, max_partition_lag=1000, max_rate=1000)
    first.start()
    try:
        wait_until(lambda: node_ranges(zk, topic, 0) is not None, 10, "the first gap recorded")
        wait_until(lambda: len(rec.offsets()) >= 1500, 20, "part of the first gap recovered")
    finally:
        first.shutdown()  # the second outage starts
    stored = node_ranges(zk, topic, 0)
    assert stored is not None and len(stored) == 1 and stored[0][1] == 4000 and stored[0][0] >= 1500, stored
    assert committed_offsets(zk, "g", topic) == {0: 4000}
    produce(topic, [(0, None, str(i).encode()) for i in range(5000, 9000)])  # high watermark 9000
    gate["open"] = True
    second = recovering_channel(zk_connect, kafka_config, topic, live, rec, max_partition_lag=1000, max_rate=1000)
    second.start()
    try:
        # The second gap [4000, 8000) touches the rest of the first one: one range.
        wait_until(lambda: (node_ranges(zk, topic, 0) or [[0, 0]])[-1][1] == 8000, 10, "the second gap recorded")
        assert len(node_ranges(zk, topic, 0) or []) == 1, node_ranges(zk, topic, 0)
        wait_until(lambda: len(rec.offsets()) >= 8000 and node_ranges(zk, topic, 0) is None, 30, "both gaps recovered")
        wait_until(lambda: max(live.offsets(), default=0) == 8999, 10, "live caught up")
    finally:
        second.shutdown()
    recovered = rec.offsets()
    assert sorted(recovered) == list(range(8000)), "every gap event exactly once, across both outages"
    assert sorted(live.offsets()) == list(range(8000, 9000))
    assert not live.violations and not rec.violations, live.violations + rec.violations


def test_recovery_continues_on_the_new_owner_when_a_partition_moves(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    backlog(zk, produce, topic, 2, 4000)  # gaps [0, 3000) on both partitions
    live_a, rec_a = Recorder(False), Recorder(True)
    live_b, rec_b = Recorder(False), Recorder(True)
    a = recovering_channel(zk_connect, kafka_config, topic, live_a, rec_a, max_partition_lag=1000, max_rate=1000)
    b = recovering_channel(zk_connect, kafka_config, topic, live_b, rec_b, max_partition_lag=1000, max_rate=1000)
    a.start()
    try:
        wait_until(lambda: len(rec_a.offsets()) >= 1000, 20, "a recovering both partitions")
        b.start()  # takes one of the two partitions from a, gracefully
        try:
            wait_until(lambda: len(b.owned_partitions()) == 1 and len(a.owned_partitions()) == 1, 20, "one each")
            wait_until(lambda: len(rec_a.offsets()) + len(rec_b.offsets()) >= 6000, 30, "both gaps recovered")
            wait_until(lambda: not zk.get_children(f"/consumers/g/recovery/{topic}"), 10, "nodes removed")
        finally:
            b.shutdown()
    finally:
        a.shutdown()
    moved = {d.partition for d in rec_b.snapshot()}
    assert len(moved) == 1, "b recovered the partition it took"
    for partition in (0, 1):
        both = rec_a.offsets(partition=partition) + rec_b.offsets(partition=partition)
        assert sorted(both) == list(range(3000)), f"partition {partition}: a graceful move re-processes nothing"
    assert not (rec_a.violations or rec_b.violations or live_a.violations or live_b.violations)
