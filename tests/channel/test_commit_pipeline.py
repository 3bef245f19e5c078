"""Pipelined commits: advance() does not wait for ZooKeeper, and nothing it sent goes astray."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from kazoo.client import KazooClient

from jetkafka import (
    BatchEventProcessor,
    BatchResponse,
    EventBatch,
    InboundChannel,
    PartitionSnapshot,
    PartitionSource,
)
from jetkafka.channel._context import ChannelContext
from tests.support.channels import make_channel, values, wait_until
from tests.support.group_watch import committed, offset_nodes

_ADVANCE = BatchResponse.advance()


class FastAdvance(BatchEventProcessor):
    """Advances every batch at once; counts events; keeps no termination commit of its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offsets: dict[int, list[int]] = {}
        self.context: ChannelContext | None = None
        self.unlanded: list[tuple[int, int, int | None]] = []  # partition, next offset, committed then

    def on_start(self, context: ChannelContext) -> None:
        self.context = context

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        with self.lock:
            self.offsets.setdefault(source.partition, []).extend(e.offset for e in events)
        return _ADVANCE

    def on_batch_processed(self, source: PartitionSource) -> None:
        assert self.context is not None
        landed = self.context.committed(source.topic, source.partition)
        if landed != source.next_offset:
            with self.lock:
                self.unlanded.append((source.partition, source.next_offset, landed))

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.offsets.values())


def test_commits_coalesce_and_the_last_one_lands(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(2000, 2))
    proc = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=5) as channel:
        wait_until(lambda: committed(zk, topic) == {0: 1000, 1: 1000}, what="every offset committed")
        wait_until(lambda: all(p.committed == 1000 for p in channel.partitions()), what="the answers applied")
        assert channel.partitions() == [PartitionSnapshot(topic, p, 1000, 1000, 0, False, None) for p in (0, 1)]
    assert {p: sorted(set(o)) == list(range(1000)) for p, o in proc.offsets.items()} == {0: True, 1: True}
    # 200 batches per partition; while one commit travels the next ones wait and merge.
    writes = {p: version for p, (_, version) in offset_nodes(zk, topic).items()}
    assert all(w < 200 for w in writes.values()), writes
    assert proc.unlanded, "every commit had landed before on_batch_processed: nothing was pipelined"


def assert_next_owner_starts_at(
    zk_connect: str, kafka_config: dict[str, Any], topic: str, produce: Any, offset: int
) -> None:
    """A new channel on ``topic`` gets only an event produced now, at ``offset`` of partition 0:
    it re-reads nothing its predecessor processed."""
    second = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, second):
        produce(topic, [(0, b"k", b"after")])
        wait_until(lambda: second.count() == 1, what="the event produced after the hand-off")
        time.sleep(0.5)
    assert second.offsets == {0: [offset]}, "the next owner re-read events already processed"


def hold_commit_answers(channel: InboundChannel) -> threading.Event:
    """Keep the answers to the channel's commits from being applied until the event is set:
    the next commit stays in flight and later advances wait behind it."""
    gate = threading.Event()
    client = channel._controller.client  # type: ignore[union-attr]
    client.handler.completion_queue.put(lambda: gate.wait(30))
    return gate


def test_graceful_shutdown_commits_what_was_in_flight_or_waiting(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(400, 2))
    first = FastAdvance()
    # Each advance is sent as soon as the commit before it is answered (no interval), so the
    # held answer below is what keeps the later ones waiting.
    channel = make_channel(zk_connect, kafka_config, topic, first, batch_max_events=2, commit_interval_ms=0)
    channel.start()
    wait_until(lambda: committed(zk, topic) == {0: 200, 1: 200}, what="first events committed")
    gate = hold_commit_answers(channel)
    produce(topic, values(4000, 2, start=400))
    wait_until(lambda: first.count() == 4400, what="all events processed")
    # One commit per partition went out and landed; its answer is held up, so nothing followed.
    assert all(offset < 2200 for offset in committed(zk, topic).values())
    stopping = threading.Thread(target=channel.shutdown, kwargs={"timeout": 30})
    stopping.start()
    time.sleep(0.3)
    gate.set()
    stopping.join(30)
    assert not stopping.is_alive()
    # The processor returns None from on_stream_termination: the release still writes the
    # newest advance, after the one in flight was answered.
    assert committed(zk, topic) == {0: 2200, 1: 2200}
    assert_next_owner_starts_at(zk_connect, kafka_config, topic, produce, 2200)


