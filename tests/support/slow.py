"""A processor whose batches take long: for tests of interrupted shutdowns."""

from __future__ import annotations

import time

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, PartitionSource


class SlowProcessor(BatchEventProcessor):
    def __init__(self, seconds: float, marker: str) -> None:
        self.seconds = seconds
        self.marker = marker

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        with open(self.marker, "a") as f:
            f.write(f"{source.partition} {source.head_offset}\n")
        time.sleep(self.seconds)
        return BatchResponse.advance()
