"""A processor named in YAML whose ``on_start`` fails on request, for hot-deploy tests."""

from __future__ import annotations

import threading

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource

DELIVERED: list[tuple[int, int]] = []  # (id of the processor object, offset), every instance
_LOCK = threading.Lock()


class StartGate(BatchEventProcessor):
    """Raises ``ValueError`` from ``on_start`` when ``fail_on_start`` is true."""

    def __init__(self, fail_on_start: bool = False) -> None:
        self.fail_on_start = fail_on_start

    def on_start(self, context: object) -> None:
        if self.fail_on_start:
            raise ValueError("this processor refuses to start")

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        with _LOCK:
            DELIVERED.extend((id(self), e.offset) for e in events)
        return BatchResponse.advance()

    def on_stream_termination(self, source: PartitionSource) -> BatchResponse | None:
        return BatchResponse.advance()
