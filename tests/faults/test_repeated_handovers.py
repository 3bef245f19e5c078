"""Partitions handed over again and again are each taken within a couple of seconds, on watches.

Injected: three instances share 16 partitions (``rebalance_interval_s`` an hour: no timer
rebalance helps); a fourth and a fifth join and leave gracefully, staggered, over and over, so
the shares go 16/3, 16/4, 16/5, 16/4, 16/3 and back; surplus is released and taken between
live instances, and owner nodes are deleted and created again between the listings of every
instance.
Asserted, from owner nodes sampled every 20 ms: no partition is seen without an owner for more
than 2 s at any point; after every step every partition is owned and the shares are even.
"""

from __future__ import annotations

import time
from typing import Any

from kazoo.client import KazooClient

from tests.support.channels import channel_config
from tests.support.group_watch import Sampler, owners
from tests.support.instances import Instance
from tests.support.load import wait_for

PARTITIONS = 16
CYCLES = 6
MAX_FREE_S = 2.0


def free_spells(samples: list[tuple[float, dict[int, str]]]) -> dict[int, float]:
    """The longest time each partition was *seen* without an owner: from the first to the last
    of a run of samples that all showed it free. A sampler held up by a busy machine can only
    make this shorter, never longer, so a long spell is a partition really left free."""
    longest: dict[int, float] = {}
    first_free: dict[int, float] = {}
    last_free: dict[int, float] = {}
    for at, snapshot in samples:
        for p in range(PARTITIONS):
            if p not in snapshot:
                first_free.setdefault(p, at)
                last_free[p] = at
            elif p in first_free:
                longest[p] = max(longest.get(p, 0.0), last_free.pop(p) - first_free.pop(p))
    for p, since in first_free.items():
        longest[p] = max(longest.get(p, 0.0), last_free[p] - since)
    return longest


def balanced(zk: KazooClient, topic: str, instances: list[Instance]) -> bool:
    owned = owners(zk, topic)
    if len(owned) != PARTITIONS:
        return False
    counts = sorted(sum(1 for o in owned.values() if o == i.consumer_id) for i in instances)
    return counts[-1] - counts[0] <= 1 and sum(counts) == PARTITIONS


def test_every_partition_freed_by_repeated_handovers_is_taken_within_seconds(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    config = channel_config(zk_connect, kafka_config, [topic], rebalance_interval_s=3600, rebalance_delay_ms=50)
    group = [Instance(config) for _ in range(3)]
    sampler: Sampler[dict[int, str]] | None = None
    try:
        wait_for(lambda: balanced(zk, topic, group), 30, "three instances balanced")
        sampler = Sampler(lambda: owners(zk, topic), interval=0.02, name="owners")
        for cycle in range(CYCLES):
            joiners: list[Instance] = []
            try:
                for n in (4, 5):
                    joiners.append(Instance(config))
                    members = [*group, *joiners]
                    wait_for(lambda m=members: balanced(zk, topic, m), 10, f"cycle {cycle}: {n} balanced")
                for n in (4, 3):
                    joiners.pop(0).close()
                    members = [*group, *joiners]
                    wait_for(lambda m=members: balanced(zk, topic, m), 10, f"cycle {cycle}: {n} balanced")
            finally:
                for joiner in joiners:
                    joiner.close()
        time.sleep(MAX_FREE_S)  # a partition left free at the end shows as a spell this long
        samples = sampler.stop()
    finally:
        if sampler is not None:
            sampler.stop()
        for instance in group:
            instance.close()
    spells = free_spells(samples)
    slow = {p: round(s, 2) for p, s in spells.items() if s > MAX_FREE_S}
    assert not slow, f"partitions without an owner for longer than {MAX_FREE_S} s: {slow}"
    assert len(spells) > 0, "no partition was ever handed over"
    print(f"{CYCLES} cycles of two joining and leaving: {len(spells)} partitions handed over, longest without owner {max(spells.values()):.2f} s")
