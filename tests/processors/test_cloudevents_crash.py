"""A `jetkafka run` dispatcher killed mid-delivery re-delivers at most the batch it had in flight (and, with
pipelined commits, a known gap: more)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.channels import committed_offsets, wait_until
from tests.support.http_subscriber import HttpSubscriber, Received, Reply
from tests.support.processes import Member

RECORDS = 120
BATCH = 10


def offset_of(request: Received) -> int:
    return int(request.ce_id.rsplit("-", 1)[1])


def config(zk_connect: str, kafka_config: dict[str, Any], topic: str, url: str) -> dict[str, Any]:
    return {
        "zookeeper": {"connect": zk_connect, "session_timeout_s": 4},
        "kafka": dict(kafka_config),
        "channel": {"group": "g", "topics": [topic], "threads": 2, "batch_max_events": BATCH, "rebalance_delay_ms": 50},
        "processor": {
            "class": "jetkafka.processors.cloudevents:HttpDispatcher",
            "options": {"url": url, "max_turn_ms": 60_000, "retry": {"count": 3, "delay_ms": 100}},
        },
    }


@pytest.mark.slow
def test_sigkill_mid_delivery_redelivers_only_the_batch_in_flight(
    zk, zk_connect, kafka_config, topic_factory, produce, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, str(i).encode()) for i in range(RECORDS)])
    members: list[Member] = []
    with HttpSubscriber(default=Reply(delay_s=0.02)) as subscriber:
        try:
            first = Member(tmp_path, "first", config(zk_connect, kafka_config, topic, subscriber.url))
            members.append(first)
            wait_until(lambda: subscriber.count() >= 45, timeout=60, what=f"deliveries under way ({first.log_path})")
            subscriber.hold_all()  # the subscriber hangs: the next request stays in flight
            wait_until(lambda: subscriber.held >= 1, what="a request held in flight")
            committed = committed_offsets(zk, "g", topic)[0]  # stable: the batch in hand cannot finish
            in_flight = offset_of(subscriber.requests()[-1])
            first.kill()
            subscriber.release()
            assert committed <= in_flight < committed + BATCH

            second = Member(tmp_path, "second", config(zk_connect, kafka_config, topic, subscriber.url))
            members.append(second)
            wait_until(
                lambda: committed_offsets(zk, "g", topic).get(0) == RECORDS, timeout=90, what=f"the rest ({second.log_path})"
            )
            assert second.terminate() == 0
        finally:
            for member in members:
                member.stop_quietly()
        deliveries = Counter(offset_of(r) for r in subscriber.requests())
    assert set(deliveries) == set(range(RECORDS))  # every record delivered at least once
    twice = sorted(o for o, n in deliveries.items() if n > 1)
    # Exactly the records the killed process had sent since its last commit come again,
    # the unacknowledged one included; nothing committed is ever sent again.
    assert twice == list(range(committed, in_flight + 1))
    assert all(n == 2 for o, n in deliveries.items() if o in twice)


BACKLOG = 3000
SMALL_BATCH = 5


@pytest.mark.slow
@pytest.mark.parametrize("pipelined", [False, True])
def test_sigkill_during_a_backlog_re_sends_at_most_the_batch_in_flight(
    zk, zk_connect, kafka_config, topic_factory, produce, tmp_path: Path, pipelined: bool
) -> None:
    """Injected: a SIGKILL while a dispatcher works through a backlog, in batches of 5, for a
    subscriber that answers at once; half a commit interval (1 s here) after a commit landed, so
    that with pipelined commits about half a second of deliveries is not committed yet.
    Asserted: the records sent twice are at most one batch, with pipelined commits too (the
    dispatcher commits each batch before its partition's next one)."""
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, str(i).encode()) for i in range(BACKLOG)])
    members: list[Member] = []
    with HttpSubscriber() as subscriber:
        cfg = config(zk_connect, kafka_config, topic, subscriber.url)
        cfg["channel"].update(batch_max_events=SMALL_BATCH, pipelined_commits=pipelined, commit_interval_ms=1000)
        try:
            members.append(Member(tmp_path, "first", cfg))
            wait_until(lambda: subscriber.count() >= 300, timeout=60, what=f"deliveries under way ({members[0].log_path})")
            before = committed_offsets(zk, "g", topic).get(0)
            wait_until(lambda: committed_offsets(zk, "g", topic).get(0) != before, timeout=10, what="a commit landing")
            time.sleep(0.5)
            assert subscriber.count() < BACKLOG - 500, "the backlog ran out before the kill: nothing shown"
            members[0].kill()
            members.append(Member(tmp_path, "second", cfg))
            wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == BACKLOG, timeout=90, what="the rest")
            assert members[1].terminate() == 0
        finally:
            for member in members:
                member.stop_quietly()
        deliveries = Counter(offset_of(r) for r in subscriber.requests())
    assert set(deliveries) == set(range(BACKLOG))
    twice = sorted(o for o, n in deliveries.items() if n > 1)
    assert len(twice) <= SMALL_BATCH, f"{len(twice)} records sent twice after the SIGKILL: {twice[:3]}..{twice[-3:]}"
