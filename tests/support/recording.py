"""A processor for multi-process tests: appends every delivered event to a file.

Each line is ``pid topic partition offset value``. A batch's lines are written with one
``os.write`` before the batch is committed, so after a SIGKILL the file holds every event the
process delivered, committed or not.
"""

from __future__ import annotations

import logging
import os
import time

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource

log = logging.getLogger(__name__)


class FileRecorder(BatchEventProcessor):
    def __init__(self, path: str, delay_ms: int = 0, log_batches: bool = False) -> None:
        self._log_batches = log_batches
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = os.getpid()
        self._delay = delay_ms / 1000

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        lines = "".join(
            f"{self._pid} {e.topic} {e.partition} {e.offset} {(e.value or b'').decode()}\n" for e in events
        )
        os.write(self._fd, lines.encode())
        if self._log_batches:
            log.info("recorded %d events", len(events))
        if self._delay:
            time.sleep(self._delay)
        return BatchResponse.advance()

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        return BatchResponse.advance()

    def on_stop(self) -> None:
        os.close(self._fd)


def read_deliveries(path: str) -> list[tuple[int, str, int, int, int]]:
    """``(pid, topic, partition, offset, id)`` for every line of a FileRecorder file."""
    out = []
    with open(path) as f:
        for line in f:
            pid, topic, partition, offset, value = line.split()
            out.append((int(pid), topic, int(partition), int(offset), int(value)))
    return out
