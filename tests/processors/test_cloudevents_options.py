"""HttpDispatcher's options, retry policy and record encoding, without a broker."""

from __future__ import annotations

import base64
import email.utils
import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from jetkafka.config import parse_config
from jetkafka.errors import ProcessorError
from jetkafka.processors._loading import load_processor
from jetkafka.processors.cloudevents import HttpDispatcher
from jetkafka.processors.cloudevents._delivery import RetryPolicy, parse_retry_after
from jetkafka.processors.cloudevents._encoding import EncodingError, RecordEncoder, error_extensions


@dataclass
class FakeRecord:
    topic: str = "orders"
    partition: int = 2
    offset: int = 7
    key: bytes | None = None
    value: bytes | None = b"{}"
    timestamp: int | None = 1_700_000_000_000
    headers: list[tuple[str, bytes]] = field(default_factory=list)


BINARY_HEADERS = [
    ("ce_specversion", b"1.0"),
    ("ce_id", b"evt-1"),
    ("ce_source", b"/billing"),
    ("ce_type", b"com.example.invoice"),
    ("content-type", b"application/json"),
]


def encoder(mode: str = "as-received") -> RecordEncoder:
    return RecordEncoder("com.example.plain", "/kafka/{topic}", None, mode)


# -- retry policy ---------------------------------------------------------------------------


def within_jitter(waits: list[int], formula: list[int]) -> bool:
    return all(f <= w <= f * 1.2 for w, f in zip(waits, formula, strict=True))


def test_backoff_policies_follow_their_formula_and_the_cap() -> None:
    exponential = RetryPolicy.from_options({"count": 5, "delay_ms": 100, "max_delay_ms": 500})
    assert within_jitter([exponential.backoff_ms(n) for n in range(1, 6)], [100, 200, 400, 500, 500])
    linear = RetryPolicy.from_options({"backoff": "linear", "delay_ms": 100, "max_delay_ms": 250})
    assert within_jitter([linear.backoff_ms(n) for n in range(1, 5)], [100, 200, 250, 250])
    huge = RetryPolicy.from_options({"count": 1000, "delay_ms": 1, "max_delay_ms": 5000})
    assert within_jitter([huge.backoff_ms(1000)], [5000])


def test_retry_after_is_honoured_on_429_and_503_up_to_its_cap() -> None:
    policy = RetryPolicy.from_options({"delay_ms": 100, "retry_after_max_ms": 2000})
    assert policy.wait_ms(1, 429, "1") == 1000
    assert policy.wait_ms(1, 503, "30") == 2000  # capped
    assert 100 <= policy.wait_ms(1, 500, "30") <= 120  # only 429 and 503 ask to wait (the back-off, jittered)
    assert 100 <= policy.wait_ms(1, 429, "0") <= 120  # never shorter than the back-off
    assert 100 <= policy.wait_ms(1, 429, "soon") <= 120  # unreadable: ignored
    ignoring = RetryPolicy.from_options({"delay_ms": 100, "retry_after_max_ms": 0})
    assert 100 <= ignoring.wait_ms(1, 429, "30") <= 120


def test_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 5, usegmt=True)
    assert parse_retry_after(date, now=now) == 5000
    assert parse_retry_after(email.utils.formatdate(now - 5, usegmt=True), now=now) == 0


def test_retried_statuses_default_to_knatives_set_and_accept_classes_and_ranges() -> None:
    policy = RetryPolicy()
    assert all(policy.retryable(s) for s in (None, 404, 408, 409, 429, 500, 503, 599))
    assert not any(policy.retryable(s) for s in (400, 401, 403, 410, 413, 302))
    custom = RetryPolicy.from_options({"retry_on": [429, "502-504"]})
    assert custom.retry_on == frozenset({429, 502, 503, 504})


