"""A `jetkafka run` dispatcher frozen past its session timeout stops sending when it wakes.

Injected: SIGSTOP of one of two dispatcher processes while it is in the middle of a batch (the
subscriber answers each request after 30 ms, a batch is 20 records), held until the other
process owns every partition and past the session timeout; then SIGCONT.
Asserted: after the thaw, the frozen process sends at most the one request per partition that
was on its way when it froze, never the rest of its batch (the subscriber tells its requests
by the fencing token each event carries, ``jetkafkaepoch``: the one its holds had before the
freeze); every record is delivered.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.channels import committed_offsets, wait_until
from tests.support.group_watch import consumer_pids, owners
from tests.support.http_subscriber import HttpSubscriber, Received, Reply
from tests.support.members import running_members
from tests.support.processes import Member

PARTITIONS = 4
RECORDS = 1600  # 400 per partition
SESSION_TIMEOUT_S = 4


def position(request: Received) -> tuple[int, int]:
    _, partition, offset = request.ce_id.rsplit("-", 2)
    return int(partition), int(offset)


def config(zk_connect: str, kafka_config: dict[str, Any], topic: str, url: str) -> dict[str, Any]:
    return {
        "zookeeper": {"connect": zk_connect, "session_timeout_s": SESSION_TIMEOUT_S},
        "kafka": dict(kafka_config),
        "channel": {"group": "g", "topics": [topic], "threads": 2, "batch_max_events": 20, "rebalance_delay_ms": 50},
        "processor": {
            "class": "jetkafka.processors.cloudevents:HttpDispatcher",
            "options": {"url": url, "max_turn_ms": 60_000},
        },
    }


@pytest.mark.slow
def test_a_thawed_dispatcher_sends_nothing_more_of_its_batch(
    zk, zk_connect, kafka_config, topic_factory, produce, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, [(i % PARTITIONS, None, str(i).encode()) for i in range(RECORDS)])
    with HttpSubscriber(default=Reply(delay_s=0.03)) as subscriber, running_members() as members:
        cfg = config(zk_connect, kafka_config, topic, subscriber.url)
        members.extend(Member(tmp_path, name, cfg) for name in ("survivor", "zombie"))
        survivor, zombie = members
        wait_until(lambda: sorted(Counter(owners(zk, topic).values()).values()) == [2, 2], 60, "2/2")
        ids_of = {pid: cid for cid, pid in consumer_pids(zk).items()}
        zombie_parts = {p for p, o in owners(zk, topic).items() if o == ids_of[zombie.pid]}
        wait_until(lambda: subscriber.count() >= 100, 60, "deliveries under way")

        os.kill(zombie.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        wait_until(
            lambda: set(owners(zk, topic).values()) == {ids_of[survivor.pid]}, SESSION_TIMEOUT_S + 60, "the take-over"
        )
        time.sleep(2.0)
        thawed_at = time.monotonic()
        os.kill(zombie.pid, signal.SIGCONT)
        wait_until(
            lambda: committed_offsets(zk, "g", topic) == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)},
            timeout=180,
            what="every record delivered",
        )
        time.sleep(1.0)
        for m in members:
            assert m.terminate(60) == 0, m.log()[-3000:]
        requests = subscriber.requests()

    delivered = {position(r) for r in requests}
    assert delivered == {(p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS)}
    # The frozen process's holds: the token each of its partitions was last sent with before.
    frozen_tokens = {
        p: max(int(r.event()["jetkafkaepoch"]) for r in requests if r.at < frozen_at and position(r)[0] == p)
        for p in zombie_parts
    }
    late = [r for r in requests if r.at >= thawed_at and position(r)[0] in zombie_parts]
    stale = [r for r in late if int(r.event()["jetkafkaepoch"]) == frozen_tokens[position(r)[0]]]
    by_partition = Counter(position(r)[0] for r in stale)
    print(f"after the thaw the frozen dispatcher sent {len(stale)} request(s): {dict(by_partition)}")
    assert all(n <= 1 for n in by_partition.values()), by_partition
