"""Helpers for tests that run channels in-process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, InboundChannel, PartitionSource
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def channel_config(zk_connect: str, kafka_config: dict[str, Any], topics: Iterable[str], **channel: Any) -> dict[str, Any]:
    return {
        "zookeeper": {"connect": zk_connect, "session_timeout_s": 6},
        "kafka": dict(kafka_config),
        "channel": {"group": "g", "topics": list(topics), "threads": 2, "rebalance_delay_ms": 50, **channel},
    }


def make_channel(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, processor: BatchEventProcessor, **channel: Any
) -> InboundChannel:
    return InboundChannel.from_dict(channel_config(zk_connect, kafka_config, [topic], **channel), processor=processor)


def values(count: int, partitions: int, start: int = 0) -> list[tuple[int, bytes, bytes]]:
    """``count`` records ``(partition, key, value)`` with unique decimal ids as values."""
    return [(i % partitions, f"k{i}".encode(), str(i).encode()) for i in range(start, start + count)]


class RecordingProcessor(BatchEventProcessor):
    """Records every delivered event and checks the per-partition threading rule as it goes."""

    def __init__(self, response: Callable[[PartitionSource, EventBatch], BatchResponse] | None = None) -> None:
        self.lock = threading.Lock()
        self.delivered: list[tuple[str, int, int, bytes]] = []  # topic, partition, offset, value
        self.in_flight: set[tuple[str, int]] = set()
        self.violations: list[str] = []
        self.calls: list[tuple[str, tuple[str, int], Any]] = []
        self._response = response or (lambda source, events: BatchResponse.advance())

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        key = (source.topic, source.partition)
        with self.lock:
            if key in self.in_flight:
                self.violations.append(f"{key} delivered to two threads at once")
            self.in_flight.add(key)
        try:
            offsets = [e.offset for e in events]
            if offsets != sorted(offsets) or offsets[0] != source.head_offset:
                self.violations.append(f"{key} batch out of order: {offsets[:5]}")
            time.sleep(0.001)  # widen the window in which a second thread could sneak in
            with self.lock:
                self.delivered.extend((e.topic, e.partition, e.offset, e.value or b"") for e in events)
            return self._response(source, events)
        finally:
            with self.lock:
                self.in_flight.discard(key)

    def record(self, name: str, source: PartitionSource, extra: Any = None) -> None:
        with self.lock:
            self.calls.append((name, (source.topic, source.partition), extra))

    def on_idle(self, source: PartitionSource) -> BatchResponse | None:
        self.record("idle", source, source.head_offset)
        return None

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        self.record("termination", source, source.head_offset)
        return BatchResponse.advance()

    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        self.record("exception", source, error)
        return None

    def ids(self) -> list[int]:
        with self.lock:
            return [int(v) for *_, v in self.delivered]

    def calls_named(self, name: str) -> list[tuple[str, tuple[str, int], Any]]:
        with self.lock:
            return [c for c in self.calls if c[0] == name]


def committed_offsets(zk_client: Any, group: str, topic: str) -> dict[int, int]:
    return OffsetStore(zk_client, GroupPaths(group)).read_all(topic)
