"""Spans under ``channel.ordering: key``: each of a partition's concurrent batches is its own
``process`` span, with its first offset; an asynchronous processor's span covers its await."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest

from jetkafka import AsyncBatchEventProcessor, BatchEventProcessor, BatchResponse, EventBatch, PartitionSource
from tests.support.channels import make_channel, wait_until
from tests.tracing.conftest import SKIP_REASON

pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)


class SlowBatches(BatchEventProcessor):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first_offsets: list[int] = []

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        time.sleep(0.05)
        with self.lock:
            self.first_offsets.append(events.first_offset)
        return BatchResponse.advance()


class AwaitingBatches(AsyncBatchEventProcessor):
    def __init__(self) -> None:
        self.first_offsets: list[int] = []

    async def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        await asyncio.sleep(0.05)
        self.first_offsets.append(events.first_offset)
        return BatchResponse.advance()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_each_concurrent_batch_of_a_partition_is_its_own_process_span(
    spans: Any, kafka_config: dict[str, Any], zk_connect: str, topic_factory: Any, produce: Any, kind: str
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, f"k{i % 4}".encode(), str(i).encode()) for i in range(40)])
    processor: SlowBatches | AwaitingBatches = SlowBatches() if kind == "sync" else AwaitingBatches()
    with make_channel(zk_connect, kafka_config, topic, processor, ordering="key", threads=4, batch_max_events=5):
        wait_until(lambda: sum(1 for _ in processor.first_offsets) >= 8, what="the batches")
    # Stopped: every batch ended, and so did its span.
    batches = sorted(processor.first_offsets)
    process = [
        s for s in spans.get_finished_spans()
        if s.name == f"process {topic}" and s.attributes.get("jetkafka.response") != "not_started"
    ]
    assert sorted(int(s.attributes["messaging.kafka.offset"]) for s in process) == batches
    assert len({s.context.span_id for s in process}) == len(process)  # distinct spans
    assert all(s.end_time - s.start_time >= 45_000_000 for s in process)  # each covers its 50 ms of work
    # Batches of one partition ran at once: some spans overlap in time.
    ordered = sorted(process, key=lambda s: s.start_time)
    assert any(b.start_time < a.end_time for a, b in itertools.pairwise(ordered))
