"""The example pipeline's per-minute aggregates equal a plain-Python computation over the same events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from examples.pipeline.aggregates import minute_writer, python_minutes, rollup
from examples.pipeline.events import EVENT_SCHEMA, generate_events, records
from jetkafka.channel import InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.spark import ParquetSink, SparkMicroBatchProcessor
from tests.support.channels import channel_config, wait_until


def test_minute_aggregates_match_python(
    spark: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=4)
    events = generate_events(5_000, span_minutes=20)
    offsets = produce(topic, records(events, 4))
    assert len(offsets) == 5_000
    out = str(tmp_path / "minutes")
    processor = SparkMicroBatchProcessor(
        minute_writer(out), value_format="json", schema=EVENT_SCHEMA, max_events=2_000, max_interval_ms=500,
        backlog_max_events=2_000, spark=spark,  # micro-batches of one size: several of them
    )
    channel = InboundChannel.from_dict(
        channel_config(zk_connect, kafka_config, [topic], batch_max_events=400), processor=processor
    )
    channel.start()
    try:
        store = OffsetStore(channel._controller.client, GroupPaths("g"))  # type: ignore[union-attr]
        wait_until(lambda: sum(store.read_all(topic).values()) == 5_000, timeout=120, what="all offsets committed")
    finally:
        assert channel.shutdown()
    stats = processor.stats()
    assert stats["events"] == 5_000
    assert stats["batches"] >= 3  # max_events 2000 over 5000 events
    assert stats["failures"] == 0

    got = {
        row["minute"]: (row["events"], row["cents"], row["max_cents"])
        for row in rollup(ParquetSink(out).read(spark)).collect()
    }
    assert got == python_minutes(events)
