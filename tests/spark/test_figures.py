"""Per-micro-batch figures: seconds per phase, output files and bytes, in stats, metrics and status."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from examples.pipeline.aggregates import minute_writer
from examples.pipeline.events import EVENT_SCHEMA, generate_events, records
from jetkafka.channel import InboundChannel
from jetkafka.config import parse_config
from jetkafka.devstack._ports import free_port
from jetkafka.ops._micro_batch_reports import PHASES
from jetkafka.ops._status import group_status, render_status
from jetkafka.spark import SparkMicroBatchProcessor
from tests.support.channels import channel_config, wait_until
from tests.support.scrape import scrape, value

EVENTS = 3_000
MAX_EVENTS = 1_000


def test_figures_of_each_micro_batch_reach_stats_metrics_and_status(
    spark: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, records(generate_events(EVENTS, span_minutes=5), 2))
    out = tmp_path / "minutes"
    processor = SparkMicroBatchProcessor(
        minute_writer(str(out)), value_format="json", schema=EVENT_SCHEMA, max_events=MAX_EVENTS,
        max_interval_ms=300, spark=spark,
    )
    port = free_port()
    data = channel_config(zk_connect, kafka_config, [topic], batch_max_events=400)
    data["metrics"] = {"port": port, "watermark_interval_s": 0.2}
    channel = InboundChannel.from_dict(data, processor=processor)
    channel.start()
    try:
        wait_until(lambda: processor.stats()["events"] == EVENTS, timeout=120, what="every event committed")
        stats = processor.stats()
        last = stats["last"]
        assert last["events"] <= processor.bounds.ceiling_events  # grown while Spark was busy, at most
        assert set(last["seconds"]) == set(PHASES)
        assert last["seconds"]["fn"] > 0 and last["seconds"]["build"] > 0 and last["seconds"]["commit"] > 0
        assert all(stats["phase_seconds"][p] >= last["seconds"][p] for p in PHASES)
        # What the sink published is what is on disk.
        on_disk = list(out.rglob("*.parquet"))
        assert stats["output_files"] == len(on_disk) > 0
        assert stats["output_bytes"] == sum(p.stat().st_size for p in on_disk)

        samples = scrape(port)
        labels = {"group": "g", "consumer": channel.consumer_id}
        assert value(samples, "jetkafka_spark_micro_batches_total", **labels) == stats["batches"]
        assert value(samples, "jetkafka_spark_micro_batch_events_total", **labels) == EVENTS
        assert value(samples, "jetkafka_spark_output_files_total", **labels) == len(on_disk)
        for phase in PHASES:
            assert value(samples, "jetkafka_spark_micro_batch_phase_seconds_total", phase=phase, **labels) is not None
        assert value(samples, "jetkafka_spark_last_micro_batch_events", **labels) == last["events"]

        # jetkafka status reads the instance's report from ZooKeeper (written after each commit).
        config = parse_config(data)

        def reported() -> Any:
            found = group_status(config).micro_batches
            return found and found[0].batches == stats["batches"] and found[0]

        wait_until(reported, timeout=30, what="the last micro-batch's report in ZooKeeper")
        status = group_status(config)
        (report,) = status.micro_batches
        assert report.consumer == channel.consumer_id
        assert report.events == EVENTS and report.last_batch_id == last["batch_id"]
        assert report.last_output_files == last["output_files"]
        assert json.loads(json.dumps(status.to_dict()))["micro_batches"][0]["batches"] == stats["batches"]
        text = render_status(status, now=time.time())
        assert "micro-batches" in text and channel.consumer_id in text.split("micro-batches", 1)[1]
    finally:
        assert channel.shutdown()
    # The node goes with the instance: status lists live instances only.
    assert group_status(parse_config(data)).micro_batches == ()
