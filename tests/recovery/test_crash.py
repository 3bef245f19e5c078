"""Killing an instance mid-recovery (SIGKILL) and starting another: recovery finishes, at most one
batch is processed twice; and ranges left by an earlier owner are picked up by the next one."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from tests.recovery import Recorder, read_flags
from tests.recovery.test_backlog import backlog, node_ranges, recovering_channel
from tests.support.channels import channel_config, wait_until
from tests.support.processes import Member

BATCH = 500


def member_config(zk_connect: str, kafka_config: dict[str, Any], topic: str, path: Path) -> dict[str, Any]:
    data = channel_config(zk_connect, kafka_config, [topic])
    # Each batch takes 150 ms after it was written down: a kill usually lands mid-batch.
    data["processor"] = {"class": "tests.recovery:FlagRecorder", "options": {"path": str(path), "delay_ms": 150}}
    data["recovery"] = {"max_partition_lag": 1000, "max_rate": 2000, "batch_max_events": BATCH}
    data["logging"] = {"level": "INFO"}
    return data


def test_killed_mid_recovery_the_next_instance_finishes_with_at_most_one_batch_again(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    backlog(zk, produce, topic, 1, 21_000)  # gap [0, 20 000): 10 s at 2 000 events/s
    out = tmp_path / "delivered.txt"
    config = member_config(zk_connect, kafka_config, topic, out)
    first = Member(tmp_path, "first", config)
    second: Member | None = None
    try:
        def recovered() -> int:
            return sum(1 for *_, flag in read_flags(str(out)) if flag) if out.exists() else 0

        wait_until(lambda: recovered() >= 6000, 60, "recovery under way in the first instance")
        first.kill()
        at_kill = node_ranges(zk, topic, 0)
        assert at_kill is not None and at_kill[-1][1] == 20_000, at_kill
        second = Member(tmp_path, "second", config)
        # The owner node of the killed instance lives until its session expires (6 s).
        wait_until(lambda: node_ranges(zk, topic, 0) is None, 60, "recovery finished by the second instance")
        assert second.terminate() == 0, second.log()[-3000:]
    finally:
        first.stop_quietly()
        if second is not None:
            second.stop_quietly()
    lines = read_flags(str(out))
    pids = {pid for pid, *_ in lines}
    assert pids == {first.pid, second.pid}
    recovery = [offset for _, _, offset, flag in lines if flag]
    assert set(recovery) == set(range(20_000)), "every gap event recovered"
    assert 0 in recovery and 19_999 in recovery
    seen: set[int] = set()
    twice = []
    for offset in recovery:
        if offset in seen:
            twice.append(offset)
        seen.add(offset)
    assert len(twice) <= BATCH, f"{len(twice)} events recovered twice; at most one batch ({BATCH}) may be"
    if twice:
        assert twice == list(range(twice[0], twice[0] + len(twice))), "the repeated events are one batch"
    live = [offset for _, _, offset, flag in lines if not flag]
    assert min(live) == 20_000 and set(live) == set(range(20_000, 21_000))
    print(f"recovered twice after the kill: {len(twice)} events (batch size {BATCH})")


def test_ranges_left_by_an_earlier_owner_are_recovered_by_the_next_one(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, str(i).encode()) for i in range(2000)])
    paths = GroupPaths("g")
    OffsetStore(zk, paths).write_unfenced(topic, 0, 2000)  # nothing new for live reading
    node = f"{paths.root}/recovery/{topic}/0"
    zk.create(node, json.dumps({"ranges": [[100, 600], [1000, 1500]], "lost": 0}).encode(), makepath=True)
    live, rec = Recorder(False), Recorder(True)
    channel = recovering_channel(zk_connect, kafka_config, topic, live, rec, max_partition_lag=1000, max_rate=5000)
    channel.start()
    try:
        wait_until(lambda: node_ranges(zk, topic, 0) is None, 20, "both ranges recovered")
        time.sleep(0.5)
    finally:
        channel.shutdown()
    assert rec.offsets() == [*range(100, 600), *range(1000, 1500)]  # exactly these, in order, once
    assert live.offsets() == [] and not rec.violations