def test_without_pipelining_each_commit_lands_before_the_next_batch(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, values(400, 2))
    proc = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=5, pipelined_commits=False):
        wait_until(lambda: committed(zk, topic) == {0: 200, 1: 200}, what="every offset committed")
    assert proc.count() == 400
    assert proc.unlanded == []
    versions = {p: version for p, (_, version) in offset_nodes(zk, topic).items()}
    assert versions == {0: 42, 1: 42}, versions  # take-over, first commit, then one write per batch


def test_reposition_is_not_overwritten_by_a_commit_still_travelling(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(300, 1))
    proc = FastAdvance()
    channel = make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=10)
    channel.start()
    try:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition taken")
        gate = hold_commit_answers(channel)
        produce(topic, values(300, 1, start=300))
        wait_until(lambda: proc.count() >= 600, what="all events processed")
        channel.pause(topic, 0)
        moved = threading.Thread(target=channel.reposition, args=(topic, 0, 100))
        moved.start()
        time.sleep(0.3)
        gate.set()
        moved.join(30)
        assert not moved.is_alive()
        time.sleep(0.5)
        assert committed(zk, topic) == {0: 100}, "a commit sent before the reposition landed after it"
        channel.resume(topic, 0)
        wait_until(lambda: committed(zk, topic) == {0: 600}, what="re-read from 100 and committed")
        assert proc.offsets[0].count(100) == 2 and proc.offsets[0].count(99) == 1
    finally:
        channel.shutdown(timeout=30)


def test_commit_interval_spaces_the_commits_and_the_last_one_lands_when_traffic_stops(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    proc = FastAdvance()
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=5, commit_interval_ms=400) as channel:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0)], what="partition taken")
        wait_until(lambda: committed(zk, topic) == {0: 0}, what="the first commit")
        _, before = offset_nodes(zk, topic)[0]
        started = time.monotonic()
        for chunk in range(20):  # 20 events every 100 ms for 2 s: about 80 batches of 5
            produce(topic, values(20, 1, start=20 * chunk))
            time.sleep(0.1)
        # The partition goes quiet with its newest advance waiting: the interval still sends it.
        wait_until(lambda: committed(zk, topic) == {0: 400}, timeout=5, what="the last advance committed")
        elapsed = time.monotonic() - started
        _, after = offset_nodes(zk, topic)[0]
    assert proc.count() == 400
    # One write per 400 ms at most (plus the one sent at once after a quiet spell), where one
    # per batch would be about 80.
    assert 2 <= after - before <= elapsed / 0.4 + 2, (after - before, elapsed)


def test_a_graceful_release_commits_the_advance_waiting_for_its_interval(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    first = FastAdvance()
    channel = make_channel(zk_connect, kafka_config, topic, first, batch_max_events=10, commit_interval_ms=60_000)
    channel.start()
    try:
        wait_until(lambda: committed(zk, topic) == {0: 0, 1: 0}, what="first commits")
        produce(topic, values(400, 2))
        wait_until(lambda: first.count() == 400, what="all events processed")
        time.sleep(0.5)
        # The first advance went out at once; every later one waits for the minute to pass.
        assert all(offset < 200 for offset in committed(zk, topic).values()), committed(zk, topic)
    finally:
        channel.shutdown(timeout=30)
    assert committed(zk, topic) == {0: 200, 1: 200}
    assert_next_owner_starts_at(zk_connect, kafka_config, topic, produce, 200)


class WatchesLandedCommits(FastAdvance):
    """Notes the landed commit of the partition at every batch, which takes half a millisecond."""

    def __init__(self) -> None:
        super().__init__()
        self.landed: list[int | None] = []

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        assert self.context is not None
        self.landed.append(self.context.committed(source.topic, source.partition))
        time.sleep(0.0005)
        return super().on_next_batch(source, events)


def test_commits_never_go_back_while_advances_cross_the_interval(
    zk_connect: str, zk: KazooClient, kafka_config: dict[str, Any], topic_factory: Any, produce: Any
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(5000, 1))
    proc = WatchesLandedCommits()
    # Batches of one event and a 1 ms interval: advances are held and sent, by the worker and
    # by the timer, every few batches; an advance sent at once must replace a held older one.
    with make_channel(zk_connect, kafka_config, topic, proc, batch_max_events=1, commit_interval_ms=1):
        wait_until(lambda: committed(zk, topic) == {0: 5000}, timeout=60, what="every event committed")
    assert proc.count() == 5000
    landed = [c for c in proc.landed if c is not None]
    assert len(set(landed)) > 20, "too few commits landed while batches ran to show anything"
    backwards = [(a, b) for a, b in itertools.pairwise(landed) if b < a]
    assert backwards == [], f"an older offset landed after a newer one: {backwards[:5]}"
