"""The soak's load: exactly ``total`` unique ids at a steady rate, every acknowledgement recorded.

Like :class:`tests.support.load.AckedProducer`, with what a run of many minutes through broker
restarts needs: a fixed total (the run is judged on a known count), no lock shared with
librdkafka's callbacks (a delivery report only appends to a list, atomic under the GIL, so no
callback can ever wait on the producing thread), and a producing thread that cannot die
silently: whatever ends it is kept in :attr:`SoakProducer.error` and reported by the harness.

Each acknowledgement is kept with the time its delivery report came (the checker measures how
long each partition's records waited from it). Records are ``value = str(id)``, ``key = k<id>`` (``k<id % keys>`` with
``keys``: the ordering rows' record keys), written round-robin over the partitions, with a
delivery timeout that outlasts a broker restart. The producer is not idempotent: the dev
broker answers an idempotent producer's first batch after a restart with a sequence error that
librdkafka treats as fatal, which ends the load. A retry may therefore write an id twice, at two
offsets; the checker tells records apart by (partition, offset), so both copies count as records
the group must deliver once each, and the acknowledged one is the id's.

Threads: one producing thread calls ``produce`` and ``poll``; :meth:`SoakProducer.stop` flushes
on the caller's thread after joining it. Delivery reports run on whichever of the two polls.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger("soak.producer")


class SoakProducer:
    def __init__(
        self, kafka: dict[str, Any], topic: str, partitions: Sequence[int], rate: int, total: int, keys: int = 0
    ) -> None:
        self.topic = topic
        self._keys = keys
        self.rate = rate
        self.total = total
        self._partitions = list(partitions)
        self._producer = Producer(
            {
                **kafka,
                "linger.ms": 5,
                "enable.idempotence": False,
                "acks": "all",
                "message.timeout.ms": 600_000,
                "reconnect.backoff.max.ms": 500,
                "queue.buffering.max.messages": 2_000_000,
                "logger": log,
            }
        )
        self._acks: list[tuple[int, int, int, float]] = []
        self._failures: list[tuple[int, str]] = []
        self.produced = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-producer", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def done(self) -> bool:
        return self.produced >= self.total

    def acknowledged(self) -> int:
        return len(self._acks)

    def _report(self, ident: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self._failures.append((ident, str(err)))
            else:
                self._acks.append((ident, msg.partition(), msg.offset(), time.time()))

        return on_delivery

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # kept and reported: a dead producer must not look like a quiet one
            self.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            log.exception("the producing thread died after %d records", self.produced)

    def _produce(self) -> None:
        tick = 0.05
        per_tick = max(1, round(self.rate * tick))
        next_at = time.monotonic()
        while not self._stop.is_set():
            for _ in range(min(per_tick, self.total - self.produced)):
                ident = self.produced
                partition = self._partitions[ident % len(self._partitions)]
                while True:
                    try:
                        self._producer.produce(
                            self.topic, str(ident).encode(), key=f"k{ident % self._keys if self._keys else ident}".encode(), partition=partition,
                            on_delivery=self._report(ident),
                        )
                        break
                    except BufferError:  # the local queue is full (the broker is down): wait for room
                        self._producer.poll(0.1)
                        if self._stop.is_set():
                            return
                self.produced += 1
            self._producer.poll(0)
            next_at += tick
            self._stop.wait(max(0.0, next_at - time.monotonic()))
            if time.monotonic() - next_at > 1.0:
                next_at = time.monotonic()  # fell far behind on a loaded machine: do not burst

    def stop(self, flush_timeout: float = 600.0) -> tuple[dict[int, tuple[int, int]], dict[str, Any]]:
        """Stop, wait for every delivery report; ``(acknowledged id -> (partition, offset), facts)``."""
        self._stop.set()
        self._thread.join(60)
        remaining = self._producer.flush(flush_timeout)
        acked = {ident: (p, o) for ident, p, o, _at in self._acks}
        facts = {
            "produced": self.produced,
            "acknowledged": len(acked),
            "failed": len(self._failures),
            "failures": self._failures[:20],
            "without_report": remaining,
            "thread_error": self.error,
        }
        return acked, facts

    def acked_at(self) -> dict[int, float]:
        """When each acknowledgement came (the delivery report's time: within one poll of it)."""
        return {ident: at for ident, _p, _o, at in self._acks}

    def close(self) -> None:
        """Stop without waiting for reports (clean-up after a failed run)."""
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(5)
