"""Steady load for fault tests, and exact accounting of what was delivered.

:class:`AckedProducer` writes unique decimal ids at a steady rate from a background thread.
Only ids whose delivery the broker acknowledged count as sent, so a test that stops the broker
can still compare exact sets: every acknowledged id must be delivered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger(__name__)


class AckedProducer:
    """Produces ids ``first_id, first_id + 1, ...`` round-robin over ``partitions`` until stopped.

    ``rate`` is in records per second. ``acked`` maps each acknowledged id to its
    ``(partition, offset)``; ``failed`` maps each id whose delivery failed to the error.
    ``set_partitions`` changes the partitions written to from the next record on.
    """

    def __init__(
        self,
        kafka_config: dict[str, Any],
        topic: str,
        partitions: Sequence[int],
        rate: int = 500,
        first_id: int = 0,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.rate = rate
        self.first_id = first_id
        self._partitions = list(partitions)
        self._producer = Producer({**kafka_config, "linger.ms": 5, **(config or {}), "logger": log})
        self._lock = threading.Lock()
        self.acked: dict[int, tuple[int, int]] = {}
        self.failed: dict[int, str] = {}
        self.next_id = first_id
        self._stop = threading.Event()
        self._hold = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}", daemon=True)
        self._thread.start()

    # -- control ---------------------------------------------------------------------------

    def set_partitions(self, partitions: Sequence[int]) -> None:
        """Write to ``partitions`` from now on (after refreshing the client's view of the topic)."""
        wanted = max(partitions) + 1
        deadline = time.monotonic() + 30
        while len(self._producer.list_topics(self.topic, timeout=10).topics[self.topic].partitions) < wanted:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.topic}: the producer does not see {wanted} partitions")
            time.sleep(0.2)
        with self._lock:
            self._partitions = list(partitions)

    def hold(self) -> None:
        """Stop producing new records (the thread keeps serving delivery reports)."""
        self._hold.set()

    def release(self) -> None:
        self._hold.clear()

    def acked_ids(self) -> set[int]:
        with self._lock:
            return set(self.acked)

    def produced(self) -> int:
        """How many records were handed to the client so far (acknowledged or not)."""
        return self.next_id - self.first_id

    def wait_acked(self, count: int, timeout: float = 60.0) -> None:
        """Wait until at least ``count`` records were acknowledged."""
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.topic}: only {len(self.acked)} of {count} records acknowledged in {timeout} s")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop producing and give pending deliveries a moment, asserting nothing (clean-up)."""
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(5)

    def stop(self, flush_timeout: float = 120.0) -> set[int]:
        """Stop producing, wait for every delivery report, and return the acknowledged ids."""
        self._stop.set()
        self._thread.join(30)
        remaining = self._producer.flush(flush_timeout)
        assert remaining == 0, f"{self.topic}: {remaining} records without a delivery report after {flush_timeout} s"
        with self._lock:
            assert len(self.acked) + len(self.failed) == self.produced(), (
                f"{self.topic}: {self.produced()} produced, {len(self.acked)} acknowledged, {len(self.failed)} failed"
            )
            return set(self.acked)

    # -- the thread --------------------------------------------------------------------------

    def _report(self, ident: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            with self._lock:
                if err is not None:
                    self.failed[ident] = str(err)
                else:
                    self.acked[ident] = (msg.partition(), msg.offset())

        return on_delivery

    def _run(self) -> None:
        tick = 0.05
        per_tick = max(1, round(self.rate * tick))
        next_at = time.monotonic()
        while not self._stop.is_set():
            if not self._hold.is_set():
                with self._lock:
                    partitions = list(self._partitions)
                for _ in range(per_tick):
                    ident = self.next_id
                    partition = partitions[ident % len(partitions)]
                    while True:
                        try:
                            self._producer.produce(
                                self.topic,
                                str(ident).encode(),
                                key=f"k{ident}".encode(),
                                partition=partition,
                                on_delivery=self._report(ident),
                            )
                            break
                        except BufferError:  # local queue full (e.g. the broker is down)
                            self._producer.poll(0.1)
                            if self._stop.is_set():
                                return
                    self.next_id += 1
            self._producer.poll(0)
            next_at += tick
            self._stop.wait(max(0.0, next_at - time.monotonic()))
            if time.monotonic() - next_at > 1.0:
                next_at = time.monotonic()  # fell far behind (loaded machine): do not burst


@dataclass(frozen=True)
class DeliveryReport:
    """How the delivered ids compare with the expected ones."""

    expected: int
    delivered: int
    lost: list[int]
    duplicated: dict[int, int]
    unexpected: list[int]

    @property
    def exactly_once(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    def __str__(self) -> str:
        return (
            f"{self.expected} expected, {self.delivered} deliveries: "
            f"{len(self.lost)} lost {self.lost[:20]}, {len(self.duplicated)} duplicated "
            f"{dict(list(self.duplicated.items())[:20])}, {len(self.unexpected)} unexpected {self.unexpected[:20]}"
        )


def delivery_report(delivered: Iterable[int], expected: Iterable[int]) -> DeliveryReport:
    counts = Counter(delivered)
    want = set(expected)
    return DeliveryReport(
        expected=len(want),
        delivered=sum(counts.values()),
        lost=sorted(want - set(counts)),
        duplicated={i: n for i, n in sorted(counts.items()) if n > 1},
        unexpected=sorted(set(counts) - want),
    )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> float:
    """Wait until ``predicate()`` holds; returns the seconds it took. Fails after ``timeout``."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if predicate():
            return time.monotonic() - started
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def wait_delivered(delivered: Callable[[], Iterable[int]], expected: set[int], timeout: float = 60.0) -> None:
    """Wait until every expected id was delivered; on time-out, fail with what is missing."""
    deadline = time.monotonic() + timeout
    while True:
        got = set(delivered())
        if got >= expected:
            return
        if time.monotonic() > deadline:
            missing = sorted(expected - got)
            raise AssertionError(
                f"{len(missing)} of {len(expected)} acknowledged ids not delivered after {timeout} s: {missing[:30]}"
            )
        time.sleep(0.1)
