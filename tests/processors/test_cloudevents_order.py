"""HttpDispatcher keeps each partition's order, and subscriptions of one topic stay independent."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from jetkafka.processors.cloudevents import HttpDispatcher
from tests.support.channels import committed_offsets, make_channel, values, wait_until
from tests.support.http_subscriber import HttpSubscriber, Received, Reply

PARTITIONS = 3
PER_PARTITION = 80


@pytest.fixture
def subscriber() -> Iterator[HttpSubscriber]:
    with HttpSubscriber() as sub:
        yield sub


def position(request: Received) -> tuple[int, int]:
    """(partition, offset) from the event id ``<topic>-<partition>-<offset>``."""
    _, partition, offset = request.ce_id.rsplit("-", 2)
    return int(partition), int(offset)


def test_order_is_kept_per_partition_through_retries(zk, zk_connect, kafka_config, topic_factory, produce, subscriber) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, values(PARTITIONS * PER_PARTITION, PARTITIONS))
    first_attempts: set[str] = set()

    def flaky(request: Received) -> Reply | None:
        # Every 13th record of a partition fails its first attempt, so retries interleave.
        _, offset = position(request)
        if offset % 13 == 5 and request.ce_id not in first_attempts:
            first_attempts.add(request.ce_id)
            return Reply(503)
        return None

    subscriber.responder = flaky
    processor = HttpDispatcher(url=subscriber.url, retry={"count": 3, "delay_ms": 20}, registry=CollectorRegistry())
    done = {p: PER_PARTITION for p in range(PARTITIONS)}
    with make_channel(zk_connect, kafka_config, topic, processor, batch_max_events=20, threads=2):
        wait_until(lambda: committed_offsets(zk, "g", topic) == done, timeout=90, what="every partition committed")
    arrivals: dict[int, list[int]] = defaultdict(list)
    for request in subscriber.requests():
        partition, offset = position(request)
        arrivals[partition].append(offset)
        assert request.body == str(offset * PARTITIONS + partition).encode()  # values() ids
    for partition in range(PARTITIONS):
        offsets = arrivals[partition]
        # Non-decreasing (a retry repeats its offset, nothing overtakes it) and complete.
        assert offsets == sorted(offsets), f"partition {partition} out of order"
        assert list(dict.fromkeys(offsets)) == list(range(PER_PARTITION))
        retried = [o for o in range(PER_PARTITION) if offsets.count(o) > 1]
        assert retried == [o for o in range(PER_PARTITION) if o % 13 == 5]


def test_two_subscriptions_of_one_topic_deliver_independently(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(40, 2))
    registry = CollectorRegistry()
    with HttpSubscriber(default=Reply(503)) as down:
        billing = HttpDispatcher(url=subscriber.url, registry=registry)
        # The other subscriber is down and its retries are long: billing must not notice.
        audit = HttpDispatcher(url=down.url, retry={"count": 100, "delay_ms": 60_000}, registry=registry)
        with make_channel(zk_connect, kafka_config, topic, billing, group="billing"), make_channel(
            zk_connect, kafka_config, topic, audit, group="audit"
        ):
            wait_until(lambda: committed_offsets(zk, "billing", topic) == {0: 20, 1: 20}, what="billing done")
            wait_until(lambda: down.count() >= 2, what="audit's first attempts")
            assert committed_offsets(zk, "audit", topic) == {0: 0, 1: 0}
        assert sorted(int(r.body) for r in subscriber.requests()) == list(range(40))
        assert {position(r)[1] for r in down.requests()} == {0}  # audit is stuck on each first record
    for partition in (0, 1):
        labels = {"topic": topic, "partition": str(partition)}
        delivered = registry.get_sample_value("jetkafka_dispatch_delivered_total", {"subscription": "billing", **labels})
        retried = registry.get_sample_value("jetkafka_dispatch_retried_total", {"subscription": "audit", **labels})
        assert delivered == 20 and retried == 1