@pytest.mark.parametrize(
    ("retry", "message"),
    [
        ({"cuont": 3}, r"retry\.cuont: unknown option; rename it to 'count'"),
        ({"backoff": "expo"}, r"retry\.backoff: 'expo' is not exponential or linear"),
        ({"count": -1}, r"retry\.count: -1 is out of range 0\.\.1000"),
        ({"count": True}, r"retry\.count: expected a whole number, got True"),
        ({"delay_ms": 1000, "max_delay_ms": 10}, r"retry\.max_delay_ms: 10 is smaller than delay_ms \(1000\)"),
        ({"retry_on": ["2xx"]}, r"retry\.retry_on: '2xx' includes 2xx"),
        ({"retry_on": "5xx"}, r"retry\.retry_on: expected a list"),
        ({"retry_on": ["teapot"]}, r"retry\.retry_on: 'teapot' is not a status code"),
        ({"timeout_ms": 0}, r"retry\.timeout_ms: 0 is out of range"),
    ],
)
def test_retry_option_mistakes_name_the_option_and_the_fix(retry: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy.from_options(retry)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "localhost:8080"}, r"url: 'localhost:8080' is not an http:// or https:// URL"),
        ({"url": "http://h/", "content_mode": "binay"}, r"content_mode: 'binay' is not one of"),
        ({"url": "http://h/", "dead_letter": {"url": "http://d/", "topic": "x"}}, r"dead_letter: expected one of url or topic"),
        ({"url": "http://h/", "dead_letter": {"topic": "bad topic"}}, r"dead_letter\.topic: 'bad topic' is not a topic name"),
        ({"url": "http://h/", "event_type": ""}, r"event_type: expected a non-empty string"),
        ({"url": "http://h/", "max_turn_ms": 0}, r"max_turn_ms: 0 is out of range"),
    ],
)
def test_dispatcher_option_mistakes_are_reported(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HttpDispatcher(**options)


def test_a_dead_letter_topic_the_channel_consumes_is_refused_at_start() -> None:
    context = SimpleNamespace(
        group="g", config=SimpleNamespace(kafka={"bootstrap.servers": "k:9092"}, channel=SimpleNamespace(topics=("orders",)))
    )
    dispatcher = HttpDispatcher(url="http://h/", dead_letter={"topic": "orders"})
    with pytest.raises(ProcessorError, match=r"dead_letter\.topic: 'orders' is a topic this channel consumes"):
        dispatcher.on_start(context)  # type: ignore[arg-type]


def test_the_loader_reports_a_mistake_in_yaml_options() -> None:
    config = parse_config(
        {
            "zookeeper": {"connect": "z:2181"},
            "kafka": {"bootstrap.servers": "k:9092"},
            "channel": {"group": "g", "topics": ["t"]},
            "processor": {
                "class": "jetkafka.processors.cloudevents:HttpDispatcher",
                "options": {"url": "http://127.0.0.1:1/e", "retry": {"count": 2, "delay_msec": 10}},
            },
        }
    )
    with pytest.raises(ProcessorError, match=r"retry\.delay_msec: unknown option; rename it to 'delay_ms'"):
        load_processor(config.processor)  # type: ignore[arg-type]
    good = dict(config.processor.options)  # type: ignore[union-attr]
    good["retry"] = {"count": 2, "delay_ms": 10, "retry_on": ["5xx", 429]}
    built = load_processor(type(config.processor)(config.processor.class_path, good))  # type: ignore[union-attr,misc]
    assert isinstance(built, HttpDispatcher) and built.policy.count == 2


# -- records as CloudEvents -------------------------------------------------------------------


def test_binary_record_keeps_its_value_byte_for_byte_and_its_attributes() -> None:
    value = b'{ "total" :  12.50 }'
    record = FakeRecord(value=value, key=b"cust-9", headers=[*BINARY_HEADERS, ("ce_region", b"eu west"), ("x-tenant", b"acme")])
    event = encoder().decode(record)
    headers, body = event.to_http(encoder().mode_for(event))
    assert body == value
    assert headers["ce-id"] == "evt-1" and headers["ce-type"] == "com.example.invoice"
    assert headers["ce-region"] == "eu%20west"  # percent-encoded per the HTTP binding
    assert headers["ce-partitionkey"] == "cust-9"
    assert headers["content-type"] == "application/json"
    assert headers["x-tenant"] == "acme"
    assert headers["ce-time"] == "2023-11-14T22:13:20Z"  # the record's timestamp: same on every attempt


def test_content_mode_can_be_forced() -> None:
    record = FakeRecord(value=b'{"total": 3}', headers=BINARY_HEADERS)
    forced = encoder("structured")
    event = forced.decode(record)
    headers, body = event.to_http(forced.mode_for(event))
    assert headers["content-type"] == "application/cloudevents+json"
    parsed = json.loads(body)
    assert parsed["id"] == "evt-1" and parsed["data"] == {"total": 3}


def test_plain_binary_data_goes_base64_in_structured_mode() -> None:
    record = FakeRecord(value=b"\xff\x00\xfe", headers=[("content-type", b"application/octet-stream")])
    forced = encoder("structured")
    event = forced.decode(record)
    _, body = event.to_http("structured")
    parsed = json.loads(body)
    assert parsed["id"] == "orders-2-7" and parsed["source"] == "/kafka/orders"
    assert base64.b64decode(parsed["data_base64"]) == b"\xff\x00\xfe"


def test_invalid_cloudevents_are_refused_rather_than_invented() -> None:
    with pytest.raises(EncodingError, match="missing required attribute"):
        encoder().decode(FakeRecord(headers=[("ce_specversion", b"1.0"), ("ce_source", b"/s"), ("ce_type", b"t")]))
    with pytest.raises(EncodingError, match="specversion"):
        encoder().decode(FakeRecord(headers=[("ce_specversion", b"9.9"), *BINARY_HEADERS[1:4]]))
    with pytest.raises(EncodingError, match="not supported"):
        encoder().decode(FakeRecord(headers=[("content-type", b"application/cloudevents+avro")]))
    with pytest.raises(EncodingError, match="JSONDecodeError"):
        encoder().decode(FakeRecord(value=b"{oops", headers=[("content-type", b"application/cloudevents+json")]))


def test_only_valid_end_to_end_headers_are_forwarded() -> None:
    record = FakeRecord(
        headers=[
            ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            ("Connection", b"close"),
            ("content-length", b"99"),
            ("bad header", b"x"),
            ("x-binary", b"\xff\xfe"),
            ("x-newline", b"a\r\nInjected: 1"),
        ]
    )
    headers, _ = encoder().decode(record).to_http("binary")
    forwarded = {k for k in headers if not k.startswith("ce-")}
    assert forwarded == {"traceparent"}


def test_error_extensions_truncate_the_response_body() -> None:
    extensions = error_extensions("http://sub/", "HTTP 500", 500, b"x" * 5000, 4, FakeRecord())
    assert len(extensions["knativeerrordata"]) == 1024
    assert base64.b64decode(extensions["knativeerrordata"]) == b"x" * 768
    assert extensions["knativeerrorcode"] == 500 and extensions["knativeerrordest"] == "http://sub/"
    assert extensions["jetkafkarecord"] == "orders/2/7" and extensions["jetkafkaattempts"] == 4
    transport = error_extensions("http://sub/", "ConnectionError: refused", None, b"", 1, FakeRecord())
    assert "knativeerrorcode" not in transport and "knativeerrordata" not in transport
