"""Where the CloudEvents dispatcher puts an event it could not deliver.

Either an HTTP endpoint (the event POSTed in the subscription's content mode) or a Kafka
topic (the event as a binary-mode CloudEvents record, through the channel's
:class:`~jetkafka.channel._dead_letter.DeadLetterSink`, which waits for ``acks=all``). In both
the event carries the error extensions of :func:`~jetkafka.processors.cloudevents._encoding.error_extensions`.
A sink that does not acknowledge raises :class:`DeadLetterFailed`; the dispatcher then keeps
the record and tries the sink again later, so a record is never committed past unacknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from jetkafka.channel._dead_letter import DeadLetterSink
from jetkafka.channel._errors import DeadLetterError
from jetkafka.errors import JetkafkaError
from jetkafka.processors.cloudevents._delivery import HttpSender
from jetkafka.processors.cloudevents._encoding import Mode, Record, RecordEvent


class DeadLetterFailed(JetkafkaError):
    """The dead-letter sink did not acknowledge the event."""


class DeliveryFailed(JetkafkaError):
    """The failure a dead-lettered record is recorded with (its class names the cause)."""


class DeadLetterTarget(Protocol):
    name: str

    def send(self, record: Record, event: RecordEvent, extensions: Mapping[str, Any], attempts: int) -> None: ...

    def close(self) -> None: ...


class UrlDeadLetter:
    """POSTs the event, with its error extensions, to ``url``; a 2xx answer acknowledges it."""

    def __init__(self, url: str, sender: HttpSender, mode_for: Any) -> None:
        self.url = url
        self.name = url
        self._sender = sender
        self._mode_for = mode_for  # RecordEvent -> Mode, the subscription's choice

    def send(self, record: Record, event: RecordEvent, extensions: Mapping[str, Any], attempts: int) -> None:
        mode: Mode = self._mode_for(event)
        headers, body = event.to_http(mode, extensions)
        attempt = self._sender.post(self.url, headers, body)
        if not attempt.ok:
            raise DeadLetterFailed(f"dead-letter URL {self.url} answered {attempt.describe()}")

    def close(self) -> None:
        """The sender belongs to the dispatcher, which closes it."""


class _DeadLetterMessage:
    """The shape of a confluent-kafka ``Message`` that :class:`DeadLetterSink` reads."""

    def __init__(self, record: Record, headers: list[tuple[str, bytes]], value: bytes) -> None:
        self._record, self._headers, self._value = record, headers, value

    def topic(self) -> str:
        return self._record.topic

    def partition(self) -> int:
        return self._record.partition

    def offset(self) -> int:
        return self._record.offset

    def key(self) -> bytes | None:
        return self._record.key

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        ts = self._record.timestamp
        return (0, 0) if ts is None else (1, ts)  # 1: TIMESTAMP_CREATE_TIME


class TopicDeadLetter:
    """Produces the event as a binary-mode CloudEvents record to a Kafka topic."""

    def __init__(self, kafka: Mapping[str, Any], topic: str, group: str) -> None:
        self.name = f"topic {topic}"
        self.topic = topic
        self._sink = DeadLetterSink(kafka, topic, group)

    def send(self, record: Record, event: RecordEvent, extensions: Mapping[str, Any], attempts: int) -> None:
        headers, value = event.to_kafka(extensions)
        reason = str(extensions.get("jetkafkaerror", "delivery failed"))
        try:
            self._sink.send(_DeadLetterMessage(record, headers, value), DeliveryFailed(reason), attempts)
        except DeadLetterError as exc:
            raise DeadLetterFailed(str(exc)) from exc

    def close(self) -> None:
        self._sink.close()
