"""A processor for fault tests across processes: logs deliveries and callbacks to one file.

Lines (space separated, one ``os.write`` per callback, appended by every process of a test)::

    D <pid> <time> <topic> <partition> <offset> <id>     one per delivered event, before the commit
                                                          (then `` r`` for a recovery batch's event)
    T <pid> <time> <topic> <partition> <head offset>    on_stream_termination (a graceful release)
    X <pid> <time> <topic> <partition> <error class>    on_exception (e.g. PartitionLost)

``time`` is the wall clock when the callback started, so deliveries of several processes can be
ordered against each other and against the faults a test injects. Because a batch is written
before it is committed, the file holds every delivery, also of a process killed or fenced
before its commit.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource


class EventLogRecorder(BatchEventProcessor):
    """``delay_ms`` keeps each batch in hand that long before returning ``advance``.

    ``after_freeze_ms``: when the process was frozen (SIGSTOP) while a batch was in hand, keep
    working on that batch this much longer after it thaws, as a zombie finishing a slow write
    would; its commit then reaches ZooKeeper after the session was renewed.
    """

    def __init__(self, path: str, delay_ms: int = 0, after_freeze_ms: int = 0) -> None:
        self._path = path
        self._fd = -1
        self._pid = os.getpid()
        self._delay = delay_ms / 1000
        self._after_freeze = after_freeze_ms / 1000

    def _write(self, text: str) -> None:
        os.write(self._fd, text.encode())

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        return self.record(events, time.time())

    def record(self, events: EventBatch, now: float) -> BatchResponse:
        """Log ``events`` as delivered at ``now`` (taken first thing in ``on_next_batch``, as near
        the channel's last lease check as a processor can stamp) and keep them ``delay_ms``."""
        tail = " r\n" if events.recovery else "\n"
        self._write(
            "".join(
                f"D {self._pid} {now:.6f} {e.topic} {e.partition} {e.offset} {(e.value or b'').decode()}{tail}"
                for e in events
            )
        )
        if self._delay:
            started = time.monotonic()
            time.sleep(self._delay)  # keeps the batch in hand, uncommitted
            if self._after_freeze and time.monotonic() - started > self._delay + 1.0:
                time.sleep(self._after_freeze)
        return BatchResponse.advance()

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        self._write(f"T {self._pid} {time.time():.6f} {source.topic} {source.partition} {source.head_offset}\n")
        return BatchResponse.advance()

    def on_exception(self, source: PartitionSource, error: BaseException) -> BatchResponse | None:
        self._write(
            f"X {self._pid} {time.time():.6f} {source.topic} {source.partition} {type(error).__name__}\n"
        )
        return None

    def on_start(self, context: object) -> None:
        # Opened per start: a hot deploy that resubscribes stops and starts this same object.
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def on_stop(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


@dataclass(frozen=True)
class Delivery:
    pid: int
    at: float
    topic: str
    partition: int
    offset: int
    id: int


@dataclass(frozen=True)
class Callback:
    kind: str  # "T" or "X"
    pid: int
    at: float
    topic: str
    partition: int
    detail: str


def read_event_log(path: str) -> tuple[list[Delivery], list[Callback]]:
    deliveries, callbacks = [], []
    try:
        f = open(path)  # noqa: SIM115 - entered below, once a missing file is ruled out
    except FileNotFoundError:
        return [], []
    with f:
        for line in f:
            if not line.endswith("\n"):
                break  # a line being written right now
            kind, pid, at, topic, partition, a, *rest = line.split()
            if kind == "D":
                deliveries.append(Delivery(int(pid), float(at), topic, int(partition), int(a), int(rest[0])))
            else:
                callbacks.append(Callback(kind, int(pid), float(at), topic, int(partition), a))
    return deliveries, callbacks


def delivered_ids(path: str) -> list[int]:
    return [d.id for d in read_event_log(path)[0]]
