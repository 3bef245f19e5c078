"""What an instance counts as a rebalance (the stop summary, ``jetkafka_rebalances_total``):
a run that took, released or lost one of its partitions, and the first run of a new session
after the old one lost partitions; not the runs that change nothing (the timer's)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.support.channels import channel_config, wait_until
from tests.support.instances import Instance
from tests.support.zk_faults import expire_session


def test_runs_that_change_nothing_do_not_count_and_a_lost_session_does(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    config = channel_config(zk_connect, kafka_config, [topic], rebalance_interval_s=1)
    a = Instance(config)
    b: Instance | None = None
    try:
        wait_until(lambda: len(a.channel.owned_partitions()) == 2, what="a takes both")
        time.sleep(2.5)  # two timer runs, and the owner watch's run after the take: no change
        assert a.channel.stats.rebalance_counts() == {"start": 1}

        b = Instance(config)
        wait_until(lambda: len(a.channel.owned_partitions()) == len(b.channel.owned_partitions()) == 1, what="1 + 1")
        # a released one partition when b came: one rebalance of a (its trigger: b's registration).
        wait_until(lambda: sum(a.channel.stats.rebalance_counts().values()) == 2, what="a's second rebalance")
        assert a.channel.stats.rebalance_counts() == {"start": 1, "consumers_changed": 1}

        # a's partition goes with its session; b may take it before a's new session plans. Either
        # way the new session's first run counts (what the JetkafkaSessionExpired alert reads).
        expire_session(a.client)
        wait_until(lambda: a.channel.stats.rebalance_counts().get("new_session") == 1, what="the new session counted")
        wait_until(lambda: len(a.channel.owned_partitions()) == len(b.channel.owned_partitions()) == 1, what="1 + 1 again")
        time.sleep(1.5)
        assert "timer" not in a.channel.stats.rebalance_counts()
    finally:
        if b is not None:
            b.close()
        a.close()
