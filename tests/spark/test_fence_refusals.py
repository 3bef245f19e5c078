"""What the fence refuses at the sink, and what a refusal does to the micro-batch.

* A local lease that runs out while a slice is being published, and renews without the session
  expiring (a hung ZooKeeper server, left for another before the session timeout), refuses for
  a moment only: the run stops with ``StaleWriter`` and the micro-batch runs again, so no slice
  is left unwritten while its offsets are committed.
* A reset to the very offset a running micro-batch started from (the committed offset does not
  change, its offset node is written again) stops the batch's publication from the moment it
  lands, before the processor hears of it through ``on_reposition``.
* A fenced ``ParquetSink`` write holding rows of a partition that is not a slice of the
  micro-batch publishes nothing and names the rows' partition.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from examples.pipeline.events import EVENT_SCHEMA, encode, generate_events
from jetkafka.channel import InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.events import PartitionSource
from jetkafka.spark import BatchFence, ParquetSink, Publication, SinkError, SparkMicroBatchProcessor
from tests.spark.helpers import event_ids, read_ids
from tests.support.channels import channel_config, wait_until

PARTITIONS = 2
EVENTS = 400


class Writer:
    """``fn(df, batch_id, fence)``: the event ids through a fenced ``ParquetSink``; records
    what each call published, or the exception it ended with."""

    def __init__(self, path: str) -> None:
        self.sink = ParquetSink(path)
        self.calls: list[tuple[int, Publication | BaseException]] = []

    def __call__(self, df: Any, batch_id: int, fence: BatchFence) -> None:
        try:
            result = self.sink.write(event_ids(df), batch_id, fence)
        except BaseException as exc:
            self.calls.append((batch_id, exc))
            raise
        self.calls.append((batch_id, result))

    def skipped(self) -> list[str]:
        return [leaf for _, r in self.calls if isinstance(r, Publication) for leaf in r.skipped]


def start(
    spark: Any, zk_connect: str, kafka_config: dict[str, Any], topic: str, fn: Any
) -> tuple[InboundChannel, SparkMicroBatchProcessor]:
    processor = SparkMicroBatchProcessor(
        fn, value_format="json", schema=EVENT_SCHEMA, max_events=10_000, max_interval_ms=300, spark=spark
    )
    config = channel_config(zk_connect, kafka_config, [topic], batch_max_events=100, error_backoff_ms=50)
    channel = InboundChannel.from_dict(config, processor=processor)
    channel.start()
    return channel, processor


def produce_events(topic: str, produce: Any, count: int, seed: int) -> list[str]:
    events = generate_events(count, seed=seed)
    produce(topic, [(i % PARTITIONS, None, encode(e)) for i, e in enumerate(events)])
    return [e["id"] for e in events]


def committed(zk: Any, topic: str) -> dict[int, int]:
    return OffsetStore(zk, GroupPaths("g")).read_all(topic)


class LapseWhilePublishing:
    """A session lease's ``valid`` that says no once, on the ``nth`` ask made while a sink holds
    a slice's partition still to publish it (inside ``BatchFence.publishing``), and answers
    truly otherwise: a lease that ran out right there and was renewed by the next heartbeat,
    the session never expiring, the hold never changing."""

    def __init__(self, real: Callable[[], bool], nth: int) -> None:
        self._real = real
        self._nth = nth
        self._lock = threading.Lock()
        self.asked = 0
        self.lapses = 0

    def __call__(self) -> bool:
        if _asked_from("publishing"):
            with self._lock:
                self.asked += 1
                if self.asked == self._nth:
                    self.lapses += 1
                    return False
        return self._real()


def _asked_from(name: str, depth: int = 12) -> bool:
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_name == name and frame.f_code.co_filename.endswith("_fence.py"):
            return True
        frame = frame.f_back
    return False


def test_a_lease_that_lapses_while_publishing_runs_the_micro_batch_again(
    spark: Any, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    ids = produce_events(topic, produce, EVENTS, seed=31)
    out = str(tmp_path / "events")
    fn = Writer(out)
    channel, processor = start(spark, zk_connect, kafka_config, topic, fn)
    controller = channel._controller
    assert controller is not None
    # The second slice published lapses: one slice of that write is out already.
    lapse = LapseWhilePublishing(controller.lease.valid, nth=2)
    controller.lease.valid = lapse  # type: ignore[method-assign]
    try:
        half = EVENTS // PARTITIONS
        wait_until(
            lambda: committed(zk, topic) == {p: half for p in range(PARTITIONS)} and processor.collector.running is None,
            timeout=120,
            what="every offset committed",
        )
    finally:
        assert channel.shutdown()
    assert lapse.lapses == 1, "the lease never lapsed inside a publication"
    assert fn.skipped() == [], f"slices left unpublished for a lease that came back: {fn.skipped()}"
    assert processor.stats()["stale_refusals"] >= 1
    written = Counter(i for i, _ in read_ids(out))
    assert written == Counter(ids), (
        f"{sum(1 for i in ids if i not in written)} missing, {sum(n - 1 for n in written.values())} duplicates"
    )


class BlockedReposition(SparkMicroBatchProcessor):
    """Holds ``on_reposition`` until the test lets it go: the reset's commit has landed, and
    the processor has not heard of it yet."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.repositioned = threading.Event()
        self.go = threading.Event()

    def on_reposition(self, source: PartitionSource, old_offset: int, reason: str) -> None:
        self.repositioned.set()
        assert self.go.wait(120), "the test never let on_reposition go on"
        super().on_reposition(source, old_offset, reason)


