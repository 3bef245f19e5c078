"""Two ``jetkafka run`` processes share a topic, each running Spark micro-batches: every event
lands in the output exactly once, whichever instance (or hand-over) processed it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from examples.pipeline.events import generate_events, records
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from tests.spark.helpers import read_ids
from tests.spark.test_crash_replay import member_config
from tests.support.channels import wait_until
from tests.support.processes import Member

pytestmark = pytest.mark.slow


def test_two_instances_output_every_event_once(
    zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=4)
    events = generate_events(2_000, seed=11)
    batches = records(events, 4)
    produce(topic, batches[:1_000])
    out = str(tmp_path / "events")
    config = member_config(zk_connect, kafka_config, topic, "tests.spark.helpers:id_writer", {"path": out})
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    store = OffsetStore(zk, GroupPaths("g"))
    owners = PartitionOwnership(zk, GroupPaths("g"), "test")
    members = [Member(tmp_path, "a", config), Member(tmp_path, "b", config)]
    try:
        # Both instances hold two partitions each before the second half arrives, so both work on it.
        wait_until(
            lambda: sorted(Counter(owners.owners(topic).values()).values()) == [2, 2],
            timeout=240,
            what="the partitions to be split 2/2",
        )
        produce(topic, batches[1_000:])
        wait_until(lambda: sum(store.read_all(topic).values()) == 2_000, timeout=180, what="all offsets committed")
        for member in members:
            assert member.terminate(60) == 0
    finally:
        for member in members:
            member.stop_quietly()
        zk.stop()
        zk.close()
    for member in members:
        assert "committed:" in member.log(), f"instance {member.name} committed no micro-batch"

    ids = [i for i, _ in read_ids(out)]
    assert len(ids) == 2_000, f"{len(ids) - len(set(ids))} duplicates, {2_000 - len(set(ids))} missing"
    assert set(ids) == {e["id"] for e in events}
