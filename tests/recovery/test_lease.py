"""Recovery batches and the local lease: a lease that runs out between the recovery round's
check and the processor's call starts nothing, and the batch comes again once it runs, every
gap event exactly once and in order. Real ZooKeeper and broker, a channel in this process."""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient

from tests.recovery import Recorder
from tests.recovery.test_backlog import backlog, node_ranges, recovering_channel
from tests.support.channels import committed_offsets, wait_until
from tests.support.lapses import LapseAtTheCall


def test_a_recovery_batch_refused_at_the_call_comes_again_once(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    per_partition, lag = 3000, 500
    gap_end = per_partition - lag
    topic = topic_factory(partitions=2)
    backlog(zk, produce, topic, 2, per_partition)
    live, rec = Recorder(expect_recovery=False), Recorder(expect_recovery=True)
    channel = recovering_channel(
        zk_connect, kafka_config, topic, live, rec, max_partition_lag=lag, max_rate=20_000, batch_max_events=50
    )
    lapse = LapseAtTheCall(channel.may_act)
    channel.may_act = lapse  # type: ignore[method-assign]
    with channel:
        wait_until(lambda: len(rec.offsets()) >= 2 * gap_end, 60, "the whole gap recovered")
        wait_until(lambda: node_ranges(zk, topic, 0) is None and node_ranges(zk, topic, 1) is None, 10, "ranges done")
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: per_partition, 1: per_partition}, 30, "commits")
    for p in (0, 1):
        assert rec.offsets(partition=p) == list(range(gap_end)), f"partition {p}: recovery lost or repeated events"
        assert live.offsets(partition=p) == list(range(gap_end, per_partition)), f"partition {p}: live stream"
    assert not live.violations and not rec.violations, live.violations + rec.violations
    # Recovery asked at the call (once per batch of at most 50), and was refused there.
    assert lapse.refused_recovery >= 5, (lapse.asked, lapse.refused, lapse.refused_recovery)
