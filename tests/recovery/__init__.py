"""Helpers of the recovery tests: processors that record what live and recovery batches delivered."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource


@dataclass(frozen=True)
class Delivery:
    topic: str
    partition: int
    offset: int
    value: bytes
    recovery: bool
    at: float  # time.monotonic() when its batch reached the processor
    batch: int  # events in its batch


class Recorder(BatchEventProcessor):
    """Records every event with the time its batch arrived; checks one call per partition at a time.

    Live and recovery batches are separate streams: each must be in offset order on its own.
    """

    def __init__(self, expect_recovery: bool | None = None) -> None:
        self.lock = threading.Lock()
        self.deliveries: list[Delivery] = []
        self.violations: list[str] = []
        self._in_flight: set[tuple[str, int]] = set()
        self._last: dict[tuple[str, int, bool], int] = {}
        self._expect = expect_recovery

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        now = time.monotonic()
        key = (source.topic, source.partition)
        with self.lock:
            if key in self._in_flight:
                self.violations.append(f"{key}: two batches at once in one processor")
            self._in_flight.add(key)
        try:
            offsets = [e.offset for e in events]
            flags = {e.recovery for e in events}
            with self.lock:
                if flags != {events.recovery}:
                    self.violations.append(f"{key}: events and batch disagree on recovery: {flags}")
                if self._expect is not None and events.recovery is not self._expect:
                    self.violations.append(f"{key}: recovery={events.recovery} batch in the wrong processor")
                stream = (*key, events.recovery)
                if offsets != sorted(offsets) or offsets[0] <= self._last.get(stream, -1):
                    self.violations.append(f"{stream}: out of order at {offsets[:3]}")
                self._last[stream] = offsets[-1]
                self.deliveries.extend(
                    Delivery(e.topic, e.partition, e.offset, e.value or b"", e.recovery, now, len(events))
                    for e in events
                )
            return BatchResponse.advance()
        finally:
            with self.lock:
                self._in_flight.discard(key)

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        return BatchResponse.advance()

    def offsets(self, partition: int | None = None, recovery: bool | None = None) -> list[int]:
        with self.lock:
            return [
                d.offset
                for d in self.deliveries
                if (partition is None or d.partition == partition) and (recovery is None or d.recovery is recovery)
            ]

    def snapshot(self) -> list[Delivery]:
        with self.lock:
            return list(self.deliveries)


class FlagRecorder(BatchEventProcessor):
    """For ``jetkafka run`` processes: appends ``pid partition offset recovery`` per event to a file.

    A batch's lines are written with one ``os.write`` before the batch is acknowledged, so after a
    SIGKILL the file holds every event the process delivered, stored as done or not.
    """

    def __init__(self, path: str, delay_ms: int = 0) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = os.getpid()
        self._delay = delay_ms / 1000

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        flag = int(events.recovery)
        os.write(self._fd, "".join(f"{self._pid} {e.partition} {e.offset} {flag}\n" for e in events).encode())
        time.sleep(self._delay)  # widens the window between delivery and the stored progress
        return BatchResponse.advance()

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        return BatchResponse.advance()

    def on_stop(self) -> None:
        os.close(self._fd)


def read_flags(path: str) -> list[tuple[int, int, int, bool]]:
    """``(pid, partition, offset, recovery)`` per line of a FlagRecorder file."""
    out = []
    with open(path) as f:
        for line in f:
            pid, partition, offset, flag = line.split()
            out.append((int(pid), int(partition), int(offset), flag == "1"))
    return out
