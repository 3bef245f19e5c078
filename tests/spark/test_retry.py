"""A failing ``fn`` commits nothing; the same micro-batch (same id, same events) runs again."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from examples.pipeline.events import EVENT_SCHEMA, generate_events, records
from jetkafka.channel import InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.spark import ParquetSink, SparkMicroBatchProcessor
from tests.spark.helpers import event_ids
from tests.support.channels import channel_config, wait_until


class FailOnce:
    """Raises on its first call; its second call waits until the test has looked at ZooKeeper."""

    def __init__(self, sink: ParquetSink) -> None:
        self.sink = sink
        self.calls: list[tuple[int, list[tuple[int, int, int]]]] = []
        self.failed = threading.Event()
        self.checked = threading.Event()

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        ranges = [
            (r["partition"], r["lo"], r["hi"])
            for r in df.groupBy("partition").agg(F.min("offset").alias("lo"), F.max("offset").alias("hi")).collect()
        ]
        self.calls.append((batch_id, sorted(ranges)))
        if len(self.calls) == 1:
            # Half the output is written before the failure: the retry must replace it, not add to it.
            self.sink.write(event_ids(df.where("partition % 2 = 0")), batch_id)
            self.failed.set()
            raise RuntimeError("sink unavailable")
        if len(self.calls) == 2:
            assert self.checked.wait(60), "the test did not inspect ZooKeeper"
        self.sink.write(event_ids(df), batch_id)


def test_failed_fn_commits_nothing_and_reruns_the_same_batch(
    spark: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=4)
    events = generate_events(2_000)
    produce(topic, records(events, 4))
    sink = ParquetSink(str(tmp_path / "events"))
    fn = FailOnce(sink)
    processor = SparkMicroBatchProcessor(
        fn, value_format="json", schema=EVENT_SCHEMA, max_events=10_000, max_interval_ms=1_500, spark=spark
    )
    config = channel_config(zk_connect, kafka_config, [topic], error_backoff_ms=100, error_backoff_max_ms=200)
    channel = InboundChannel.from_dict(config, processor=processor)
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    store = OffsetStore(zk, GroupPaths("g"))
    channel.start()
    try:
        assert fn.failed.wait(120), "fn was never called"
        wait_until(lambda: len(fn.calls) == 2, timeout=60, what="the retry")
        # The retry is parked inside fn: nothing of the batch may be committed yet.
        assert store.read_all(topic) == {p: 0 for p in range(4)}
        batch_id, ranges = fn.calls[0]
        pending_root = f"/consumers/g/microbatches/pending/{topic}"
        pending = {int(p): json.loads(zk.get(f"{pending_root}/{p}")[0]) for p in zk.get_children(pending_root)}
        assert {p: (doc["batch_id"], doc["from"], doc["to"] - 1) for p, doc in pending.items()} == {
            p: (batch_id, lo, hi) for p, lo, hi in ranges
        }
        assert fn.calls[1] == fn.calls[0]  # same batch id, same offset ranges
        fn.checked.set()
        wait_until(lambda: sum(store.read_all(topic).values()) == 2_000, timeout=120, what="all offsets committed")
        wait_until(lambda: not zk.get_children(pending_root), timeout=10, what="pending ranges cleared")
    finally:
        fn.checked.set()
        assert channel.shutdown()
        zk.stop()
        zk.close()
    stats = processor.stats()
    assert stats["failures"] == 1
    assert stats["events"] == 2_000

    rows = sink.read(spark).select("id", "batch_id").collect()
    ids = [r["id"] for r in rows]
    assert len(ids) == 2_000
    assert set(ids) == {e["id"] for e in events}


def test_gathering_that_fails_is_read_again_even_with_on_error_skip(
    spark: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path,
    monkeypatch: Any,
) -> None:
    # A ZooKeeper error while a partition's chain starts (reading its pending range) is not a
    # poison record: with on_error skip, handing it to the channel skipped the batch's first
    # record and left it out of the exactly-once output. Every event must be there once.
    from kazoo.exceptions import ConnectionLoss

    from jetkafka.spark._ledger import MicroBatchLedger

    topic = topic_factory(partitions=2)
    events = generate_events(400)
    produce(topic, records(events, 2))
    read_pending = MicroBatchLedger.read_pending
    failures = {"left": 4}

    def flaky(self: MicroBatchLedger, topic_: str, partition: int) -> Any:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise ConnectionLoss()
        return read_pending(self, topic_, partition)

    monkeypatch.setattr(MicroBatchLedger, "read_pending", flaky)
    path = str(tmp_path / "events")
    sink = ParquetSink(path)
    processor = SparkMicroBatchProcessor(
        lambda df, batch_id: sink.write(event_ids(df), batch_id), value_format="json", schema=EVENT_SCHEMA,
        max_events=10_000, max_interval_ms=500, spark=spark,
    )
    config = channel_config(
        zk_connect, kafka_config, [topic], error_backoff_ms=50, error_backoff_max_ms=100,
        on_error={"mode": "skip", "max_attempts": 1},
    )
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        with InboundChannel.from_dict(config, processor=processor):
            wait_until(
                lambda: sum(OffsetStore(zk, GroupPaths("g")).read_all(topic).values()) == 400, 120, "every offset committed"
            )
    finally:
        zk.stop()
        zk.close()
    assert failures["left"] == 0
    assert processor.stats()["gather_failures"] == 4
    assert processor.micro_batch_report("c").gather_failures == 4  # what the metrics export
    import pyarrow.dataset as ds

    written = ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=["id"]).column("id").to_pylist()
    assert sorted(written) == sorted(e["id"] for e in events)
