"""HttpDispatcher stamps each event with its partition hold's fencing token (``jetkafkaepoch``),
greater after every hand-over, and forgets an unfinished record when the partition is moved.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from jetkafka.ops._reset import reset_offsets
from jetkafka.processors.cloudevents import HttpDispatcher
from tests.support.channels import committed_offsets, make_channel, values, wait_until
from tests.support.http_subscriber import HttpSubscriber, Received, Reply

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def subscriber() -> Iterator[HttpSubscriber]:
    with HttpSubscriber() as sub:
        yield sub


def position(request: Received) -> tuple[int, int]:
    """(partition, offset) from the event id ``<topic>-<partition>-<offset>``."""
    _, partition, offset = request.ce_id.rsplit("-", 2)
    return int(partition), int(offset)


def token(request: Received) -> int:
    return int(request.event()["jetkafkaepoch"])


def test_every_event_carries_its_holds_token_and_a_new_owner_sends_a_greater_one(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=2)
    traced = [(p, k, v, [("traceparent", TRACEPARENT.encode())]) for p, k, v in values(20, 2)]
    produce(topic, traced)
    registry = CollectorRegistry()
    first = HttpDispatcher(url=subscriber.url, registry=registry)
    with make_channel(zk_connect, kafka_config, topic, first) as a:
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 10, 1: 10}, what="the first records delivered")
        held = {p: a.lease(topic, p).epoch for p in (0, 1)}  # type: ignore[union-attr]
        second = HttpDispatcher(url=subscriber.url, registry=registry)
        with make_channel(zk_connect, kafka_config, topic, second) as b:
            # The group spreads out: one partition is released by A and taken by B.
            wait_until(lambda: len(b.owned_partitions()) == 1, timeout=60, what="B to take a partition")
            (moved,) = b.owned_partitions()
            produce(topic, values(20, 2, start=20))
            wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 20, 1: 20}, what="every record delivered")
            taken = b.lease(*moved).epoch  # type: ignore[union-attr]
    requests = subscriber.requests()
    assert len(requests) == 40
    tokens: dict[int, list[int]] = defaultdict(list)
    for request in requests:
        partition, offset = position(request)
        tokens[partition].append(token(request))
        if offset < 10:
            assert token(request) == held[partition]
            assert request.headers.get("traceparent") == TRACEPARENT  # tracing travels as before
    for partition, seen in tokens.items():
        assert seen == sorted(seen), f"partition {partition}: a token went back: {seen}"
    assert taken > held[moved[1]]
    assert tokens[moved[1]][-1] == taken
    assert set(tokens[1 - moved[1]]) == {held[1 - moved[1]]}


def test_a_reset_mid_retry_starts_the_record_over(zk, zk_connect, kafka_config, topic_factory, produce, subscriber) -> None:
    """Offset 3 fails, is given up and is being offered to a dead-letter URL that fails too,
    when the subscriber is fixed and the partition is reset to offset 3 to deliver it again:
    the record is POSTed to the subscriber as a new delivery, not kept in the old position's
    dead-letter loop."""
    topic = topic_factory(partitions=1)
    produce(topic, values(10, 1))
    broken = {"on": True}
    subscriber.responder = lambda r: Reply(503) if broken["on"] and position(r)[1] == 3 else None
    with HttpSubscriber(default=Reply(500)) as dead_letter:
        processor = HttpDispatcher(
            url=subscriber.url,
            retry={"count": 0, "delay_ms": 300},
            dead_letter={"url": dead_letter.url},
            registry=CollectorRegistry(),
        )
        with make_channel(zk_connect, kafka_config, topic, processor) as channel:
            wait_until(lambda: dead_letter.count() >= 2, timeout=60, what="the dead-letter attempts of offset 3")
            assert committed_offsets(zk, "g", topic) == {0: 3}
            broken["on"] = False
            reset_offsets(channel.config, topic, 3, timeout=60)
            wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 10}, timeout=60, what="offset 3 delivered")
    attempts = [position(r)[1] for r in subscriber.requests()]
    assert attempts == [0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9]
    assert {position(r)[1] for r in dead_letter.requests()} == {3}


def test_a_forward_reset_mid_retry_never_resends_the_old_position(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(10, 1))
    subscriber.responder = lambda r: Reply(503) if position(r)[1] == 3 else None
    processor = HttpDispatcher(
        url=subscriber.url, retry={"count": 5, "delay_ms": 1500, "backoff": "linear"}, registry=CollectorRegistry()
    )
    with make_channel(zk_connect, kafka_config, topic, processor) as channel:
        wait_until(lambda: any(position(r)[1] == 3 for r in subscriber.requests()), what="offset 3 attempted")
        reset_offsets(channel.config, topic, 6, timeout=60)
        moved = time.monotonic()
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 10}, timeout=60, what="the rest delivered")
    late = [position(r)[1] for r in subscriber.requests() if r.at > moved]
    assert late == [6, 7, 8, 9], late
