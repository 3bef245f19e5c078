"""A Spark group moved by something other than its own commits keeps committing, and its output
holds exactly what the move implies.

Moves: ``jetkafka offsets reset`` backward and forward, with everything committed and while a
micro-batch is inside ``fn``; the out-of-range policy (earliest, latest, and fail lifted by a
reset); a reset applied at take-over by the partition's next owner. Semantics checked (see
docs/spark.md, Repositions): events before the new position keep the output they had; every
event from the new position on is read again into new micro-batches (new batch ids) and
written once more; a micro-batch gathered from the old position and still running when the move
lands is neither committed nor published (its slices are fenced); a pending range the move
makes void is never replayed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from typing import Any

import pytest
import yaml
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from examples.pipeline.events import EVENT_SCHEMA, encode, generate_events
from jetkafka.channel import InboundChannel
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._reset import reset_offsets
from jetkafka.spark import ParquetSink, SparkMicroBatchProcessor
from jetkafka.spark._ledger import MicroBatchLedger, encode_pending
from tests.spark.helpers import event_ids, fenced, published, read_ids
from tests.support.channels import channel_config, wait_until
from tests.support.processes import REPO

PARTITIONS = 2


class Writer:
    """``fn``: writes event ids with ParquetSink (fenced); can hold its next call inside ``fn``,
    before writing, until the test lets it go."""

    def __init__(self, path: str) -> None:
        self.sink = ParquetSink(path)
        self.calls: list[tuple[int, list[str]]] = []  # batch id, slices published
        self.hold_next = False
        self.entered = threading.Event()
        self.go = threading.Event()

    def __call__(self, df: Any, batch_id: int, fence: Any = None) -> None:
        if self.hold_next:
            self.hold_next = False
            self.entered.set()
            assert self.go.wait(120), "the test never let fn go on"
        result = self.sink.write(event_ids(df), batch_id, *fenced(fence))
        self.calls.append((batch_id, published(result)))


class PlainWriter(Writer):
    """The same as a plain ``fn(df, batch_id)``: it never sees the fence, ParquetSink finds it."""

    def __call__(self, df: Any, batch_id: int) -> None:  # type: ignore[override]
        super().__call__(df, batch_id)


class Feed:
    """Events produced into a topic, with the (partition, offset) of each id."""

    def __init__(self, topic: str, produce: Any) -> None:
        self.topic = topic
        self._produce = produce
        self.position: dict[str, tuple[int, int]] = {}
        self._seed = 0

    def add(self, count: int) -> None:
        self._seed += 1
        events = generate_events(count, seed=100 + self._seed)
        # Ids are unique per seed only: make them unique across the whole feed.
        for e in events:
            e["id"] = f"{self._seed}-{e['id']}"
        # Round robin, so each partition gets exactly its share and offsets are predictable.
        batch = [(i % PARTITIONS, e["user"].encode(), encode(e)) for i, e in enumerate(events)]
        offsets = self._produce(self.topic, batch)
        for e, record, offset in zip(events, batch, offsets, strict=True):
            self.position[e["id"]] = (record[0], offset)


def start(spark: Any, zk_connect: str, kafka_config: dict[str, Any], topic: str, fn: Any, **channel: Any) -> tuple[InboundChannel, SparkMicroBatchProcessor]:
    processor = SparkMicroBatchProcessor(
        fn, value_format="json", schema=EVENT_SCHEMA, max_events=10_000, max_interval_ms=300, spark=spark
    )
    config = channel_config(zk_connect, kafka_config, [topic], batch_max_events=200, **channel)
    channel_ = InboundChannel.from_dict(config, processor=processor)
    channel_.start()
    return channel_, processor


def committed(zk: KazooClient, topic: str) -> dict[int, int]:
    return OffsetStore(zk, GroupPaths("g")).read_all(topic)


def copies(path: str, feed: Feed) -> dict[tuple[int, int], int]:
    """How many times each (partition, offset) is in the output."""
    out: Counter[tuple[int, int]] = Counter()
    for ident, _ in read_ids(path):
        out[feed.position[ident]] += 1
    return dict(out)


def test_backward_reset_after_everything_committed_commits_again(spark, zk, zk_connect, kafka_config, topic_factory, produce, tmp_path) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    feed = Feed(topic, produce)
    feed.add(1_000)
    out = str(tmp_path / "events")
    fn = Writer(out)
    channel, processor = start(spark, zk_connect, kafka_config, topic, fn)
    try:
        wait_until(lambda: committed(zk, topic) == {0: 500, 1: 500}, timeout=120, what="everything committed")
        before = max(b for b, _ in fn.calls)
        reset_offsets(channel.config, topic, 200, timeout=60)
        wait_until(
            lambda: committed(zk, topic) == {0: 500, 1: 500} and processor.stats()["events"] == 1_600,
            timeout=120,
            what="micro-batches to commit again up to the log end",
        )
    finally:
        assert channel.shutdown()
    again = {b for b, _ in fn.calls if b > before}
    assert again, "no micro-batch ran after the reset"
    expected = {pos: 2 if pos[1] >= 200 else 1 for pos in feed.position.values()}
    assert copies(out, feed) == expected


@pytest.mark.parametrize("writer", [Writer, PlainWriter], ids=["fn with the fence", "fn(df, batch_id)"])
@pytest.mark.parametrize("to", ["backward", "forward"])
def test_reset_while_a_micro_batch_is_in_fn(
    spark, zk, zk_connect, kafka_config, topic_factory, produce, tmp_path, to, writer
) -> None:
    """The micro-batch inside ``fn`` when the reset lands was gathered from the old position:
    it must neither commit its end over the reset nor publish its slices, whether or not the
    batch function takes the fence."""
    topic = topic_factory(partitions=PARTITIONS)
    feed = Feed(topic, produce)
    feed.add(1_000)  # offsets 0..499 per partition
    out = str(tmp_path / "events")
    fn = writer(out)
    channel, processor = start(spark, zk_connect, kafka_config, topic, fn)
    try:
        wait_until(lambda: committed(zk, topic) == {0: 500, 1: 500}, timeout=120, what="the first half committed")
        fn.hold_next = True
        feed.add(1_000)  # offsets 500..999
        assert fn.entered.wait(120), "no micro-batch of the second half reached fn"
        held = processor.collector.running
        assert held is not None and held.batch_id is not None
        target = 200 if to == "backward" else "latest"
        reset_offsets(channel.config, topic, target, timeout=60)
        assert committed(zk, topic) == ({0: 200, 1: 200} if to == "backward" else {0: 1_000, 1: 1_000})
        fn.go.set()
        if to == "forward":
            feed.add(200)  # offsets 1000..1099: read after the reset
        end = 1_000 if to == "backward" else 1_100
        wait_until(
            lambda: committed(zk, topic) == {0: end, 1: end} and processor.collector.running is None,
            timeout=120,
            what="every offset committed after the reset",
        )
    finally:
        fn.go.set()
        assert channel.shutdown()
    assert [p for b, p in fn.calls if b == held.batch_id] == [[]], "the batch running at the reset published"
    if to == "backward":
        # Before 200: once; 200..499: once before the reset and once after; 500..: after it only.
        expected = {pos: 2 if 200 <= pos[1] < 500 else 1 for pos in feed.position.values()}
    else:
        # The second half was skipped by the reset; the third half comes after it.
        expected = {pos: 1 for pos in feed.position.values() if not 500 <= pos[1] < 1_000}
    assert copies(out, feed) == expected


def truncate(kafka_config: dict[str, Any], topic: str, before: int) -> None:
    admin = AdminClient(dict(kafka_config))
    for future in admin.delete_records([TopicPartition(topic, p, before) for p in range(PARTITIONS)]).values():
        future.result(timeout=10)


@pytest.mark.parametrize("policy", ["earliest", "latest", "fail"])
def test_out_of_range_moves_the_micro_batches_on(spark, zk, zk_connect, kafka_config, topic_factory, produce, tmp_path, policy) -> None:
    """A partition registered and streaming runs out of range: retention deleted the log below
    offset 50, and the partition is moved to offset 10. After the policy's move (or the reset
    lifting a ``fail`` halt) micro-batches commit again from the new position."""
    topic = topic_factory(partitions=PARTITIONS)
    feed = Feed(topic, produce)
    feed.add(200)  # offsets 0..99 per partition
    out = str(tmp_path / "events")
    fn = Writer(out)
    channel, processor = start(spark, zk_connect, kafka_config, topic, fn, on_out_of_range=policy)
    try:
        wait_until(lambda: committed(zk, topic) == {0: 100, 1: 100}, timeout=120, what="the first records committed")
        truncate(kafka_config, topic, 50)
        for p in range(PARTITIONS):
            channel.reposition(topic, p, 10)  # below the log's start: the next fetch is out of range
        again_from, end = {"earliest": (50, 100), "latest": (100, 120), "fail": (60, 100)}[policy]
        if policy == "fail":
            wait_until(
                lambda: sum(1 for p in channel.partitions() if p.halted) == PARTITIONS, timeout=60, what="both halted"
            )
            reset_offsets(channel.config, topic, again_from, timeout=60)
        wait_until(
            lambda: committed(zk, topic) == {0: again_from, 1: again_from} or committed(zk, topic) == {0: end, 1: end},
            timeout=60,
            what="the move",
        )
        if policy == "latest":
            feed.add(40)  # offsets 100..119
        wait_until(
            lambda: committed(zk, topic) == {0: end, 1: end} and processor.collector.running is None,
            timeout=120,
            what="micro-batches committed to the end",
        )
        out_of_range = sum(n for (_, kind), n in channel.stats.errors.items() if kind == "offset_out_of_range")
        assert out_of_range == PARTITIONS, f"{out_of_range} out-of-range fetches reported"
    finally:
        assert channel.shutdown()
    # Before the move: 0..99 once each. After it: again from the new position.
    expected = {pos: 2 if again_from <= pos[1] < 100 else 1 for pos in feed.position.values()}
    assert copies(out, feed) == expected


def test_reset_applied_at_take_over_abandons_the_pending_range(spark, zk, zk_connect, kafka_config, topic_factory, produce, tmp_path) -> None:
    """An owner that died between writing micro-batch 1 and committing it left a pending range
    (partition 0, offsets 0..299) and its output; a reset to 200 is active, its command process
    gone, when the partitions' next owner takes them and applies it at take-over. The pending
    range is abandoned, not replayed; everything from 200 is read into new micro-batches."""
    topic = topic_factory(partitions=PARTITIONS)
    feed = Feed(topic, produce)
    feed.add(1_000)
    out = str(tmp_path / "events")
    paths = GroupPaths("g")

    # The previous owner: a session of its own holding both partitions, a recorded batch 1 for
    # partition 0, and batch 1's output written.
    previous = KazooClient(hosts=zk_connect)
    previous.start(timeout=15)
    ledger = MicroBatchLedger(previous, paths, "previous-owner")
    ledger.prepare([topic])
    ownership = PartitionOwnership(previous, paths, "previous-owner")
    previous.ensure_path(paths.owners(topic))
    previous.ensure_path(paths.offset(topic, 0).rsplit("/", 1)[0])
    for p in range(PARTITIONS):
        assert ownership.take(topic, p) is not None
    previous.set(ledger.counter_path, b"2")
    previous.create(ledger.pending_path(topic, 0), encode_pending(1, 0, 300, "previous-owner"))
    first = sorted((i, pos[1]) for i, pos in feed.position.items() if pos[0] == 0 and pos[1] < 300)
    rows = spark.createDataFrame([(topic, 0, off, i) for i, off in first], "topic STRING, partition INT, offset LONG, id STRING")
    ParquetSink(out).write(rows, 1)

    # The reset command is created, then its process dies: only an owner can apply it now.
    config_path = tmp_path / "group.yaml"
    config = channel_config(zk_connect, kafka_config, [topic])
    config_path.write_text(yaml.safe_dump(config))
    command = subprocess.Popen(
        [sys.executable, "-m", "jetkafka", "offsets", "reset", "--config", str(config_path), "--topic", topic,
         "--to", "200", "--timeout", "300"],
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    commands = paths.root + "/commands"
    try:
        wait_until(
            lambda: previous.exists(commands) and any(c.startswith("reset-") for c in previous.get_children(commands)),
            timeout=60,
            what="the reset command node",
        )
    finally:
        os.kill(command.pid, signal.SIGKILL)
        command.wait(10)

    fn = Writer(out)
    channel, processor = start(spark, zk_connect, kafka_config, topic, fn)
    try:
        previous.stop()  # the previous owner's session ends: its owner nodes go
        previous.close()
        wait_until(lambda: committed(zk, topic) == {0: 500, 1: 500}, timeout=120, what="every offset committed")
        wait_until(lambda: processor.collector.running is None, timeout=30, what="the driver idle")
        (name,) = [c for c in zk.get_children(commands) if c.startswith("reset-")]
        done = zk.get_children(f"{commands}/{name}/done")
        by = {int(d): yaml.safe_load(zk.get(f"{commands}/{name}/done/{d}")[0])["by"] for d in done}
        assert by == {p: channel.consumer_id for p in range(PARTITIONS)}, "not applied at take-over by the new owner"
        assert not zk.exists(ledger.pending_path(topic, 0)), "the abandoned pending range is still there"
    finally:
        assert channel.shutdown()
    assert 1 not in {b for b, _ in fn.calls}, "micro-batch 1 was replayed"
    expected = {pos: 1 for pos in feed.position.values() if pos[1] >= 200}
    for _, off in first:
        expected[(0, off)] = expected.get((0, off), 0) + 1
    assert copies(out, feed) == expected
