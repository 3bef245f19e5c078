"""A running channel's spans, against the live ZooKeeper and broker: a ``process`` span per
batch linked to (or, for one record, child of) the producer's span, a ``commit`` span per
fenced commit, and the rebalance spans of the partitions taken and released."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.channels import RecordingProcessor, make_channel, wait_until
from tests.tracing.conftest import SKIP_REASON
from tests.tracing.support import traceparent

pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)

PRODUCER = (0x7E57, 0xC0FFEE)


def test_a_channels_batches_commits_and_rebalances_are_spans(spans: Any, kafka_config, zk_connect, topic_factory, produce) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, [(0, b"k0", b"0", [("traceparent", traceparent(*PRODUCER))])])
    processor = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, processor)
    channel.start()
    try:
        wait_until(lambda: len(processor.delivered) == 1, what="the first record")
        produce(topic, [(1, f"k{i}".encode(), str(i).encode(), [("traceparent", traceparent(0x100 + i, 0x200 + i))])
                        for i in range(1, 4)])
        wait_until(lambda: len(processor.delivered) == 4, what="all four records")
        wait_until(
            lambda: {s.attributes.get("jetkafka.commit.offset") for s in spans.get_finished_spans()
                     if s.name == f"commit {topic}"} >= {1, 3},
            what="the commits' spans",
        )
    finally:
        assert channel.shutdown()
    finished = spans.get_finished_spans()
    batches = [s for s in finished if s.name == f"process {topic}"]
    assert sum(s.attributes["messaging.batch.message_count"] for s in batches) == 4
    assert {s.attributes["messaging.consumer.group.name"] for s in batches} == {"g"}
    (first,) = [s for s in batches if s.attributes["messaging.destination.partition.id"] == "0"]
    assert (first.parent.trace_id, first.parent.span_id) == PRODUCER and first.attributes["messaging.kafka.offset"] == 0
    linked = {(link.context.trace_id, link.context.span_id) for s in batches if s is not first for link in s.links}
    single = {(s.parent.trace_id, s.parent.span_id) for s in batches if s is not first and s.parent is not None}
    # Partition 1's records reach the span as links (a batch) or as its parent (a batch of one).
    assert linked | single == {(0x100 + i, 0x200 + i) for i in range(1, 4)}
    commits = [s for s in finished if s.name == f"commit {topic}"]
    assert all(s.attributes["messaging.system"] == "kafka" for s in commits)
    taken = [s for s in finished if s.name == "partitions taken"]
    assert sorted(p for s in taken for p in s.attributes["jetkafka.partitions"]) == [f"{topic}[0]", f"{topic}[1]"]
    released = [s for s in finished if s.name == f"partition released {topic}"]
    assert sorted(s.attributes["messaging.destination.partition.id"] for s in released) == ["0", "1"]