class HeldPublication(Writer):
    """Its next call stages the micro-batch, then waits for ``go`` before publishing."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.hold_next = False
        self.staged = threading.Event()
        self.go = threading.Event()
        self.held: tuple[int, dict[tuple[str, int], int]] | None = None

    def __call__(self, df: Any, batch_id: int, fence: BatchFence) -> None:
        if not self.hold_next:
            super().__call__(df, batch_id, fence)
            return
        self.hold_next = False
        staged = self.sink.stage(event_ids(df), batch_id)
        self.held = (batch_id, fence.tokens)
        self.staged.set()
        assert self.go.wait(120), "the test never let the publication go on"
        result = staged.publish(fence)
        self.calls.append((batch_id, result))


def test_a_reset_to_the_same_offset_stops_publication_before_on_reposition(
    spark: Any, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    first = generate_events(200, seed=41)
    produce(topic, [(0, None, encode(e)) for e in first])
    out = str(tmp_path / "events")
    fn = HeldPublication(out)
    processor = BlockedReposition(
        fn, value_format="json", schema=EVENT_SCHEMA, max_events=10_000, max_interval_ms=300, spark=spark
    )
    config = channel_config(zk_connect, kafka_config, [topic], batch_max_events=100, error_backoff_ms=50)
    channel = InboundChannel.from_dict(config, processor=processor)
    channel.start()
    try:
        wait_until(lambda: committed(zk, topic) == {0: 200}, timeout=120, what="the first events committed")
        fn.hold_next = True
        second = generate_events(200, seed=42)
        for e in second:
            e["id"] = f"2-{e['id']}"
        produce(topic, [(0, None, encode(e)) for e in second])
        assert fn.staged.wait(120), "no micro-batch of the second events reached fn"
        # The operator resets the partition to where it stands: offset 200, committed again.
        move = channel.file_move(topic, 0, 200)
        assert processor.repositioned.wait(60), "the reset never reached on_reposition"
        assert committed(zk, topic) == {0: 200}
        fn.go.set()
        wait_until(lambda: fn.held is not None and any(b == fn.held[0] for b, _ in fn.calls), timeout=60,
                   what="the held micro-batch's publication")
        processor.go.set()
        assert move.wait(60)
        wait_until(
            lambda: committed(zk, topic) == {0: 400} and processor.collector.running is None,
            timeout=120,
            what="every offset committed after the reset",
        )
    finally:
        fn.go.set()
        processor.go.set()
        assert channel.shutdown()
    assert fn.held is not None
    (result,) = [r for b, r in fn.calls if b == fn.held[0]]
    assert isinstance(result, Publication)
    assert result.published == [], "the micro-batch gathered before the reset published after it landed"
    # A reset to where the partition stood re-reads nothing twice: every event once.
    written = Counter(i for i, _ in read_ids(out))
    assert written == Counter(e["id"] for e in first + second)


class ForeignRows(Writer):
    """Its first call writes the micro-batch's rows plus one row of a partition the topic does
    not have (a column computed wrongly), then it writes the rows as they are."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.first = True

    def __call__(self, df: Any, batch_id: int, fence: BatchFence) -> None:
        if self.first:
            self.first = False
            from pyspark.sql import functions as F

            rows = event_ids(df)
            df = rows.unionByName(rows.limit(1).withColumn("partition", F.lit(7)))
            try:
                result = self.sink.write(df, batch_id, fence)
            except BaseException as exc:
                self.calls.append((batch_id, exc))
                raise
            self.calls.append((batch_id, result))
            return
        super().__call__(df, batch_id, fence)


def test_a_fenced_write_refuses_rows_of_a_partition_outside_the_micro_batch(
    spark: Any, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Any, produce: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    ids = produce_events(topic, produce, EVENTS, seed=43)
    out = tmp_path / "events"
    fn = ForeignRows(str(out))
    channel, processor = start(spark, zk_connect, kafka_config, topic, fn)
    try:
        half = EVENTS // PARTITIONS
        wait_until(
            lambda: committed(zk, topic) == {p: half for p in range(PARTITIONS)} and processor.collector.running is None,
            timeout=120,
            what="every offset committed",
        )
    finally:
        assert channel.shutdown()
    first_id, first = fn.calls[0]
    assert isinstance(first, SinkError), f"the write with a foreign partition was not refused: {first}"
    assert f"{topic}[7]" in str(first) and "not a slice of micro-batch" in str(first)
    assert "fix:" in str(first)
    assert not list(out.glob("batch_id=*/topic=*/partition=7")), "a slice of no micro-batch was published"
    assert processor.stats()["failures"] >= 1
    written = Counter(i for i, _ in read_ids(str(out)))
    assert written == Counter(ids)
    assert any(b == first_id and isinstance(r, Publication) and r.published for b, r in fn.calls[1:])

