"""Topics changing under a running channel: one deleted, one given more partitions.

Injected: a channel consumes topics A (3 partitions) and B (2 partitions) under load; A is
deleted on the broker (DeleteTopics); then B grows to 4 partitions (CreatePartitions) and the
producer writes to all four.
Asserted: A's partitions are released (``on_stream_termination`` for each, owner nodes gone)
while B keeps being consumed; A is not brought back to life by the channel (the local broker
creates a topic that a metadata request names, so this is checked by listing all topics until
the end); B's new partitions are taken by the next timer rebalance (``rebalance_interval_s``
2 s: nothing else announces new partitions) and consumed; every acknowledged id of both topics
is delivered exactly once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from kazoo.client import KazooClient

from jetkafka import InboundChannel
from tests.support.channels import channel_config
from tests.support.group_watch import committed, owners
from tests.support.instances import TimedRecorder
from tests.support.load import AckedProducer, delivery_report, wait_delivered, wait_for

REBALANCE_INTERVAL_S = 2


def test_deleted_topic_is_released_and_added_partitions_are_taken(
    zk: KazooClient,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    doomed = topic_factory(partitions=3)
    growing = topic_factory(partitions=2)
    admin = AdminClient({**kafka_config, "logger": logging.getLogger(__name__)})

    def topic_names() -> set[str]:
        return set(admin.list_topics(timeout=10).topics)  # all topics: never names one

    proc = TimedRecorder()
    config = channel_config(
        zk_connect, kafka_config, [doomed, growing], threads=2, batch_max_events=50,
        rebalance_interval_s=REBALANCE_INTERVAL_S,
    )
    load_a = AckedProducer(kafka_config, doomed, range(3), rate=150)
    load_b = AckedProducer(kafka_config, growing, range(2), rate=150, first_id=1_000_000)
    try:
        with InboundChannel.from_dict(config, processor=proc) as channel:
            wait_for(lambda: len(channel.owned_partitions()) == 5, 30, "all five partitions owned")
            wait_for(lambda: len(proc.delivered) >= 300, 60, "deliveries under load")

            # Everything written to A is processed and committed before A goes away.
            acked_a = load_a.stop()
            ends_a = {p: 1 + max(o for q, o in load_a.acked.values() if q == p) for p in range(3)}
            wait_for(lambda: committed(zk, doomed) == ends_a, 60, f"A committed to its end {ends_a}")
            marks = len(caplog.records)
            for future in admin.delete_topics([doomed], operation_timeout=30).values():
                future.result(timeout=30)
            assert doomed not in topic_names()
            released = wait_for(
                lambda: owners(zk, doomed) == {} and all(t != doomed for t, _ in channel.owned_partitions()),
                30,
                "A's partitions released",
            )
            terminated = {k for name, k, _ in proc.calls_named("termination") if k[0] == doomed}
            assert terminated == {(doomed, p) for p in range(3)}
            assert [(growing, 0), (growing, 1)] == list(channel.owned_partitions())
            gone_msgs = [r.getMessage() for r in caplog.records[marks:] if "no longer exists" in r.getMessage()]
            assert gone_msgs and doomed in gone_msgs[0]

            # B grows: the next timer rebalance takes the new partitions; the load spreads to them.
            before_b = {i for i in proc.ids() if i >= 1_000_000}
            wait_for(lambda: len({i for i in proc.ids() if i >= 1_000_000}) > len(before_b) + 50, 30, "B consumed")
            for future in admin.create_partitions([NewPartitions(growing, 4)]).values():
                future.result(timeout=30)
            wait_for(
                lambda: (lambda t: t is not None and len(t.partitions) == 4)(admin.list_topics(timeout=10).topics.get(growing)),
                30,
                "B's 4 partitions in the metadata",
            )
            load_b.set_partitions(range(4))
            taken = wait_for(
                lambda: channel.owned_partitions() == [(growing, p) for p in range(4)],
                6 * REBALANCE_INTERVAL_S + 30,
                "B's new partitions taken",
            )
            wait_for(
                lambda: {p for t, p, _, _ in proc.delivered[-400:] if t == growing} >= {2, 3},
                30,
                "deliveries from B's new partitions",
            )
            time.sleep(1.0)
            acked_b = load_b.stop()
            wait_delivered(proc.ids, acked_a | acked_b)
            assert doomed not in topic_names(), "the deleted topic came back while the channel ran"
    finally:
        load_a.close()
        load_b.close()
    assert doomed not in topic_names(), "the deleted topic came back"

    report = delivery_report(proc.ids(), acked_a | acked_b)
    assert report.exactly_once, str(report)
    assert {p for t, p, _, _ in proc.delivered if t == growing} == {0, 1, 2, 3}
    assert proc.losses() == [] and proc.violations == []
    print(
        f"A deleted: its partitions released {released:.2f} s later; B grown to 4: new partitions taken "
        f"{taken:.2f} s after the metadata showed them (rebalance interval {REBALANCE_INTERVAL_S} s); "
        f"{len(acked_a)} + {len(acked_b)} ids each delivered once"
    )
