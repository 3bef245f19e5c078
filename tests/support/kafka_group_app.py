"""A plain confluent-kafka consumer-group application: what a team moves onto jetkafka and back.

It processes what it polls and commits synchronously after each poll, so what it processed is
exactly what lies below its committed offsets once it closed: the accounting of a switch-over
is then exact. ``subscribe=True`` joins the group as a member (a broker with consumer groups:
Tansu); ``False`` assigns every partition from the group's committed offsets, which is how the
same application resumes on a broker that keeps group offsets but does not assign (the dev
stack's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_STORED, Consumer, TopicPartition

# Tansu answers a join after half the session timeout: keep it short.
_SESSION_TIMEOUT_MS = 6000


class KafkaGroupApp:
    """Consumes ``topic`` as Kafka group ``group`` on a thread of its own until stopped."""

    def __init__(
        self, kafka: dict[str, Any], group: str, topic: str, partitions: int, subscribe: bool, auto_offset_reset: str = "earliest"
    ) -> None:
        self.consumed: list[tuple[int, int, int]] = []  # partition, offset, id
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.assigned = threading.Event()
        self._consumer = Consumer(
            {
                **kafka,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": auto_offset_reset,
                "session.timeout.ms": _SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 500,
            }
        )
        if subscribe:
            self._consumer.subscribe([topic], on_assign=lambda c, parts: self.assigned.set())
        else:
            self._consumer.assign([TopicPartition(topic, p, OFFSET_STORED) for p in range(partitions)])
            self.assigned.set()
        self._thread = threading.Thread(target=self._run, name=f"kafka-group-app-{group}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            messages = self._consumer.consume(200, timeout=0.1)
            records = [m for m in messages if m.error() is None]
            if not records:
                continue
            with self._lock:
                self.consumed.extend((m.partition(), m.offset(), int(m.value())) for m in records)
            self._consumer.commit(asynchronous=False)

    def ids(self) -> list[int]:
        with self._lock:
            return [ident for *_, ident in self.consumed]

    def wait(self, predicate: Callable[[list[int]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.ids()):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for the Kafka group app: {what}")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop after the current poll's commit, and leave the group."""
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()
