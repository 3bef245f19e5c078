"""A running channel's spans, against the live ZooKeeper and broker: a ``process`` span per
batch linked to (or, for one record, child of) the producer's span, a ``commit`` span per
fenced commit, the rebalance spans of the partitions taken and released, an offset reset's
span and a recovery range's span."""

from __future__ import annotations

from typing import Any

import pytest

from jetkafka import InboundChannel
from jetkafka.config import parse_config
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from tests.support.channels import RecordingProcessor, channel_config, make_channel, wait_until
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


def test_an_offset_reset_applied_by_the_channel_is_a_reset_span(
    spans: Any, kafka_config, zk_connect, topic_factory, produce
) -> None:
    from jetkafka.ops._reset import reset_offsets

    topic = topic_factory(partitions=1)
    produce(topic, [(0, None, str(i).encode()) for i in range(10)])
    processor = RecordingProcessor()
    data = channel_config(zk_connect, kafka_config, [topic])
    channel = InboundChannel.from_dict(data, processor=processor)
    channel.start()
    try:
        wait_until(lambda: len(processor.delivered) == 10, what="the ten records")
        result = reset_offsets(parse_config(data), topic, 4, command_id="traced")
        assert result.ok
        wait_until(lambda: any(s.name == f"reset {topic}" for s in spans.get_finished_spans()), what="the reset span")
    finally:
        assert channel.shutdown()
    (reset,) = [s for s in spans.get_finished_spans() if s.name == f"reset {topic}"]
    assert reset.attributes["jetkafka.reset.id"] == "traced" and reset.attributes["jetkafka.reset.offset"] == 4
    assert reset.attributes["jetkafka.reset.settled"] is True
    assert reset.attributes["messaging.destination.partition.id"] == "0"
    # The reposition's commit is made by the partition's worker, in its turn, while the reset
    # span waits for it: inside the reset's time, on another thread (so not its child).
    assert any(s.name == "commit" and list(s.attributes["jetkafka.commit.partitions"]) == [f"{topic}[0]=4"]
               and reset.start_time <= s.start_time and s.end_time <= reset.end_time
               for s in spans.get_finished_spans())


def test_a_recovery_range_is_a_span_parent_of_its_batches(
    spans: Any, kafka_config, zk, zk_connect, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    OffsetStore(zk, GroupPaths("g")).write_unfenced(topic, 0, 0)
    produce(topic, [(0, None, str(i).encode()) for i in range(300)])
    live, recovered = RecordingProcessor(), RecordingProcessor()
    data = channel_config(zk_connect, kafka_config, [topic])
    data["recovery"] = {"max_partition_lag": 100, "max_rate": 100_000, "batch_max_events": 50}
    channel = InboundChannel.from_dict(data, processor=live, recovery_processor=recovered)
    channel.start()
    try:
        wait_until(lambda: len(recovered.delivered) == 200 and len(live.delivered) == 100, what="recovery done")
        wait_until(lambda: any(s.name == f"recover {topic}" for s in spans.get_finished_spans()), what="the range's span")
    finally:
        assert channel.shutdown()
    finished = spans.get_finished_spans()
    (recover,) = [s for s in finished if s.name == f"recover {topic}"]
    assert recover.attributes["jetkafka.recovery.ranges"] == "[0, 200)"
    assert recover.attributes["jetkafka.recovery.events"] == 200 and recover.attributes["jetkafka.recovery.remaining"] == 0
    batches = [s for s in finished if s.name == f"process {topic}" and s.attributes.get("jetkafka.recovery")]
    assert sum(s.attributes["messaging.batch.message_count"] for s in batches) == 200
    assert all(s.parent is not None and s.parent.span_id == recover.context.span_id for s in batches)
    live_batches = [s for s in finished if s.name == f"process {topic}" and not s.attributes.get("jetkafka.recovery")]
    assert sum(s.attributes["messaging.batch.message_count"] for s in live_batches) == 100
