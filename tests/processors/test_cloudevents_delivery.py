"""HttpDispatcher against a real local HTTP subscriber: encodings, retries, Retry-After, release."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from jetkafka import InboundChannel
from jetkafka.processors.cloudevents import HttpDispatcher
from tests.support.channels import committed_offsets, make_channel, wait_until
from tests.support.http_subscriber import HttpSubscriber, Reply

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def subscriber() -> Iterator[HttpSubscriber]:
    with HttpSubscriber() as sub:
        yield sub


def dispatcher_channel(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, registry: CollectorRegistry, channel: dict[str, Any] | None = None,
    **options: Any,
) -> InboundChannel:
    processor = HttpDispatcher(registry=registry, **options)
    return make_channel(zk_connect, kafka_config, topic, processor, **(channel or {}))


def sample(registry: CollectorRegistry, name: str, topic: str, partition: int = 0, subscription: str = "g") -> float:
    labels = {"subscription": subscription, "topic": topic, "partition": str(partition)}
    return registry.get_sample_value(name, labels) or 0.0


def test_binary_structured_and_plain_records_arrive_as_cloudevents(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=1)
    binary_value = b'{ "amount" : 12.50 }'
    structured = {
        "specversion": "1.0",
        "id": "s-1",
        "source": "/shop",
        "type": "com.example.order.placed",
        "datacontenttype": "application/json",
        "traceparent": TRACEPARENT,
        "data": {"order": 2},
    }
    produce(
        topic,
        [
            (0, None, binary_value, [
                ("ce_specversion", b"1.0"), ("ce_id", b"b-1"), ("ce_source", b"/billing"),
                ("ce_type", b"com.example.invoice"), ("ce_region", b"eu"), ("content-type", b"application/json"),
                ("traceparent", TRACEPARENT.encode()),
            ]),
            (0, b"cust-7", json.dumps(structured).encode(), [("content-type", b"application/cloudevents+json")]),
            (0, b"k", b"hello", [("content-type", b"text/plain"), ("x-tenant", b"acme")]),
        ],
    )
    registry = CollectorRegistry()
    with dispatcher_channel(
        zk_connect, kafka_config, topic, registry, url=subscriber.url, event_type="com.example.raw", event_source="/kafka/{topic}"
    ):
        wait_until(lambda: subscriber.count() >= 3 and committed_offsets(zk, "g", topic).get(0) == 3, what="3 deliveries")
    binary, struct, plain = subscriber.requests()

    assert binary.method == "POST" and binary.path == "/events"
    assert binary.body == binary_value  # the record's value, byte for byte
    assert binary.headers["ce-specversion"] == "1.0" and binary.headers["ce-id"] == "b-1"
    assert binary.headers["ce-source"] == "/billing" and binary.headers["ce-type"] == "com.example.invoice"
    assert binary.headers["ce-region"] == "eu" and binary.headers["content-type"] == "application/json"
    assert binary.headers["traceparent"] == TRACEPARENT  # the trace continues

    assert struct.headers["content-type"] == "application/cloudevents+json"
    body = json.loads(struct.body)
    assert {k: body[k] for k in ("id", "source", "type", "traceparent", "data")} == {
        "id": "s-1", "source": "/shop", "type": "com.example.order.placed", "traceparent": TRACEPARENT, "data": {"order": 2},
    }
    assert body["partitionkey"] == "cust-7"  # the record key, per the Kafka binding

    assert plain.body == b"hello"
    assert plain.headers["ce-id"] == f"{topic}-0-2" and plain.headers["ce-type"] == "com.example.raw"
    assert plain.headers["ce-source"] == f"/kafka/{topic}" and plain.headers["ce-partitionkey"] == "k"
    assert plain.headers["content-type"] == "text/plain" and plain.headers["x-tenant"] == "acme"
    assert "ce-time" in plain.headers
    assert sample(registry, "jetkafka_dispatch_delivered_total", topic) == 3
    assert registry.get_sample_value(
        "jetkafka_dispatch_latency_seconds_count", {"subscription": "g", "topic": topic}
    ) == 3


def test_failing_twice_then_succeeding_arrives_after_two_retries_with_the_backoff(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b"first"), (0, None, b"second"), (0, None, b"third")])
    subscriber.script(Reply(500, body=b"busy"), Reply(503))
    registry = CollectorRegistry()
    retry = {"count": 3, "backoff": "exponential", "delay_ms": 300, "max_delay_ms": 5000}
    with dispatcher_channel(zk_connect, kafka_config, topic, registry, url=subscriber.url, retry=retry):
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 3, what="all three committed")
    got = subscriber.requests()
    assert [r.ce_id for r in got] == [f"{topic}-0-0"] * 3 + [f"{topic}-0-1", f"{topic}-0-2"]
    # Lower bounds only: retry n waits delay * 2**(n-1).
    assert got[1].at - got[0].at >= 0.3
    assert got[2].at - got[1].at >= 0.6
    assert got[2].body == b"first"
    assert sample(registry, "jetkafka_dispatch_retried_total", topic) == 2
    assert sample(registry, "jetkafka_dispatch_delivered_total", topic) == 3
    assert sample(registry, "jetkafka_dispatch_dead_lettered_total", topic) == 0


def test_retry_after_is_honoured_and_capped(zk, zk_connect, kafka_config, topic_factory, produce, subscriber) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b"a"), (0, None, b"b")])
    subscriber.script(Reply(429, headers={"Retry-After": "1"}))
    # The second record is answered 503 asking for an hour: the cap (400 ms) wins.
    subscriber.responder = lambda r: (
        Reply(503, headers={"Retry-After": "3600"}) if r.ce_id.endswith("-1") and r.index == 2 else None
    )
    registry = CollectorRegistry()
    retry = {"count": 2, "delay_ms": 50, "retry_after_max_ms": 400}
    with dispatcher_channel(zk_connect, kafka_config, topic, registry, url=subscriber.url, retry=retry):
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 2, timeout=60, what="both delivered")
    got = subscriber.requests()
    assert [r.ce_id[-1] for r in got] == ["0", "0", "1", "1"]
    assert got[1].at - got[0].at >= 0.4  # at least the capped Retry-After (1 s capped to 400 ms)
    assert got[3].at - got[2].at >= 0.4


def test_retry_after_below_the_cap_is_waited_in_full(zk, zk_connect, kafka_config, topic_factory, produce, subscriber) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b"a")])
    subscriber.script(Reply(429, headers={"Retry-After": "1"}))
    registry = CollectorRegistry()
    with dispatcher_channel(zk_connect, kafka_config, topic, registry, url=subscriber.url, retry={"count": 1, "delay_ms": 10}):
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 1, what="delivered")
    first, second = subscriber.requests()
    assert second.at - first.at >= 1.0


def test_a_release_does_not_wait_for_the_backoff(zk, zk_connect, kafka_config, topic_factory, produce, subscriber) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, str(i).encode()) for i in range(3)])
    subscriber.responder = lambda r: Reply(503) if r.ce_id.endswith("-1") else None
    registry = CollectorRegistry()
    retry = {"count": 5, "delay_ms": 60_000, "max_delay_ms": 60_000}
    channel = dispatcher_channel(
        zk_connect, kafka_config, topic, registry, {"shutdown_timeout_s": 20}, url=subscriber.url, retry=retry
    )
    channel.start()
    try:
        wait_until(lambda: subscriber.count() >= 2, what="the failing attempt")
    finally:
        clean = channel.shutdown()
    # A shutdown that waited for the one-minute back-off would have timed out (not clean).
    assert clean
    assert [r.ce_id[-1] for r in subscriber.requests()] == ["0", "1"]
    assert committed_offsets(zk, "g", topic)[0] == 1  # offset 0 finished, offset 1 still due


def test_a_slow_subscriber_gives_the_partition_back_between_records(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, str(i).encode()) for i in range(60)])
    subscriber.default = Reply(delay_s=0.25)
    registry = CollectorRegistry()
    channel = dispatcher_channel(
        zk_connect, kafka_config, topic, registry, {"shutdown_timeout_s": 10, "batch_max_events": 60},
        url=subscriber.url, max_turn_ms=500,
    )
    channel.start()
    try:
        wait_until(lambda: subscriber.count() >= 3, what="deliveries under way")
    finally:
        clean = channel.shutdown()
    # 60 records at 250 ms each would outlast the 10 s shutdown timeout without the turn limit.
    assert clean
    delivered = subscriber.count()
    assert delivered < 60
    # Whatever was delivered was committed: a graceful stop sends nothing twice.
    assert committed_offsets(zk, "g", topic)[0] == delivered
    assert len({r.ce_id for r in subscriber.requests()}) == delivered
