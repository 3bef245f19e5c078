"""Each Spark micro-batch is a ``micro-batch`` span with its id and slices; its commit is a
child span."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examples.pipeline.events import EVENT_SCHEMA, generate_events, records
from jetkafka.channel import InboundChannel
from jetkafka.spark import SparkMicroBatchProcessor
from tests.spark.helpers import id_writer
from tests.support.channels import channel_config, committed_offsets, wait_until
from tests.support.spans import SKIP_REASON, spans

pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)

__all__ = ["spans"]


def test_each_micro_batch_is_a_span_with_its_id_and_slices(
    spans: Any, spark: Any, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any,
    tmp_path: Path,
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, records(generate_events(400), 2))
    processor = SparkMicroBatchProcessor(
        id_writer(str(tmp_path / "ids")), value_format="json", schema=EVENT_SCHEMA, max_events=10_000,
        max_interval_ms=500, spark=spark,
    )
    channel = InboundChannel.from_dict(channel_config(zk_connect, kafka_config, [topic]), processor=processor)
    channel.start()
    try:
        wait_until(lambda: sum(committed_offsets(zk, "g", topic).values()) == 400, timeout=120, what="all committed")
        wait_until(lambda: any(s.name == "micro-batch" for s in spans.get_finished_spans()), what="a micro-batch span")
    finally:
        assert channel.shutdown()
    finished = spans.get_finished_spans()
    batches = [s for s in finished if s.name == "micro-batch"]
    assert sum(s.attributes["jetkafka.spark.events"] for s in batches) == 400
    assert len({s.attributes["jetkafka.spark.micro_batch_id"] for s in batches}) == len(batches)
    slices = [sl for s in batches for sl in s.attributes["jetkafka.spark.slices"]]
    assert {sl.split(" ")[0] for sl in slices} == {f"{topic}[0]", f"{topic}[1]"}
    assert all(s.attributes["jetkafka.spark.replay"] is False for s in batches)
    for batch in batches:
        # Its commit (the offsets after each slice) is among its children: one trace per micro-batch.
        ends = sorted(
            f"{name}={int(span.split('..')[1]) + 1}"
            for name, span in (sl.split(" ") for sl in batch.attributes["jetkafka.spark.slices"])
        )
        children = [c for c in finished if c.parent is not None and c.parent.span_id == batch.context.span_id]
        assert any(c.name == "commit" and sorted(c.attributes["jetkafka.commit.partitions"]) == ends for c in children)
