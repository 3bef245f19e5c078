"""HttpDispatcher's dead letters: to a URL, to a Kafka topic, when the sink fails, without a sink."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from jetkafka.processors.cloudevents import HttpDispatcher
from tests.support.channels import committed_offsets, make_channel, wait_until
from tests.support.http_subscriber import HttpSubscriber, Reply


@pytest.fixture
def subscriber() -> Iterator[HttpSubscriber]:
    with HttpSubscriber() as sub:
        yield sub


@pytest.fixture
def sink() -> Iterator[HttpSubscriber]:
    with HttpSubscriber() as sub:
        yield sub


def count(registry: CollectorRegistry, name: str, topic: str) -> float:
    return registry.get_sample_value(name, {"subscription": "g", "topic": topic, "partition": "0"}) or 0.0


def failing(suffix: str, reply: Reply) -> Any:
    """A responder failing every request for the event id ending in ``suffix``."""
    return lambda request: reply if request.ce_id.endswith(suffix) else None


def test_always_failing_record_goes_to_the_dead_letter_url_once_and_the_offset_advances(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber, sink
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b'{"n": 0}'), (0, b"k1", b'{"n": 1}', [("content-type", b"application/json")]), (0, None, b'{"n": 2}')])
    subscriber.responder = failing("-0-1", Reply(500, body=b"database down"))
    registry = CollectorRegistry()
    processor = HttpDispatcher(
        url=subscriber.url, retry={"count": 2, "delay_ms": 50}, dead_letter={"url": sink.url}, registry=registry
    )
    with make_channel(zk_connect, kafka_config, topic, processor):
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 3, what="all three committed")
    ids = [r.ce_id[-1] for r in subscriber.requests()]
    assert ids == ["0", "1", "1", "1", "2"]  # three attempts (two retries), then the next record
    (dead,) = sink.requests()
    event = dead.event()
    assert event["id"] == f"{topic}-0-1" and dead.body == b'{"n": 1}'  # the original event
    assert event["knativeerrordest"] == subscriber.url
    assert event["knativeerrorcode"] == "500"
    assert base64.b64decode(event["knativeerrordata"]) == b"database down"
    assert event["jetkafkaattempts"] == "3" and event["jetkafkaerror"] == "HTTP 500"
    assert event["jetkafkarecord"] == f"{topic}/0/1" and event["partitionkey"] == "k1"
    # The next record is sent only once the failed one is dead-lettered: order holds.
    assert subscriber.requests()[-1].at >= dead.at
    assert count(registry, "jetkafka_dispatch_dead_lettered_total", topic) == 1
    assert count(registry, "jetkafka_dispatch_retried_total", topic) == 2
    assert count(registry, "jetkafka_dispatch_delivered_total", topic) == 2


def test_a_status_not_retried_goes_straight_to_the_dead_letter_sink(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber, sink
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b"bad request")])
    subscriber.default = Reply(400, body=b"schema mismatch")
    processor = HttpDispatcher(
        url=subscriber.url, content_mode="structured", retry={"count": 5, "delay_ms": 50},
        dead_letter={"url": sink.url}, registry=CollectorRegistry(),
    )
    with make_channel(zk_connect, kafka_config, topic, processor):
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 1, what="committed")
    assert subscriber.count() == 1
    (dead,) = sink.requests()
    assert dead.structured  # the dead letter uses the subscription's content mode
    body = json.loads(dead.body)
    assert body["knativeerrorcode"] == 400 and body["jetkafkaattempts"] == 1
    assert base64.b64decode(body["knativeerrordata"]) == b"schema mismatch"


def test_a_failing_dead_letter_sink_keeps_the_record_without_posting_it_again(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber, sink
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b"a"), (0, None, b"b")])
    subscriber.responder = failing("-0-0", Reply(503))
    sink.script(Reply(500), Reply(502))
    registry = CollectorRegistry()
    processor = HttpDispatcher(
        url=subscriber.url, retry={"count": 0, "delay_ms": 100}, dead_letter={"url": sink.url}, registry=registry
    )
    with make_channel(zk_connect, kafka_config, topic, processor):
        wait_until(lambda: len(sink.requests()) >= 2, what="two failed dead-letter attempts")
        assert committed_offsets(zk, "g", topic)[0] == 0  # never committed past an unacknowledged record
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 2, what="both finished")
    assert [r.ce_id[-1] for r in subscriber.requests()] == ["0", "1"]  # the subscriber saw offset 0 once
    assert [r.ce_id[-1] for r in sink.requests()] == ["0", "0", "0"]
    assert count(registry, "jetkafka_dispatch_dead_letter_failures_total", topic) == 2
    assert count(registry, "jetkafka_dispatch_dead_lettered_total", topic) == 1


def test_dead_letters_to_a_kafka_topic_carry_the_error_extensions(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=1)
    dead_topic = topic_factory(partitions=1)
    produce(topic, [(0, b"order-5", b'{"n": 5}', [("content-type", b"application/json"), ("traceparent", b"00-ab-cd-01")])])
    subscriber.default = Reply(503, body=b"maintenance")
    processor = HttpDispatcher(
        url=subscriber.url, retry={"count": 1, "delay_ms": 50}, dead_letter={"topic": dead_topic}, registry=CollectorRegistry()
    )
    with make_channel(zk_connect, kafka_config, topic, processor):
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 1, what="committed past the dead letter")
    consumer = Consumer({**kafka_config, "group.id": f"check-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(dead_topic, 0, 0)])
        message = None
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None, "nothing on the dead-letter topic"
        headers = dict(message.headers() or [])
        assert message.value() == b'{"n": 5}' and message.key() == b"order-5"
        assert headers["ce_id"] == f"{topic}-0-0".encode() and headers["ce_specversion"] == b"1.0"
        assert headers["ce_knativeerrorcode"] == b"503" and headers["ce_knativeerrordest"] == subscriber.url.encode()
        assert base64.b64decode(headers["ce_knativeerrordata"]) == b"maintenance"
        assert headers["ce_jetkafkaattempts"] == b"2" and headers["traceparent"] == b"00-ab-cd-01"
        assert headers["content-type"] == b"application/json"
        # The channel's dead-letter sink adds where the record came from.
        assert headers["jetkafka.source.topic"] == topic.encode() and headers["jetkafka.source.offset"] == b"0"
        assert consumer.poll(1.0) is None  # exactly one dead letter
    finally:
        consumer.close()


def test_invalid_cloudevents_are_dead_lettered_without_being_posted(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber, sink
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b"no id", [("ce_specversion", b"1.0"), ("ce_source", b"/s"), ("ce_type", b"t")]), (0, None, b"ok")])
    processor = HttpDispatcher(url=subscriber.url, dead_letter={"url": sink.url}, registry=CollectorRegistry())
    with make_channel(zk_connect, kafka_config, topic, processor):
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 2, what="committed")
    assert [r.ce_id for r in subscriber.requests()] == [f"{topic}-0-1"]
    (dead,) = sink.requests()
    event = dead.event()
    assert dead.body == b"no id" and event["id"] == f"{topic}-0-0"  # wrapped as a plain record
    assert "missing required attribute(s) id" in event["jetkafkaerror"] and event["jetkafkaattempts"] == "0"


def test_without_a_sink_a_failed_record_is_dropped_and_counted(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, b"a"), (0, None, b"b")])
    subscriber.responder = failing("-0-0", Reply(410))
    registry = CollectorRegistry()
    with make_channel(zk_connect, kafka_config, topic, HttpDispatcher(url=subscriber.url, registry=registry)):
        wait_until(lambda: committed_offsets(zk, "g", topic).get(0) == 2, what="committed")
    assert [r.ce_id[-1] for r in subscriber.requests()] == ["0", "1"]
    assert count(registry, "jetkafka_dispatch_dropped_total", topic) == 1
