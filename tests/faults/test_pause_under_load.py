"""Pause a channel through ZooKeeper while a producer keeps writing, then resume it.

Injected: the group pause marker (what ``jetkafka pause --config`` writes) under steady load,
held for 3 s while more records arrive, then removed.
Asserted: once the batch in hand finished, no batch starts and nothing is fetched from the
broker (the fetcher's counter stays flat) while paused; ownership (owner nodes and the
sessions holding them) does not change; after resume every acknowledged id is delivered
exactly once, and each partition's delivered offsets are exactly its acknowledged offsets,
without a gap or a repeat around the pause.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from kazoo.client import KazooClient

from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._pause_markers import PauseMarkers
from tests.support.channels import make_channel
from tests.support.group_watch import owner_nodes
from tests.support.instances import TimedRecorder
from tests.support.load import AckedProducer, delivery_report, wait_delivered, wait_for

PARTITIONS = 6
PAUSED_FOR_S = 3.0


def test_paused_channel_fetches_and_delivers_nothing_then_resumes_exactly(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    proc = TimedRecorder()
    markers = PauseMarkers(zk, GroupPaths("g"))
    producer = AckedProducer(kafka_config, topic, range(PARTITIONS), rate=400)
    try:
        with make_channel(zk_connect, kafka_config, topic, proc, threads=3, batch_max_events=50) as channel:
            assert channel._fetcher is not None
            fetcher = channel._fetcher
            wait_for(lambda: len(channel.owned_partitions()) == PARTITIONS, 30, "all partitions owned")
            wait_for(lambda: len(proc.delivered) >= 400, 60, "deliveries under load")
            owners_before = owner_nodes(zk, topic)
            assert len(owners_before) == PARTITIONS

            assert markers.pause(reason="fault test")
            wait_for(lambda: channel.paused, 30, "the channel to see the pause marker")
            wait_for(lambda: not proc.in_flight, 30, "the batch in hand to finish")
            quiet_from = time.monotonic()
            # Records already handed out by librdkafka when the pause reached the fetcher
            # thread may still be routed; after that the counter must not move.
            last = [-1, time.monotonic()]

            def fetch_settled() -> bool:
                now = fetcher.events_fetched
                if now != last[0]:
                    last[:] = [now, time.monotonic()]
                return time.monotonic() - last[1] >= 0.5

            wait_for(fetch_settled, 30, "fetching to stop")
            fetched_paused, delivered_paused = fetcher.events_fetched, len(proc.delivered)
            acked_paused = len(producer.acked)
            time.sleep(PAUSED_FOR_S)
            produced_while_paused = len(producer.acked) - acked_paused
            assert produced_while_paused >= 300, f"only {produced_while_paused} records written while paused"
            assert fetcher.events_fetched == fetched_paused, (
                f"{fetcher.events_fetched - fetched_paused} events fetched while paused"
            )
            assert len(proc.delivered) == delivered_paused
            with proc.lock:
                started = [b for b in proc.batch_starts if b[0] >= quiet_from]
            assert started == [], f"batches started while paused: {started[:5]}"
            assert owner_nodes(zk, topic) == owners_before
            assert len(channel.owned_partitions()) == PARTITIONS

            assert markers.resume()
            resumed = time.monotonic()
            wait_for(lambda: not channel.paused, 30, "the channel to see the resume")
            wait_for(lambda: fetcher.events_fetched > fetched_paused, 30, "fetching again")
            time.sleep(1.0)  # load goes on after the resume
            acked = producer.stop()
            wait_delivered(proc.ids, acked)
            first_after = min(b[0] for b in proc.batch_starts if b[0] >= quiet_from)
            print(
                f"paused {PAUSED_FOR_S:.0f} s with {produced_while_paused} records written and none fetched; "
                f"first batch {first_after - resumed:.3f} s after resume"
            )
            assert owner_nodes(zk, topic) == owners_before
    finally:
        producer.close()

    report = delivery_report(proc.ids(), acked)
    assert report.exactly_once, str(report)
    delivered_offsets: dict[int, list[int]] = defaultdict(list)
    for _, partition, offset, _ in proc.delivered:
        delivered_offsets[partition].append(offset)
    acked_offsets: dict[int, list[int]] = defaultdict(list)
    for partition, offset in producer.acked.values():
        acked_offsets[partition].append(offset)
    for p in range(PARTITIONS):
        assert delivered_offsets[p] == sorted(acked_offsets[p]), f"partition {p}: offsets differ around the pause"
    assert proc.calls_named("exception") == []
    assert proc.violations == []
