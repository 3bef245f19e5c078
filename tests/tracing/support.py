"""Records without a broker, and W3C trace contexts to put in their headers."""

from __future__ import annotations

from dataclasses import dataclass, field

TOPIC = "orders"


@dataclass
class FakeMessage:
    """What the channel hands a processor (a confluent_kafka Message), for one record."""

    _offset: int
    _headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    _topic: str = TOPIC
    _partition: int = 3
    _value: bytes = b'{"n": 1}'

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return b"k"

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._headers


def traceparent(trace_id: int, span_id: int) -> bytes:
    return f"00-{trace_id:032x}-{span_id:016x}-01".encode()


def traced(offset: int, trace_id: int, span_id: int) -> FakeMessage:
    return FakeMessage(offset, [("traceparent", traceparent(trace_id, span_id))])
