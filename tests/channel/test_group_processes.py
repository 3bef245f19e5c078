"""Three, then four, instances in separate processes share a 12-partition topic.

Counts every event by unique id through a join, a graceful leave and a SIGKILL.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.channels import wait_until
from tests.support.group_watch import consumer_pids, owners
from tests.support.processes import Member
from tests.support.recording import read_deliveries

PARTITIONS = 12
SESSION_TIMEOUT_S = 6


class SteadyProducer:
    """Produces unique ids round-robin over the partitions until stopped."""

    def __init__(self, kafka_config: dict[str, Any], topic: str, rate: int = 2000) -> None:
        self.producer = Producer({**kafka_config, "linger.ms": 5})
        self.topic, self.rate = topic, rate
        self.sent = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(self.rate // 20):
                self.producer.produce(
                    self.topic, str(self.sent).encode(), partition=self.sent % PARTITIONS, on_delivery=self._delivered
                )
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(30) == 0
        assert self.failed == 0
        return self.sent


@pytest.fixture
def members(tmp_path: Path):
    started: list[Member] = []
    yield started
    for m in started:
        m.stop_quietly()


def test_group_shares_partitions_through_join_leave_and_kill(
    tmp_path, members, zk, zk_connect, kafka_config, topic_factory
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    out = tmp_path / "deliveries.txt"

    def config(name: str) -> dict[str, Any]:
        return {
            "zookeeper": {"connect": zk_connect, "session_timeout_s": SESSION_TIMEOUT_S},
            "kafka": dict(kafka_config),
            "channel": {
                "group": "g",
                "topics": [topic],
                "threads": 3,
                "batch_max_events": 20,
                "rebalance_delay_ms": 100,
            },
            "processor": {"class": "tests.support.recording:FileRecorder", "options": {"path": str(out)}},
            "logging": {"level": "INFO"},
        }

    producer = SteadyProducer(kafka_config, topic)
    try:
        for name in ("a", "b", "c"):
            members.append(Member(tmp_path, name, config(name)))
        a, b, c = members
        wait_until(lambda: len(consumer_pids(zk)) == 3, what="three registrations")
        wait_until(
            lambda: sorted(Counter(owners(zk, topic).values()).values()) == [4, 4, 4], what="4/4/4 ownership"
        )
        before = owners(zk, topic)

        # A fourth instance joins: exactly its share (3 partitions) moves, all of them to it.
        d = Member(tmp_path, "d", config("d"))
        members.append(d)
        wait_until(lambda: len(consumer_pids(zk)) == 4)
        wait_until(
            lambda: sorted(Counter(owners(zk, topic).values()).values()) == [3, 3, 3, 3], what="3/3/3/3 ownership"
        )
        after = owners(zk, topic)
        d_id = next(cid for cid, pid in consumer_pids(zk).items() if pid == d.pid)
        moved = {p for p in range(PARTITIONS) if before[p] != after[p]}
        assert len(moved) == 3
        assert all(after[p] == d_id for p in moved)

        # Graceful leave: the others own b's partitions within 2 s of the signal.
        pids = consumer_pids(zk)
        b_id = next(cid for cid, pid in pids.items() if pid == b.pid)
        b_partitions = {p for p, o in after.items() if o == b_id}
        started = time.monotonic()
        b.proc.send_signal(15)
        wait_until(
            lambda: (lambda o: all(p in o and o[p] != b_id for p in b_partitions))(owners(zk, topic)),
            timeout=10,
            what="b's partitions taken over",
        )
        handoff = time.monotonic() - started
        assert b.wait(30) == 0
        assert handoff <= 2.0, f"graceful hand-off took {handoff:.2f} s"

        # SIGKILL: c's partitions move within the session timeout + 2 s.
        c_id = next(cid for cid, pid in consumer_pids(zk).items() if pid == c.pid)
        c_partitions = {p for p, o in owners(zk, topic).items() if o == c_id}
        c.kill()
        killed_at = time.monotonic()
        committed_at_kill = {
            p: int(zk.get(f"/consumers/g/offsets/{topic}/{p}")[0] or b"0") for p in c_partitions
        }
        wait_until(
            lambda: (lambda o: all(p in o and o[p] != c_id for p in c_partitions))(owners(zk, topic)),
            timeout=SESSION_TIMEOUT_S + 10,
            what="c's partitions taken over",
        )
        moved_after = time.monotonic() - killed_at
        assert moved_after <= SESSION_TIMEOUT_S + 2.0, f"partitions of the killed instance moved after {moved_after:.1f} s"
        wait_until(lambda: sorted(Counter(owners(zk, topic).values()).values()) == [6, 6], what="6/6 over a and d")
        time.sleep(1.0)
    finally:
        sent = producer.stop()

    wait_until(
        lambda: len({d[4] for d in read_deliveries(str(out))}) == sent, timeout=60, what=f"all {sent} events delivered"
    )
    for m in (a, d):
        assert m.terminate() == 0, m.log()

    deliveries = read_deliveries(str(out))
    ids = Counter(d[4] for d in deliveries)
    assert set(ids) == set(range(sent)), "events lost"
    duplicates = {i for i, n in ids.items() if n > 1}
    # Duplicates only from the killed instance's uncommitted batches: first delivered by c,
    # at or after the partition's committed offset at the time of the kill.
    first = {}
    for pid, _, partition, offset, i in deliveries:
        first.setdefault(i, (pid, partition, offset))
    for i in duplicates:
        pid, partition, offset = first[i]
        assert pid == c.pid, f"event {i} duplicated but first delivered by pid {pid}, not the killed one"
        assert offset >= committed_at_kill[partition]
    assert all(n <= 2 for n in ids.values())
    for m in (a, b, d):
        assert "Traceback" not in m.log(), m.log()[-3000:]
